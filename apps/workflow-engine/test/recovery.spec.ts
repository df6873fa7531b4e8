import { setTimeout as sleep } from 'node:timers/promises';
import { eventually } from '@gantry/testing';
import type { RunningApp } from '@gantry/testing';
import { expectDiscreteFields } from './expectations.js';
import { WorkflowWorld } from './harness.js';

/*
 * Crashes, restarts and the startup scan (docs/workflow-engine.md, "Recovery"): V15, V16, V17,
 * V18, V24, V26, V29, V37, V40. A crash is a real SIGKILL of the engine process at a fault point
 * of the dispatch; the restart is a new process on the same schema.
 */
const declaration = (fanOut = '{ role: reviewer, reason: review_started }', more = '') => `
name: Recovery
steps:
  - id: work
    name: Work
  - id: review
    name: Review
    participants:
      - { id: seat-a, role: reviewer, agent_profile_id: rev-a, decision_required: false }
      - { id: seat-b, role: reviewer, agent_profile_id: rev-b, decision_required: false, position: 1 }
    on_enter:
      - type: reset_agent_context
      - type: clear_decisions${more}
      - type: queue_run_for_each_participant
        config: ${fanOut}
      - type: auto_start_agent
  - id: done
    name: Done
`;

describe('crash recovery and the startup scan', () => {
  const world = new WorkflowWorld('wf_recovery');

  async function restart(env: Record<string, string> = {}): Promise<RunningApp> {
    for (const engine of world.engines) if (engine.process.exitCode === null && engine.process.signalCode === null) await engine.kill('SIGKILL');
    return world.startEngine(env);
  }

  async function counts(taskId: string, workflowId: string, entrySeq = 1) {
    const effects = await world.effects(taskId);
    const ofEntry = (type: string) => effects.filter((e) => e.type === type && e.data.entrySeq === entrySeq && e.streamId === world.pairStream(taskId, workflowId, 'review'));
    return {
      clears: ofEntry('DecisionsCleared').length,
      resets: effects.filter((e) => e.type === 'AgentContextReset').length,
      autoStarts: effects.filter((e) => e.type === 'AgentAutoStarted').length,
      reviewJobs: (await world.jobs(taskId, 'REVIEW')).map((j) => j.agentProfileId).sort(),
    };
  }

  beforeAll(async () => {
    await world.start();
    for (const p of ['rev-a', 'rev-b', 'code-reviewer']) await world.profile(p);
    await world.importYaml('rec', declaration());
    // two services started and made ready: on a loaded machine each may take a minute or more
  }, 300_000);
  afterAll(() => world.close(), 60_000);

  it.each([
    ['the clear claimed, not executed', 'claimed:1'],
    ['the clear done', 'finished:1'],
    ['the fan-out claimed', 'claimed:2'],
    ['one of two runs queued', 'run:2:1'],
    ['every run queued, the marker not written', 'effect:2'],
    ['the fan-out marked, the entry not yet terminal', 'finished:2'],
  ])('V40 / V15 AC-B8: SIGKILL between actions (%s) → after a restart the entry completes with one clear and one job per participant, and no session action runs again', async (_label, point) => {
    const { taskId } = await world.task('rec');
    const doomed = await restart({ GANTRY_TEST_WORKFLOW_KILL_AT: `${taskId}@review#1/${point}` });
    await world.moveUntilKilled(taskId, 'review', doomed);
    await restart();
    const entry = await world.terminalEntry(taskId, 'review', 1);
    expect(entry.termination).toBe('completed');
    expect(await counts(taskId, 'rec')).toEqual({ clears: 1, resets: 1, autoStarts: 0, reviewJobs: ['rev-a', 'rev-b'] });
  }, 300_000);

  it('V14 AC-B4: the run queue answering an identical key with the existing job is a success, not retried, counted as suppressed', async () => {
    const { taskId } = await world.task('rec');
    const doomed = await restart({ GANTRY_TEST_WORKFLOW_KILL_AT: `${taskId}@review#1/run:2:1` });
    await world.moveUntilKilled(taskId, 'review', doomed);
    const engine = await restart();
    const entry = await world.terminalEntry(taskId, 'review', 1);
    const fanOut = entry.markers.find((m) => m.position === 2)!;
    expect(fanOut.state).toBe('done');
    expect(fanOut.runs.map((r) => [r.agentProfileId, r.outcome])).toEqual([['rev-a', 'deduplicated'], ['rev-b', 'created']]);
    await world.logged((r) => r.rule === 'AC-G1' && r.taskId === taskId, 'AC-G1', engine);
    expect(world.records(engine).filter((r) => r.rule === 'AC-G1' && r.taskId === taskId)).toEqual([expect.objectContaining({ matching: 2, enqueued: 2, suppressed: 1, failed: 0 })]);
    expect((await world.jobs(taskId, 'REVIEW')).map((j) => j.agentProfileId)).toEqual(['rev-a', 'rev-b']);
  });

  it('a run queued before a crash is not queued again when the entry resumes after the job service\'s 24-hour window for its key has passed', async () => {
    const { taskId } = await world.task('rec');
    const doomed = await restart({ GANTRY_TEST_WORKFLOW_KILL_AT: `${taskId}@review#1/run:2:1` });
    await world.moveUntilKilled(taskId, 'review', doomed);
    // The entry resumes only at the next start or takeover, which may come days later: by then the
    // job service's receipt of the first run's key (24 hours) has expired, as if a day had passed.
    await world.jobsDb.query(`UPDATE idempotency_receipts SET expires_at = now() - interval '1 second' WHERE scope = 'jobs.enqueue_job'`);
    await restart();
    const entry = await world.terminalEntry(taskId, 'review', 1);
    expect(entry.markers.find((m) => m.position === 2)!.runs.map((r) => [r.agentProfileId, r.outcome])).toEqual([['rev-a', 'deduplicated'], ['rev-b', 'created']]);
    expect((await world.jobs(taskId, 'REVIEW')).map((j) => j.agentProfileId)).toEqual(['rev-a', 'rev-b']);
  });

  it('V16 AC-B9: a restart resumes at the first non-terminal position and takes over the claim a gone process left', async () => {
    const { taskId } = await world.task('rec');
    const doomed = await restart({ GANTRY_TEST_WORKFLOW_KILL_AT: `${taskId}@review#1/claimed:2` });
    await world.moveUntilKilled(taskId, 'review', doomed);
    const survivor = await restart();
    await world.terminalEntry(taskId, 'review', 1);
    const claims = (await world.events(world.pairStream(taskId, 'rec', 'review'))).filter((e) => e.type === 'OnEnterActionClaimed');
    expect(claims.map((c) => [c.data.position, c.data.takenOverFrom === null])).toEqual([[1, true], [2, true], [2, false]]);
    expect(claims[2]!.data.takenOverFrom).toBe(claims[1]!.data.epoch);
    expect(claims[2]!.data.epoch).not.toBe(claims[1]!.data.epoch);
    await world.logged((r) => r.message === 'step entry dispatched' && r.taskId === taskId, 'the dispatch', survivor);
    expect(world.records(survivor).find((r) => r.message === 'step entry dispatched' && r.taskId === taskId)).toMatchObject({ mode: 'resume', outcome: 'completed' });
    expect((await counts(taskId, 'rec')).clears).toBe(1);
  });

  it('V16 AC-B9(b): an entry whose clear_decisions failed is made terminal by the scan and not resumed', async () => {
    const { taskId } = await world.task('rec');
    await restart({ GANTRY_TEST_WORKFLOW_FAIL: 'action:clear_decisions' });
    await world.move(taskId, 'review');
    await eventually(async () => (await world.entries(taskId, 'review'))[0]?.markers[0]?.state === 'failed', { what: 'the clear failed' });
    await restart();
    const entry = await world.terminalEntry(taskId, 'review', 1);
    expect(entry.termination).toBe('clear_decisions_failed');
    expect(entry.markers.map((m) => m.state)).toEqual(['failed', 'absent']);
    expect(await world.jobs(taskId, 'REVIEW')).toEqual([]);
  });

  it('V16 AC-B9(a1): an entry the task has left is skipped(step_left) and its actions do not run', async () => {
    const { taskId } = await world.task('rec');
    const engine = await restart({ GANTRY_TEST_WORKFLOW_HOLD_AT: `${taskId}@review#1/claimed:1` });
    await world.move(taskId, 'review');
    await world.reachedHold(`${taskId}@review#1__claimed:1`);
    await world.move(taskId, 'done');
    await engine.kill('SIGKILL');
    await restart();
    const entry = await world.terminalEntry(taskId, 'review', 1);
    expect(entry.termination).toBe('step_left');
    expect(entry.markers.map((m) => [m.state, m.skipReason])).toEqual([['skipped', 'step_left'], ['skipped', 'step_left']]);
    expect(await counts(taskId, 'rec')).toMatchObject({ clears: 0, reviewJobs: [] });
  });

  it('V24 AC-B9(a2): an older entry left in progress by a previous process and a newer current one — the older is superseded (its clear never runs), the newer resumes', async () => {
    const { taskId } = await world.task('rec');
    const engine = await restart({ GANTRY_TEST_WORKFLOW_HOLD_AT: `${taskId}@review#1/claimed:1,${taskId}@review#2/claimed:2` });
    await world.move(taskId, 'review');
    await world.reachedHold(`${taskId}@review#1__claimed:1`);
    await world.move(taskId, 'work');
    await world.move(taskId, 'review');
    await world.reachedHold(`${taskId}@review#2__claimed:2`);
    await engine.kill('SIGKILL');
    await restart();
    const second = await world.terminalEntry(taskId, 'review', 2);
    const first = await world.terminalEntry(taskId, 'review', 1);
    expect(first.termination).toBe('superseded');
    expect(first.markers.map((m) => [m.state, m.skipReason])).toEqual([['skipped', 'superseded'], ['skipped', 'superseded']]);
    expect(second.termination).toBe('completed');
    expect((await counts(taskId, 'rec', 1)).clears).toBe(0);
    expect((await counts(taskId, 'rec', 2)).clears).toBe(1);
    expect((await world.jobs(taskId, 'REVIEW')).map((j) => j.agentProfileId)).toEqual(['rev-a', 'rev-b']);
  });

  it('V17 AC-B9(d): an action of the same kind inserted earlier after the clear committed → declaration_changed, one warning, and no second clear commits', async () => {
    await world.importYaml('ins', declaration());
    const { taskId } = await world.task('ins');
    const engine = await restart({ GANTRY_TEST_WORKFLOW_HOLD_AT: `${taskId}@review#1/finished:1` });
    await world.move(taskId, 'review');
    await world.reachedHold(`${taskId}@review#1__finished:1`);
    await world.importYaml('ins', declaration(undefined, '\n      - type: clear_decisions'));
    await engine.kill('SIGKILL');
    const next = await restart();
    const entry = await world.terminalEntry(taskId, 'review', 1);
    expect(entry.termination).toBe('declaration_changed');
    expect(entry.markers.map((m) => [m.position, m.kind, m.state, m.skipReason])).toEqual([
      [1, 'clear_decisions', 'done', null],
      [2, 'clear_decisions', 'skipped', 'declaration_changed'],
      [3, 'queue_run_for_each_participant', 'skipped', 'declaration_changed'],
    ]);
    expect((await counts(taskId, 'ins')).clears).toBe(1);
    expect(await world.jobs(taskId, 'REVIEW')).toEqual([]);
    await world.logged((r) => r.rule === 'AC-B9(d)' && r.taskId === taskId, 'AC-B9(d)', next);
    const warnings = world.records(next).filter((r) => r.rule === 'AC-B9(d)' && r.taskId === taskId);
    expect(warnings).toHaveLength(1);
    expectDiscreteFields(warnings[0], { workflowId: 'ins', stepId: 'review', taskId, entryDigest: entry.declarationDigest });
  });

  it('V17 AC-B9(d): an action removed after the clear committed → nothing runs under a marker of another action', async () => {
    await world.importYaml('rem', declaration());
    const { taskId } = await world.task('rem');
    const engine = await restart({ GANTRY_TEST_WORKFLOW_HOLD_AT: `${taskId}@review#1/finished:1` });
    await world.move(taskId, 'review');
    await world.reachedHold(`${taskId}@review#1__finished:1`);
    // the clear removed: the fan-out moves to position 1, where the clear's done marker is
    await world.importYaml('rem', declaration().replace('      - type: clear_decisions\n', ''));
    await engine.kill('SIGKILL');
    await restart();
    const entry = await world.terminalEntry(taskId, 'review', 1);
    expect(entry.termination).toBe('declaration_changed');
    expect(await world.jobs(taskId, 'REVIEW')).toEqual([]);
  });

  it('V17: only an action\'s config changed (kinds and order the same) → the entry is not terminalised and its remaining actions run', async () => {
    await world.importYaml('cfg', declaration());
    const { taskId } = await world.task('cfg');
    const engine = await restart({ GANTRY_TEST_WORKFLOW_HOLD_AT: `${taskId}@review#1/finished:1` });
    await world.move(taskId, 'review');
    await world.reachedHold(`${taskId}@review#1__finished:1`);
    await world.importYaml('cfg', declaration('{ role: reviewer, reason: changed_reason }'));
    await engine.kill('SIGKILL');
    await restart();
    const entry = await world.terminalEntry(taskId, 'review', 1);
    expect(entry.termination).toBe('completed');
    expect((await world.jobs(taskId, 'REVIEW')).map((j) => [j.agentProfileId, j.reason])).toEqual([['rev-a', 'changed_reason'], ['rev-b', 'changed_reason']]);
  });

  it('a fan-out cut short by a crash and resumed after a re-import changed only its config queues nothing again for a participant it had queued', async () => {
    await world.importYaml('cfg-run', declaration());
    const { taskId } = await world.task('cfg-run');
    const engine = await restart({ GANTRY_TEST_WORKFLOW_HOLD_AT: `${taskId}@review#1/run:2:1` });
    await world.move(taskId, 'review');
    await world.reachedHold(`${taskId}@review#1__run:2:1`);
    await world.importYaml('cfg-run', declaration('{ role: reviewer, reason: changed_reason }'));
    await engine.kill('SIGKILL');
    await restart();
    const entry = await world.terminalEntry(taskId, 'review', 1);
    expect(entry.termination).toBe('completed');
    // rev-a's run was queued before the crash, under the config then; only rev-b's is left to queue.
    expect((await world.jobs(taskId, 'REVIEW')).map((j) => [j.agentProfileId, j.reason]).sort()).toEqual([['rev-a', 'review_started'], ['rev-b', 'changed_reason']]);
    expect(entry.markers.find((m) => m.position === 2)!.runs.map((r) => [r.agentProfileId, r.outcome])).toEqual([['rev-a', 'deduplicated'], ['rev-b', 'created']]);
  });

  it('V37: a declaration re-imported between two positions of one dispatch — the dispatch finishes the version it read at its start', async () => {
    await world.importYaml('once', declaration());
    const { taskId } = await world.task('once');
    await restart({ GANTRY_TEST_WORKFLOW_HOLD_AT: `${taskId}@review#1/finished:1` });
    await world.move(taskId, 'review');
    await world.reachedHold(`${taskId}@review#1__finished:1`);
    await world.importYaml('once', declaration('{ role: reviewer, reason: second_version }'));
    await world.releaseHold(`${taskId}@review#1__finished:1`);
    await world.terminalEntry(taskId, 'review', 1);
    expect((await world.jobs(taskId, 'REVIEW')).map((j) => j.reason)).toEqual(['review_started', 'review_started']);
  });

  it('V26: across a crash run_code_review runs a second time (at least once), reset_agent_context does not', async () => {
    await world.importYaml('cr', `
name: Code review
steps:
  - id: work
    name: Work
  - id: review
    name: Review
    on_enter:
      - type: reset_agent_context
      - type: run_code_review
        config: { agent_profile_id: code-reviewer }
`);
    const { taskId } = await world.task('cr');
    const doomed = await restart({ GANTRY_TEST_WORKFLOW_KILL_AT: `${taskId}@review#1/effect:1` });
    await world.moveUntilKilled(taskId, 'review', doomed);
    await restart();
    await world.terminalEntry(taskId, 'review', 1);
    expect((await world.enqueued(taskId)).filter((e) => e.reason === 'code_review')).toHaveLength(2);
    expect((await world.effects(taskId)).filter((e) => e.type === 'AgentContextReset')).toHaveLength(1);
  });

  it('V18 AC-B9(e): a record whose step a re-import removed is skipped(unresolvable) with a warning naming the task and the step', async () => {
    await world.importYaml('gone', declaration());
    const { taskId } = await world.task('gone');
    const engine = await restart({ GANTRY_TEST_WORKFLOW_HOLD_AT: `${taskId}@review#1/claimed:1` });
    await world.move(taskId, 'review');
    await world.reachedHold(`${taskId}@review#1__claimed:1`);
    await world.importYaml('gone', 'name: Without review\nsteps:\n  - { id: work, name: Work }\n  - { id: done, name: Done }\n');
    await engine.kill('SIGKILL');
    const next = await restart();
    const entry = await world.terminalEntry(taskId, 'review', 1);
    expect(entry.termination).toBe('unresolvable');
    expect(entry.markers.map((m) => m.skipReason)).toEqual(['unresolvable', 'unresolvable']);
    const warning = (await world.logged((r) => r.rule === 'AC-B9(e)' && r.taskId === taskId, 'AC-B9(e)', next)).find((r) => r.rule === 'AC-B9(e)' && r.taskId === taskId);
    expect(warning!.level).toBe('warn');
    expectDiscreteFields(warning, { taskId, stepId: 'review' });
    expect(await world.jobs(taskId, 'REVIEW')).toEqual([]);
  });

  it('V18 AC-B9(f): a record failing transiently is logged at ERROR and left open while the others are processed; a failing scan query does not stop the start', async () => {
    const x = (await world.task('rec')).taskId;
    const y = (await world.task('rec')).taskId;
    const engine = await restart({ GANTRY_TEST_WORKFLOW_HOLD_AT: `${x}@review#1/claimed:1,${y}@review#1/claimed:1` });
    await world.move(x, 'review');
    await world.move(y, 'review');
    await world.reachedHold(`${x}@review#1__claimed:1`);
    await world.reachedHold(`${y}@review#1__claimed:1`);
    await engine.kill('SIGKILL');

    const partial = await restart({ GANTRY_TEST_WORKFLOW_FAIL: `recovery:${x}` });
    await world.terminalEntry(y, 'review', 1);
    const error = (await world.logged((r) => r.rule === 'AC-B9(f)' && r.taskId === x, 'AC-B9(f)', partial)).find((r) => r.rule === 'AC-B9(f)' && r.taskId === x);
    expect(error).toMatchObject({ level: 'error', stepId: 'review', entrySeq: 1 });
    expect((await world.entries(x, 'review'))[0]!.terminal).toBe(false);

    // the scan's own query fails: the engine starts all the same (startApp waited for /ready)
    const blind = await restart({ GANTRY_TEST_WORKFLOW_FAIL: 'recovery-query' });
    expect((await world.logged((r) => r.rule === 'AC-B9(f)' && r.reason === 'startup', 'the failed scan query', blind)).find((r) => r.rule === 'AC-B9(f)' && r.reason === 'startup')).toMatchObject({ level: 'error' });
    expect((await world.entries(x, 'review'))[0]!.terminal).toBe(false);

    await restart();
    await world.terminalEntry(x, 'review', 1);
    expect((await world.jobs(x, 'REVIEW')).map((j) => j.agentProfileId)).toEqual(['rev-a', 'rev-b']);
  });

  it('AC-L3: a job service away for longer than the patience stops the dispatch with its claim kept and an error; once it is back the process resumes the entry by itself — the fan-out completes, auto_start_agent runs, nothing is queued twice', async () => {
    const { taskId } = await world.task('rec');
    const engine = await restart({ GANTRY_WORKFLOW_RUN_QUEUE_PATIENCE_MS: '1500' });
    await world.stopJobService();
    await world.move(taskId, 'review');
    const records = await world.logged((r) => r.rule === 'AC-L3' && r.taskId === taskId, 'the outage', engine);
    expect(records.find((r) => r.rule === 'AC-L3' && r.taskId === taskId)).toMatchObject({ level: 'error', stepId: 'review', position: 2 });
    const [open] = await world.entries(taskId, 'review');
    expect(open!.terminal).toBe(false);
    expect(open!.markers.find((m) => m.position === 2)).toMatchObject({ state: 'in_progress' });
    // the job service stays away across a scan of the stopped entries: the entry stops again there
    await world.logged((r) => r.message === 'scan of the stopped entries finished' && r.outage === 1, 'a scan meeting the job service still away', engine);
    expect(world.records(engine).filter((r) => r.message === 'the stopped entries are scanned again after a pause').length).toBeGreaterThanOrEqual(2);
    await world.startJobService();
    await world.terminalEntry(taskId, 'review', 1, { timeoutMs: 120_000 });
    await eventually(async () => ((await counts(taskId, 'rec')).autoStarts === 1 ? true : null), { what: 'auto_start_agent after the fan-out', timeoutMs: 60_000 });
    expect(await counts(taskId, 'rec')).toEqual({ clears: 1, resets: 1, autoStarts: 1, reviewJobs: ['rev-a', 'rev-b'] });
    expect(await world.jobs(taskId, 'TASK_IMPLEMENTATION')).toHaveLength(1);
    // the same process did it: no restart
    expect(engine.process.exitCode).toBeNull();
    expect(world.engines.at(-1)).toBe(engine);
  }, 240_000);

  it('AC-L3: a stop while the scan of the stopped entries waits for its time ends the process at once, and no scan runs during the stop; the next start resumes the entry', async () => {
    const { taskId } = await world.task('rec');
    const engine = await restart({ GANTRY_WORKFLOW_RUN_QUEUE_PATIENCE_MS: '8000' });
    await world.stopJobService();
    await world.move(taskId, 'review');
    await world.logged((r) => r.rule === 'AC-L3' && r.taskId === taskId && r.level === 'error', 'the outage', engine);
    const scheduled = (await world.logged((r) => r.message === 'the stopped entries are scanned again after a pause', 'the scan timed', engine))
      .find((r) => r.message === 'the stopped entries are scanned again after a pause')!;
    expect(scheduled.delayMs).toBeGreaterThanOrEqual(6_000);
    const stopping = Date.now();
    expect(await engine.kill('SIGTERM')).toBe(0);
    expect(Date.now() - stopping).toBeLessThan(scheduled.delayMs as number);
    expect(world.records(engine).filter((r) => r.message === 'scan of the stopped entries finished')).toEqual([]);
    await world.startJobService();
    await restart();
    await world.terminalEntry(taskId, 'review', 1);
    expect(await counts(taskId, 'rec')).toMatchObject({ clears: 1, reviewJobs: ['rev-a', 'rev-b'] });
  }, 240_000);

  it('AC-B9(a1): the move into review sent again under its key after the task has left review resumes nothing there — its open entry is skipped(step_left) and no reviewer is woken', async () => {
    const { taskId } = await world.task('rec');
    const engine = await restart();
    // the entry's dispatch stops at the fan-out (the job service does not answer), its claim kept
    await world.stopJobService();
    const key = world.key('move');
    await world.move(taskId, 'review', key);
    await world.logged((r) => r.rule === 'AC-L3' && r.taskId === taskId, 'the outage', engine);
    // the task leaves while the job service is still away: the scan of the stopped entries that comes
    // once it is back would otherwise finish the entry before the task leaves
    await world.move(taskId, 'done');
    await world.startJobService();
    // the first move's answer was lost: the caller sends it again, and it is answered as stored
    expect((await world.move(taskId, 'review', key)).entry).toMatchObject({ stepId: 'review', entrySeq: 1 });
    await world.logged((r) => r.message === 'step entry dispatched' && r.taskId === taskId && r.mode === 'resume', 'the repeated command\'s dispatch', engine);
    const [entry] = await world.entries(taskId, 'review');
    expect(entry).toMatchObject({ terminal: true, termination: 'step_left' });
    expect(entry!.markers.map((m) => [m.kind, m.state, m.skipReason])).toEqual([
      ['clear_decisions', 'done', null],
      ['queue_run_for_each_participant', 'skipped', 'step_left'],
    ]);
    expect(await world.jobs(taskId, 'REVIEW')).toEqual([]);
    expect((await world.getTask(taskId)).placement.stepId).toBe('done');
  });

  it('a clear_decisions whose append meets its stream kept busy past its patience is no failed clear: the dispatch stops with the claim kept, no AC-C2, and the next start resumes the entry', async () => {
    const { taskId } = await world.task('rec');
    // the clear claimed and held; a decision then held with its append to the same stream open
    const engine = await restart({ GANTRY_TEST_WORKFLOW_HOLD_AT: `${taskId}@review#1/claimed:1,${taskId}@review#1/quorum`, GANTRY_DB_QUERY_TIMEOUT_MS: '60000' });
    await world.move(taskId, 'review');
    await world.reachedHold(`${taskId}@review#1__claimed:1`);
    const deciding = world.decide(taskId, 'review', 'seat-a', 'approve').catch(() => undefined);
    await world.reachedHold(`${taskId}@review#1__quorum`);
    await world.releaseHold(`${taskId}@review#1__claimed:1`);
    // the clear's append waits on the decision's; it has waited past its 5 s patience when the decision commits
    await sleep(8_000);
    await world.releaseHold(`${taskId}@review#1__quorum`);
    await deciding;
    const ended = (r: { message: string; taskId?: unknown }) => r.taskId === taskId && (r.message === 'step entry dispatched' || r.message === 'step entry dispatch failed; it resumes at the next start');
    await world.logged(ended, 'the dispatch ended', engine);
    expect(world.records(engine).filter((r) => r.rule === 'AC-C2' && r.taskId === taskId)).toEqual([]);
    expect((await world.entries(taskId, 'review'))[0]!.markers.map((m) => [m.kind, m.state])).toEqual([['clear_decisions', 'in_progress'], ['queue_run_for_each_participant', 'absent']]);
    await restart();
    const entry = await world.terminalEntry(taskId, 'review', 1);
    expect(entry.markers.map((m) => [m.kind, m.state])).toEqual([['clear_decisions', 'done'], ['queue_run_for_each_participant', 'done']]);
    expect(await counts(taskId, 'rec')).toMatchObject({ clears: 1, reviewJobs: ['rev-a', 'rev-b'] });
  }, 180_000);

  it('V29 AC-B2 / AC-B5: one entry dispatched again — by the same command repeated, then after a restart — adds no clear and no run', async () => {
    const { taskId } = await world.task('rec');
    let engine = await restart();
    const key = world.key('move');
    const first = await world.move(taskId, 'review', key);
    await world.terminalEntry(taskId, 'review', 1);
    const before = (await world.events(world.pairStream(taskId, 'rec', 'review'))).length;
    const dispatched = (e: RunningApp) => world.records(e).filter((r) => r.message === 'step entry dispatched' && r.taskId === taskId);
    expect(await world.move(taskId, 'review', key)).toEqual(first);
    await eventually(() => dispatched(engine).some((r) => r.mode === 'resume'), { what: 'the repeated dispatch' });
    expect(dispatched(engine).map((r) => [r.mode, r.outcome])).toEqual([['live', 'completed'], ['resume', 'terminal']]);
    engine = await restart();
    expect(await world.move(taskId, 'review', key)).toEqual(first);
    await eventually(() => dispatched(engine).some((r) => r.mode === 'resume'), { what: 'the dispatch after the restart' });
    expect((await world.events(world.pairStream(taskId, 'rec', 'review'))).length).toBe(before);
    expect(await counts(taskId, 'rec')).toEqual({ clears: 1, resets: 1, autoStarts: 1, reviewJobs: ['rev-a', 'rev-b'] });
  });
});
