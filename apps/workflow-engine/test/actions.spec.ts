import { eventually } from '@gantry/testing';
import { expectDiscreteFields, ruleRecords } from './expectations.js';
import { WorkflowWorld, reviewYaml } from './harness.js';

/*
 * queue_run, run_code_review, clear_decisions and failure isolation, each reached through an
 * ordinary transition: V09, V10, V20, V21, V30, V33, V23 of docs/workflow-engine.md.
 */
describe('on_enter actions and their failures', () => {
  const world = new WorkflowWorld('wf_actions');

  beforeAll(async () => {
    await world.start();
    for (const p of ['rev-a', 'primary-agent', 'ceo', 'code-reviewer']) await world.profile(p);
    await world.importYaml('qr', `
name: Queue run
ceo_agent_profile_id: ceo
steps:
  - id: work
    name: Work
    on_turn_complete: [{ type: move_to_next }]
  - id: review
    name: Review
    participants: [{ id: lead, role: lead, agent_profile_id: rev-a, decision_required: true }]
    on_enter:
      - type: queue_run
        config: { target: 'participant_role:lead', reason: lead_review }
      - type: queue_run
        config: { target: primary }
      - type: queue_run
        config: { target: workspace.ceo_agent, reason: ceo_look }
      - type: queue_run
        config: { target: 'agent_profile_id:code-reviewer' }
    on_turn_complete:
      - { type: move_to_step, config: { step_id: work }, guard: { wait_for_quorum: any_reject } }
  - id: done
    name: Done
`);
  }, 120_000);
  afterAll(() => world.close(), 60_000);

  it('V09 AC-A7: queue_run on on_enter through a turn-complete transition → one run per declaration against its resolved target, keys differing between two entries, excluded from coalescing', async () => {
    const { taskId } = await world.task('qr', { primaryAgentProfileId: 'primary-agent' });
    await world.agentTurn(taskId);
    await world.terminalEntry(taskId, 'review', 1);
    const first = (await world.enqueued(taskId)).filter((e) => e.kind === 'REVIEW');
    expect(first.map((e) => [e.agentProfile!.id, e.reason, e.excludeFromCoalescing])).toEqual([
      ['rev-a', 'lead_review', true],
      ['primary-agent', 'on_enter', true],
      ['ceo', 'ceo_look', true],
      ['code-reviewer', 'on_enter', true],
    ]);
    await world.move(taskId, 'work');
    await world.agentTurn(taskId);
    await world.terminalEntry(taskId, 'review', 2);
    const all = (await world.enqueued(taskId)).filter((e) => e.kind === 'REVIEW');
    expect(all).toHaveLength(8);
    const second = all.slice(4);
    second.forEach((e, i) => {
      expect(e.agentProfile!.id).toBe(first[i]!.agentProfile!.id);
      expect(e.idempotencyKey).not.toBe(first[i]!.idempotencyKey);
    });
  });

  it('V20 AC-C3 / AC-C4 / V23: a queue_run whose target does not resolve fails with an error naming workflow, step, action type and cause; the later actions still run and the task stays at the destination', async () => {
    const { taskId } = await world.task('qr'); // no primary agent profile: `primary` does not resolve
    await world.move(taskId, 'review');
    const entry = await world.terminalEntry(taskId, 'review', 1);
    expect(entry.markers.map((m) => m.state)).toEqual(['done', 'failed', 'done', 'done']);
    expect(entry.markers[1]!.failure).toMatchObject({ cause: 'the task has no primary agent profile' });
    const [error] = ruleRecords(await world.logged((r) => r.rule === 'AC-C3' && r.taskId === taskId, 'AC-C3'), 'AC-C3', taskId);
    expect(error!.level).toBe('error');
    expectDiscreteFields(error, { workflowId: 'qr', stepId: 'review', actionType: 'queue_run', cause: 'the task has no primary agent profile' });
    expect((await world.getTask(taskId)).placement).toMatchObject({ stepId: 'review', admitted: true });
    expect((await world.jobs(taskId, 'REVIEW')).map((j) => j.agentProfileId)).toEqual(['rev-a', 'ceo', 'code-reviewer']);
  });

  it('V33 AC-C5: on a trigger other than on_enter the first failing action stops the rest (the transition after it does not happen)', async () => {
    await world.importYaml('abort', `
name: Abort on turn complete
steps:
  - id: work
    name: Work
    on_turn_complete:
      - type: queue_run
        config: { target: primary }
      - type: move_to_next
  - id: review
    name: Review
`);
    const { taskId } = await world.task('abort');
    await world.agentTurn(taskId);
    const stopped = await eventually(() => world.records().find((r) => r.rule === 'AC-C5' && r.taskId === taskId), { what: 'the trigger stopped' });
    expect(stopped).toMatchObject({ level: 'error', trigger: 'on_turn_complete', actionType: 'queue_run', position: 0 });
    expect((await world.getTask(taskId)).placement.stepId).toBe('work');
    // the same failure on on_enter does not stop the entry (previous test): continue-past-failure is on_enter's alone
  });

  it('V21 AC-F3: a decision committed before the clear is removed by it; one committed while the clear is in flight, and one after, survive beside it', async () => {
    await world.importYaml('clearing', reviewYaml(`      - type: clear_decisions
      - type: queue_run_for_each_participant
        config: { role: reviewer }`));
    const { taskId } = await world.task('clearing');
    // a seat whose decisions count for no quorum, so deciding never moves the task away
    const seat = await world.seat(taskId, 'clearing', 'review', 'reviewer', 'rev-a', { decisionRequired: false });
    await world.move(taskId, 'review');
    await world.terminalEntry(taskId, 'review', 1);
    await world.decide(taskId, 'review', seat, 'approve'); // the first entry's decision, replaced by the seat's next one
    await world.move(taskId, 'work');
    // the second entry's clear is held with its delete appended but not committed
    await world.stopEngine(world.engine, 'SIGTERM');
    await world.startEngine({ GANTRY_TEST_WORKFLOW_HOLD_AT: `${taskId}@review#2/claimed:0,${taskId}@review#2/clearing:0` });
    await world.move(taskId, 'review');
    await world.reachedHold(`${taskId}@review#2__claimed:0`);
    const committedBefore = await world.decide(taskId, 'review', seat, 'approve');
    await world.releaseHold(`${taskId}@review#2__claimed:0`);
    await world.reachedHold(`${taskId}@review#2__clearing:0`);
    const during = world.decide(taskId, 'review', seat, 'reject');
    await world.releaseHold(`${taskId}@review#2__clearing:0`);
    const inFlight = await during;
    await world.terminalEntry(taskId, 'review', 2);
    const after = await world.decide(taskId, 'review', seat, 'approve');
    const cleared = (await world.events(world.pairStream(taskId, 'clearing', 'review'))).filter((e) => e.type === 'DecisionsCleared' && e.data.entrySeq === 2);
    expect(cleared).toHaveLength(1);
    // The clear removes what counted before it: the seat's decision committed before it. The first entry's
    // decision no longer counted (the same seat's later one replaced it), so it is not listed again.
    expect(cleared[0]!.data.clearedDecisionIds).toEqual([committedBefore.decisionId]);
    // Neither decision from before the clear counts after it; the one in flight and the one after survive beside it.
    expect((await world.getTask(taskId)).decisions.map((d) => d.decisionId)).toEqual([inFlight.decisionId, after.decisionId]);
  });

  it('V30 AC-B6: the clear and its done marker are one event — no separate finish is ever written for a clear', async () => {
    const { taskId } = await world.task('clearing');
    await world.move(taskId, 'review');
    await world.terminalEntry(taskId, 'review', 1);
    const events = await world.events(world.pairStream(taskId, 'clearing', 'review'));
    const clearEvents = events.filter((e) => (e.data as { position?: number }).position === 0);
    expect(clearEvents.map((e) => e.type)).toEqual(['OnEnterActionClaimed', 'DecisionsCleared']);
    expect((await world.entries(taskId, 'review'))[0]!.markers[0]).toMatchObject({ kind: 'clear_decisions', state: 'done' });
  });

  describe('with forced failures', () => {
    afterAll(async () => {
      await world.stopEngine(world.engine, 'SIGTERM');
      await world.startEngine();
    }, 60_000);

    it('V10 AC-A8: run_code_review queues a REVIEW job with the task, the destination step and trigger workflow_step; a launch forced to fail still completes the entry and the later actions run', async () => {
      await world.importYaml('cr', `
name: Code review
steps:
  - id: work
    name: Work
  - id: review
    name: Review
    agent_profile_id: code-reviewer
    on_enter:
      - type: run_code_review
      - type: queue_run
        config: { target: 'agent_profile_id:rev-a' }
`);
      const { taskId } = await world.task('cr');
      await world.move(taskId, 'review');
      await world.terminalEntry(taskId, 'review', 1);
      const [review] = (await world.enqueued(taskId)).filter((e) => e.reason === 'code_review');
      expect(review).toMatchObject({ kind: 'REVIEW', agentProfile: { id: 'code-reviewer' }, payload: { trigger: 'workflow_step', workflowStepId: 'review', taskId } });

      await world.stopEngine(world.engine, 'SIGTERM');
      await world.startEngine({ GANTRY_TEST_WORKFLOW_FAIL: 'action:run_code_review' });
      const failing = (await world.task('cr')).taskId;
      await world.move(failing, 'review');
      const entry = await world.terminalEntry(failing, 'review', 1);
      expect(entry.markers.map((m) => m.state)).toEqual(['done', 'done']);
      expect((await world.enqueued(failing)).map((e) => e.agentProfile!.id)).toEqual(['rev-a']);
      const records = await world.logged((r) => r.taskId === failing && r.actionType === 'run_code_review', 'the failed launch');
      expect(records.find((r) => r.taskId === failing && r.actionType === 'run_code_review')).toMatchObject({ level: 'error' });
    });

    it('V23 AC-C2: a failed clear_decisions stops the entry — nothing after it runs or is marked — with an error naming workflow, step, task and cause; the move stands', async () => {
      await world.stopEngine(world.engine, 'SIGTERM');
      await world.startEngine({ GANTRY_TEST_WORKFLOW_FAIL: 'action:clear_decisions' });
      const { taskId } = await world.task('clearing');
      await world.seat(taskId, 'clearing', 'review', 'reviewer', 'rev-a');
      await world.move(taskId, 'review');
      const error = await eventually(() => ruleRecords(world.records(), 'AC-C2', taskId)[0], { what: 'the AC-C2 record' });
      expect(error.level).toBe('error');
      expectDiscreteFields(error, { workflowId: 'clearing', stepId: 'review', taskId, cause: 'clear_decisions failed (forced by a test)' });
      const [entry] = await eventually(async () => {
        const e = await world.entries(taskId, 'review');
        return e[0]?.markers[0]!.state === 'failed' ? e : null;
      });
      expect(entry!.markers.map((m) => m.state)).toEqual(['failed', 'absent']);
      expect(entry!.terminal).toBe(false);
      expect(await world.jobs(taskId, 'REVIEW')).toEqual([]);
      expect((await world.getTask(taskId)).placement.stepId).toBe('review');
    });

    it('V23 AC-C2: the move sent again under its key (its answer lost) after a failed clear_decisions dispatches the entry again, and that dispatch runs nothing after the failed clear either', async () => {
      await world.stopEngine(world.engine, 'SIGTERM');
      await world.startEngine({ GANTRY_TEST_WORKFLOW_FAIL: 'action:clear_decisions' });
      await world.importYaml('clear-then-fan-out', reviewYaml(`      - type: clear_decisions
      - type: queue_run_for_each_participant
        config: { role: reviewer }`));
      const { taskId } = await world.task('clear-then-fan-out');
      await world.seat(taskId, 'clear-then-fan-out', 'review', 'reviewer', 'rev-a');
      const key = world.key('move');
      await world.move(taskId, 'review', key);
      await eventually(async () => ((await world.entries(taskId, 'review'))[0]?.markers[0]!.state === 'failed' ? true : null), { what: 'the clear marked failed' });
      const again = await world.move(taskId, 'review', key);
      expect(again.entry).toMatchObject({ stepId: 'review', entrySeq: 1 });
      await world.logged((r) => r.message === 'step entry dispatched' && r.taskId === taskId && r.mode === 'resume', 'the repeated command\'s dispatch');
      const [entry] = await world.entries(taskId, 'review');
      expect(entry!.markers.map((m) => m.state)).toEqual(['failed', 'absent']);
      expect(await world.jobs(taskId, 'REVIEW')).toEqual([]);
    });
  });
});

describe('on_enter session actions whose append meets the task\'s stream kept busy', () => {
  const world = new WorkflowWorld('wf_session_busy');
  const taskId = `T-sbusy-${Date.now().toString(36)}`;

  beforeAll(async () => {
    // the first append of each session action of the task is answered VERSION_CONFLICT (nothing written)
    await world.start({ engineEnv: { GANTRY_TEST_WORKFLOW_FAIL: `session-conflict:${taskId}` } });
    for (const p of ['rev-a', 'implementer']) await world.profile(p);
    await world.importYaml('busy-session', `
name: Busy session
steps:
  - id: work
    name: Work
  - id: review
    name: Review
    agent_profile_id: implementer
    on_enter:
      - type: reset_agent_context
      - type: queue_run
        config: { target: 'agent_profile_id:rev-a' }
      - type: auto_start_agent
`);
  }, 120_000);
  afterAll(() => world.close(), 60_000);

  it('are sent again, not taken for failures: the reset and the agent\'s start are recorded once, with no AC-C3 record', async () => {
    await world.task('busy-session', { taskId });
    await world.move(taskId, 'review');
    await world.terminalEntry(taskId, 'review', 1);
    const [job] = await eventually(async () => {
      const effects = (await world.effects(taskId)).filter((e) => e.type === 'AgentAutoStarted');
      return effects.length > 0 ? effects : null;
    }, { what: 'the agent\'s start recorded', timeoutMs: 60_000 });
    const effects = await world.effects(taskId);
    expect(effects.filter((e) => e.type === 'AgentContextReset')).toHaveLength(1);
    expect(effects.filter((e) => e.type === 'AgentAutoStarted')).toHaveLength(1);
    expect((await world.jobs(taskId, 'TASK_IMPLEMENTATION')).map((j) => j.jobId)).toEqual([job!.data.jobId]);
    expect(ruleRecords(world.records(), 'AC-C3', taskId)).toEqual([]);
  }, 180_000);
});
