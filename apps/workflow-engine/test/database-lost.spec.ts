import { randomUUID } from 'node:crypto';
import { eventually, type RunningApp } from '@gantry/testing';
import { WorkflowWorld, reviewYaml, type LogRecord } from './harness.js';

/*
 * AC-L3 (docs/workflow-engine.md, "Liveness of processes"): a dispatch that stops because the
 * engine's own PostgreSQL could not be reached keeps its claim and is scanned again after a pause by
 * the process itself, as one stopped at a silent job service or a busy stream is.
 */
describe('a step entry whose dispatch lost the database', () => {
  const world = new WorkflowWorld('wf_dblost');

  beforeAll(async () => {
    await world.start();
    for (const p of ['rev-a', 'implementer']) await world.profile(p);
    // work → review, whose on_enter (the implementer's step) is the list given
    for (const [workflowId, name, onEnter] of [
      ['lost-start', 'Lost start', ['clear_decisions', 'auto_start_agent']],
      ['lost-session-only', 'Lost start, no record', ['auto_start_agent']],
      ['lost-reset', 'Lost reset', ['clear_decisions', 'reset_agent_context', 'auto_start_agent']],
      ['lost-reset-only', 'Lost reset, no record', ['reset_agent_context', 'auto_start_agent']],
    ] as const) {
      await world.importYaml(workflowId, `
name: ${name}
steps:
  - id: work
    name: Work
  - id: review
    name: Review
    agent_profile_id: implementer
    on_enter:
${onEnter.map((type) => `      - type: ${type}`).join('\n')}
`);
    }
    await world.importYaml('lost-exit', `
name: Lost exit
steps:
  - id: work
    name: Work
  - id: review
    name: Review
    on_exit:
      - type: set_session_mode
        config: { mode: acceptEdits }
      - type: queue_run
        config: { target: 'agent_profile_id:rev-a', reason: closing }
  - id: done
    name: Done
`);
    // todo → work, whose completed turn runs the list given, → done, whose on_enter is the list given
    for (const [workflowId, name, onTurnComplete, onEnter] of [
      ['lost-turn', 'Lost turn', ['reset_agent_context', 'move_to_next'], ['clear_decisions', 'auto_start_agent']],
      ['lost-turn-session-only', 'Lost turn, no record', ['move_to_next'], ['auto_start_agent']],
    ] as const) {
      const list = (types: readonly string[]) => types.map((type) => `      - type: ${type}`).join('\n');
      await world.importYaml(workflowId, `
name: ${name}
steps:
  - id: todo
    name: To do
  - id: work
    name: Work
    on_turn_complete:
${list(onTurnComplete)}
  - id: done
    name: Done
    agent_profile_id: implementer
    on_enter:
${list(onEnter)}
`);
    }
    await world.importYaml('lost', reviewYaml(`      - type: clear_decisions
      - type: queue_run_for_each_participant
        config: { role: reviewer }`, `    participants:
      - { role: reviewer, agent_profile_id: rev-a, decision_required: true }`));
  }, 120_000);
  afterAll(() => world.close(), 60_000);

  /** Ends the engine's sessions that are inside a transaction, as an administrator (or a database restart) would. */
  async function terminateOpenTransactions(): Promise<number> {
    const applicationName = `workflow-engine:${world.engineSchema}`.slice(0, 63);
    const { rows } = await world.db.query<{ ended: boolean }>(
      `SELECT pg_terminate_backend(pid) AS ended FROM pg_stat_activity WHERE application_name = $1 AND state = 'idle in transaction'`,
      [applicationName],
    );
    return rows.filter((r) => r.ended).length;
  }

  /** A task at `work` and an engine started with the task's `env`, a 1.5 s patience unless it says otherwise, so that stopped entries are scanned again soon. */
  async function taskAndEngine(env: (taskId: string) => Record<string, string>, workflowId = 'lost'): Promise<{ taskId: string; engine: RunningApp }> {
    const taskId = `T-lost-${randomUUID().slice(0, 8)}`;
    await world.task(workflowId, { taskId });
    await world.stopEngine(world.engine);
    return { taskId, engine: await world.startEngine({ GANTRY_WORKFLOW_RUN_QUEUE_PATIENCE_MS: '1500', ...env(taskId) }) };
  }

  /**
   * The entry's dispatch stopped once at the database out of reach (one AC-L3 ERROR), and the same
   * process, never restarted, finished the entry: every marker done, one REVIEW job. Returns that ERROR.
   */
  async function resumedByItself(taskId: string, engine: RunningApp): Promise<LogRecord> {
    const stopped = (r: LogRecord) => r.taskId === taskId && (r.message === 'step entry dispatched' || r.message === 'step entry dispatch failed; it resumes at the next start');
    await world.logged(stopped, 'the dispatch stopped at the lost connection', engine);
    const entry = await world.terminalEntry(taskId, 'review', 1, { timeoutMs: 30_000 });
    expect(entry.markers.map((m) => [m.kind, m.state])).toEqual([['clear_decisions', 'done'], ['queue_run_for_each_participant', 'done']]);
    const lost = world.records(engine).filter((r) => r.rule === 'AC-L3' && r.taskId === taskId && r.cause !== undefined);
    expect(lost.map((r) => [r.level, r.message])).toEqual([['error', 'the database could not be reached; the dispatch stopped and the entry is scanned again after a pause']]);
    expect(await world.jobs(taskId, 'REVIEW')).toHaveLength(1);
    expect(engine.process.exitCode).toBeNull();
    expect(world.engines.at(-1)).toBe(engine);
    return lost[0]!;
  }

  /**
   * A task of lost-exit leaves `review` under an engine started with `fault`: its exit is interrupted
   * once by the lost connection and run again by the same process — one WARNING, no ERROR, finished
   * done, its actions once.
   */
  async function exitRunsAgain(fault: string): Promise<void> {
    const { taskId, engine } = await taskAndEngine((id) => ({ GANTRY_TEST_WORKFLOW_FAIL: `${fault}:${id}` }), 'lost-exit');
    await world.move(taskId, 'review');
    expect((await world.move(taskId, 'done')).placement).toMatchObject({ stepId: 'done', admitted: true });

    const ended = (r: LogRecord) => r.taskId === taskId && (r.message === 'on_exit could not be done now; it runs again' || r.level === 'error');
    const exitsFinished = async () => (await world.events(world.pairStream(taskId, 'lost-exit', 'review'))).filter((e) => e.type === 'StepExitFinished');
    await eventually(async () => (await exitsFinished()).length > 0 || world.records(engine).some((r) => ended(r) && r.level === 'error'), { what: 'the exit finished or failed', timeoutMs: 30_000 });
    expect(world.records(engine).filter(ended).map((r) => [r.level, r.message, r.cause])).toEqual([['warn', 'on_exit could not be done now; it runs again', expect.stringMatching(/terminating connection/)]]);
    expect((await exitsFinished()).map((e) => e.data.outcome)).toEqual(['done']);
    expect((await world.effects(taskId)).filter((e) => e.type === 'SessionModeSet')).toHaveLength(1);
    expect((await world.jobs(taskId, 'REVIEW')).map((j) => `${j.agentProfileId}/${j.reason}`)).toEqual(['rev-a/closing']);
    expect(engine.process.exitCode).toBeNull();
  }

  /** The job events consumer's own records of a handler failure: each one counts towards dead-lettering the event. */
  const handlerFailures = (engine: RunningApp) => world.records(engine).filter((r) => r.consumer === 'workflow-engine-job-events' && /^event handler failed/.test(String(r.message)));

  /**
   * A task of lost-turn at `work` takes a turn under an engine started with `fault`: the job's finish is
   * handed back (no failed action, no failure of the event counted towards its dead letter), and
   * delivered again the turn's reset is recorded once and its move made.
   */
  async function turnRunsAgain(fault: string): Promise<void> {
    const { taskId, engine } = await taskAndEngine((id) => ({ GANTRY_TEST_WORKFLOW_FAIL: `${fault}:${id}` }), 'lost-turn');
    await world.move(taskId, 'work');
    await world.agentTurn(taskId);

    const failed = (r: LogRecord) => r.rule === 'AC-C5' && r.taskId === taskId;
    await eventually(async () => world.records(engine).some(failed) || (await world.getTask(taskId)).placement.stepId === 'done', { what: 'the trigger ended', timeoutMs: 30_000 });
    expect(world.records(engine).filter(failed)).toEqual([]);
    await world.atStep(taskId, 'done', 30_000);
    expect(handlerFailures(engine)).toEqual([]);
    expect((await world.effects(taskId)).filter((e) => e.type === 'AgentContextReset')).toHaveLength(1);
    expect(engine.process.exitCode).toBeNull();
  }

  it('AC-L3: a clear whose connection is ended before its commit stops the dispatch with the claim kept; the same process comes back to the entry: the clear once, one REVIEW job', async () => {
    const { taskId, engine } = await taskAndEngine((id) => ({ GANTRY_TEST_WORKFLOW_HOLD_AT: `${id}@review#1/clearing:0` }));
    const held = `${taskId}@review#1__clearing:0`;
    await world.move(taskId, 'review');
    await world.reachedHold(held);
    expect(await terminateOpenTransactions()).toBe(1);
    await world.releaseHold(held);

    await resumedByItself(taskId, engine);
    expect(world.records(engine).filter((r) => r.rule === 'AC-C2' && r.taskId === taskId)).toEqual([]);
    const cleared = (await world.events(world.pairStream(taskId, 'lost', 'review'))).filter((e) => e.type === 'DecisionsCleared');
    expect(cleared).toHaveLength(1);
  }, 120_000);

  it('AC-L3: a marker whose append loses its connection stops the dispatch with the claim kept; the same process comes back to the entry: the fan-out once, one REVIEW job', async () => {
    const { taskId, engine } = await taskAndEngine((id) => ({ GANTRY_TEST_WORKFLOW_FAIL: `database-lost-once:${id}` }));
    await world.move(taskId, 'review');

    const lost = await resumedByItself(taskId, engine);
    expect(String(lost.cause)).toMatch(/terminating connection/);
    expect(world.records(engine).filter((r) => (r.rule === 'AC-C1' || r.rule === 'AC-C3') && r.taskId === taskId)).toEqual([]);
    const fannedOut = (await world.events(world.pairStream(taskId, 'lost', 'review'))).filter((e) => e.data.position === 1);
    expect(fannedOut.map((e) => e.type)).toEqual(['OnEnterActionClaimed', 'OnEnterActionFinished']);
  }, 120_000);

  it('AC-L3 / AC-B8: a session action whose write loses its connection is no failed action: the dispatch stops with the claim kept, and the same process\'s walk comes back to it: the agent started once', async () => {
    const { taskId, engine } = await taskAndEngine((id) => ({ GANTRY_TEST_WORKFLOW_FAIL: `session-database-lost-once:${id}` }), 'lost-start');
    await world.move(taskId, 'review');

    // the entry completes after its walk's last action, the agent's start
    const entry = await world.terminalEntry(taskId, 'review', 1, { timeoutMs: 30_000 });
    expect(entry.markers.map((m) => [m.kind, m.state])).toEqual([['clear_decisions', 'done']]);
    expect(world.records(engine).filter((r) => r.rule === 'AC-C3' && r.taskId === taskId)).toEqual([]);
    const started = (await world.effects(taskId)).filter((e) => e.type === 'AgentAutoStarted');
    const lost = world.records(engine).filter((r) => r.rule === 'AC-L3' && r.taskId === taskId && r.cause !== undefined);
    expect(lost.map((r) => [r.level, r.message])).toEqual([['error', 'the database could not be reached; the dispatch stopped and the entry is scanned again after a pause']]);
    expect(String(lost[0]!.cause)).toMatch(/terminating connection/);
    expect(started).toHaveLength(1);
    expect((await world.jobs(taskId, 'TASK_IMPLEMENTATION')).map((j) => j.jobId)).toEqual([started[0]!.data.jobId]);
    expect(engine.process.exitCode).toBeNull();
    expect(world.engines.at(-1)).toBe(engine);
  }, 120_000);

  it('AC-L3 / AC-C5: an on_exit session action whose write loses its connection is no failed action: the exit runs again by itself and is done, its actions once', async () => {
    await exitRunsAgain('session-database-lost-once');
  }, 120_000);

  it('AC-L3 / AC-C5: a turn trigger\'s session action whose write loses its connection is no failed action: the job\'s finish is handed back, and delivered again the reset is recorded once and the turn\'s move made', async () => {
    await turnRunsAgain('session-database-lost-once');
  }, 120_000);

  it.each([
    ['with a record: its dispatch stops and the same process\'s walk comes back to it', 'lost-reset'],
    ['of session actions only: its dispatch sends it again', 'lost-reset-only'],
  ])('AC-L3 / AC-B8: an entry\'s session action whose write committed and then lost its connection (the answer lost) is done once: an entry %s, and the receipt finds the reset; one reset, one agent started', async (_what, workflowId) => {
    const { taskId, engine } = await taskAndEngine((id) => ({ GANTRY_TEST_WORKFLOW_FAIL: `session-committed-database-lost-once:${id}` }), workflowId);
    await world.move(taskId, 'review');

    const started = await eventually(async () => {
      const effects = (await world.effects(taskId)).filter((e) => e.type === 'AgentAutoStarted');
      return effects.length > 0 ? effects : null;
    }, { what: 'the agent\'s start recorded', timeoutMs: 30_000 });
    const lost = world.records(engine).filter((r) => r.taskId === taskId && r.cause !== undefined && /terminating connection/.test(String(r.cause)));
    expect(lost.length).toBeGreaterThan(0);
    expect(world.records(engine).filter((r) => r.rule === 'AC-C3' && r.taskId === taskId)).toEqual([]);
    const resets = (await world.effects(taskId)).filter((e) => e.type === 'AgentContextReset');
    expect(resets).toHaveLength(1);
    expect(started).toHaveLength(1);
    expect((await world.jobs(taskId, 'TASK_IMPLEMENTATION')).map((j) => j.jobId)).toEqual([started[0]!.data.jobId]);
    expect(engine.process.exitCode).toBeNull();
  }, 120_000);

  it('AC-L3 / AC-C5: a turn trigger\'s session action whose write committed and then lost its connection is done once: the job\'s finish is handed back, and delivered again the reset is found by its receipt and the turn\'s move made', async () => {
    await turnRunsAgain('session-committed-database-lost-once');
  }, 120_000);

  it('AC-L3 / AC-C5: an on_exit session action whose write committed and then lost its connection is done once: the exit runs again by itself and is done', async () => {
    await exitRunsAgain('session-committed-database-lost-once');
  }, 120_000);

  it('AC-L3: an exit whose finishing append loses its connection stays open and runs again by itself, not at the next start: finished done, its actions once', async () => {
    await exitRunsAgain('exit-database-lost-once');
  }, 120_000);

  /** The records of this engine's scans of the stopped entries, and of its scans at start. */
  const scans = (engine: RunningApp, message: 'scan of the stopped entries finished' | 'recovery scan finished') => world.records(engine).filter((r) => r.message === message);
  const scanLost = 'the database could not be reached; the entry is scanned again after a pause';

  it('AC-L3: the scan of the stopped entries whose own read of an entry loses its connection counts it unreachable, not failed, and comes back to it: the fan-out once, one REVIEW job', async () => {
    const { taskId, engine } = await taskAndEngine((id) => ({ GANTRY_TEST_WORKFLOW_FAIL: `database-lost-once:${id},recovery-database-lost-once:${id}` }));
    await world.move(taskId, 'review');

    const entry = await world.terminalEntry(taskId, 'review', 1, { timeoutMs: 60_000 });
    expect(entry.markers.map((m) => [m.kind, m.state])).toEqual([['clear_decisions', 'done'], ['queue_run_for_each_participant', 'done']]);
    const [first] = scans(engine, 'scan of the stopped entries finished');
    expect(first).toMatchObject({ records: 1, unreachable: 1 });
    expect(first!.failed).toBeUndefined();
    expect(world.records(engine).filter((r) => r.taskId === taskId && r.rule === 'AC-B9(f)')).toEqual([]);
    const lost = world.records(engine).filter((r) => r.rule === 'AC-L3' && r.taskId === taskId && r.cause !== undefined);
    expect(lost.map((r) => [r.level, r.message])).toEqual([
      ['error', 'the database could not be reached; the dispatch stopped and the entry is scanned again after a pause'],
      ['error', scanLost],
    ]);
    expect(String(lost[1]!.cause)).toMatch(/terminating connection/);
    expect(await world.jobs(taskId, 'REVIEW')).toHaveLength(1);
    expect(engine.process.exitCode).toBeNull();
  }, 120_000);

  /**
   * A task of lost whose entry stopped at the database and was left so by a clean stop (its epoch gone
   * with it: no takeover scans it again), for the next start's recovery scan alone to find; that start's
   * engine, with `fault`, comes back to it itself: the fan-out once, one REVIEW job. Returns the engine.
   */
  async function stoppedEntryAtStart(fault: (taskId: string) => string): Promise<{ taskId: string; engine: RunningApp }> {
    const { taskId, engine: stopped } = await taskAndEngine((id) => ({ GANTRY_TEST_WORKFLOW_FAIL: `database-lost-once:${id}`, GANTRY_WORKFLOW_RUN_QUEUE_PATIENCE_MS: '600000' }));
    await world.move(taskId, 'review');
    await world.logged((r) => r.rule === 'AC-L3' && r.taskId === taskId && r.cause !== undefined, 'the dispatch stopped at the lost connection', stopped);
    await world.stopEngine(stopped, 'SIGTERM');
    const engine = await world.startEngine({ GANTRY_TEST_WORKFLOW_FAIL: fault(taskId), GANTRY_WORKFLOW_RUN_QUEUE_PATIENCE_MS: '1500' });
    return { taskId, engine };
  }

  async function resumedAfterStart(taskId: string, engine: RunningApp): Promise<void> {
    const entry = await world.terminalEntry(taskId, 'review', 1, { timeoutMs: 30_000 });
    expect(entry.markers.map((m) => [m.kind, m.state])).toEqual([['clear_decisions', 'done'], ['queue_run_for_each_participant', 'done']]);
    expect(await world.jobs(taskId, 'REVIEW')).toHaveLength(1);
    expect(world.engines.at(-1)).toBe(engine);
  }

  it('AC-L3 / AC-B9(f): a start whose recovery scan loses its connection reading an entry counts it unreachable and comes back to it itself, not only at the next start: the fan-out once, one REVIEW job', async () => {
    const { taskId, engine } = await stoppedEntryAtStart((id) => `recovery-database-lost-once:${id}`);
    const [startup] = scans(engine, 'recovery scan finished');
    expect(startup).toMatchObject({ reason: 'startup', unreachable: 1 });
    expect(startup!.failed).toBeUndefined();
    await resumedAfterStart(taskId, engine);
    expect(world.records(engine).filter((r) => r.rule === 'AC-L3' && r.taskId === taskId && r.cause !== undefined).map((r) => [r.level, r.message])).toEqual([['error', scanLost]]);
  }, 180_000);

  it('AC-L3 / AC-B9(f): a start whose recovery scan query loses its connection runs the scan again itself after a pause, not only at the next start: the fan-out once, one REVIEW job', async () => {
    const { taskId, engine } = await stoppedEntryAtStart(() => 'recovery-query-database-lost-once:startup');
    const failed = world.records(engine).filter((r) => r.rule === 'AC-B9(f)' && r.reason === 'startup');
    expect(failed.map((r) => [r.level, r.message])).toEqual([['error', 'the database could not be reached; the recovery scan runs again after a pause']]);
    await resumedAfterStart(taskId, engine);
    expect(scans(engine, 'recovery scan finished').map((r) => r.reason)).toEqual(['again:startup']);
  }, 180_000);

  it('a job\'s start whose session-start write loses its connection is handed back, not dropped: delivered again, the task\'s session is started once, by that job', async () => {
    const { taskId, engine } = await taskAndEngine((id) => ({ GANTRY_TEST_WORKFLOW_FAIL: `session-start-database-lost-once:${id}` }), 'lost-turn');
    const jobId = await world.agentTurn(taskId);

    const notRecorded = (r: LogRecord) => r.taskId === taskId && r.message === 'could not record the session start';
    const started = async () => (await world.effects(taskId)).filter((e) => e.type === 'AgentSessionStarted');
    await eventually(async () => (await started()).length > 0 || world.records(engine).some(notRecorded), { what: 'the session start recorded or given up', timeoutMs: 30_000 });
    expect(world.records(engine).filter(notRecorded)).toEqual([]);
    expect((await started()).map((e) => e.data.jobId)).toEqual([jobId]);
    expect(handlerFailures(engine)).toEqual([]);
  }, 120_000);

  it('a turn\'s move that loses its connection is no failure of the job\'s event, counted towards its dead letter: handed back, and delivered again the move is made and the reset recorded once', async () => {
    await turnRunsAgain('turn-move-database-lost-once');
  }, 120_000);

  it('AC-L3 / AC-B8: a turn\'s move that committed and then lost its connection (the answer lost) is not left undispatched: the same process finds the move its own (its job\'s finish delivered again, or its own look-up after a pause) and dispatches the entry it made, the agent started once', async () => {
    const { taskId, engine } = await taskAndEngine((id) => ({ GANTRY_TEST_WORKFLOW_FAIL: `turn-move-committed-database-lost-once:${id}` }), 'lost-turn');
    await world.move(taskId, 'work');
    await world.agentTurn(taskId);

    const entry = await world.terminalEntry(taskId, 'done', 1, { timeoutMs: 30_000 });
    expect(entry.markers.map((m) => [m.kind, m.state])).toEqual([['clear_decisions', 'done']]);
    const started = (await world.effects(taskId)).filter((e) => e.type === 'AgentAutoStarted');
    expect(started).toHaveLength(1);
    expect((await world.jobs(taskId, 'TASK_IMPLEMENTATION')).map((j) => j.jobId)).toEqual([started[0]!.data.jobId]);
    expect(handlerFailures(engine)).toEqual([]);
    expect(world.records(engine).filter((r) => r.taskId === taskId && r.message === 'the turn\'s move had committed, its answer lost; the work after it is done now')).toHaveLength(1);
  }, 120_000);

  it.each([
    ['with a record', 'lost-turn', [['clear_decisions', 'done']]],
    ['of session actions only (no record)', 'lost-turn-session-only', null],
  ])('AC-L3 / AC-L4: a turn\'s move that committed and lost its answer, whose job\'s finish is delivered again to the other replica: that replica finds nothing to do, and the process that made the move, alive, dispatches the entry it made itself (%s): the agent started once', async (_what, workflowId, markers) => {
    const taskId = `T-lost-${randomUUID().slice(0, 8)}`;
    await world.task(workflowId, { taskId });
    for (const engine of world.engines.filter((e) => e.process.exitCode === null && e.process.signalCode === null)) await world.stopEngine(engine);
    // Two replicas alike: whichever moves the task loses the move's answer, and hands the job's finish
    // back each time it comes to it again, so that the other one handles it.
    const env = { GANTRY_TEST_WORKFLOW_FAIL: `turn-move-committed-database-lost-once:${taskId},turn-redelivered-elsewhere:${taskId}` };
    const replicas = [await world.startEngine(env), await world.startEngine(env)];
    await world.move(taskId, 'work');
    const jobId = await world.agentTurn(taskId);

    const lostAnswer = (r: LogRecord) => r.taskId === taskId && r.message === 'the turn\'s move had its answer lost; its job\'s event goes to another replica (forced by a test)';
    const mover = await eventually(() => replicas.find((e) => world.records(e).some(lostAnswer)), { what: 'the move that lost its answer', timeoutMs: 30_000 });
    const other = replicas.find((e) => e !== mover)!;
    await world.logged((r) => r.message === 'turn of an earlier step occupancy; nothing to do' && r.jobId === jobId, 'the job\'s finish handled by the other replica', other);

    const started = await eventually(async () => {
      const effects = (await world.effects(taskId)).filter((e) => e.type === 'AgentAutoStarted');
      return effects.length > 0 ? effects : null;
    }, { what: 'the agent\'s start recorded', timeoutMs: 60_000 });
    if (markers) {
      const entry = await world.terminalEntry(taskId, 'done', 1, { timeoutMs: 30_000 });
      expect(entry.markers.map((m) => [m.kind, m.state])).toEqual(markers);
      expect((await world.events(world.pairStream(taskId, workflowId, 'done'))).filter((e) => e.type === 'DecisionsCleared')).toHaveLength(1);
    }
    // the opener's own live dispatch, once; the other replica dispatched nothing of the entry
    expect(world.records(mover).filter((r) => r.taskId === taskId && r.message === 'step entry dispatched' && r.stepId === 'done').map((r) => [r.mode, r.outcome])).toEqual([['live', 'completed']]);
    expect(world.records(other).filter((r) => r.taskId === taskId && r.message === 'step entry dispatched' && r.stepId === 'done')).toEqual([]);
    // nothing twice: one agent started, one TASK_IMPLEMENTATION job (the turn's own job is a PLAN_CHAT)
    await world.atStep(taskId, 'done');
    expect(started).toHaveLength(1);
    expect((await world.jobs(taskId, 'TASK_IMPLEMENTATION')).map((j) => j.jobId)).toEqual([started[0]!.data.jobId]);
    expect((await world.effects(taskId)).filter((e) => e.type === 'AgentAutoStarted')).toHaveLength(1);
    for (const engine of replicas) {
      expect(handlerFailures(engine)).toEqual([]);
      expect(engine.process.exitCode).toBeNull();
    }
    await world.stopEngine(other);
  }, 180_000);

  it.each([
    ['', ['session-database-lost-once']],
    [', and its check whether the task is still there loses its own', ['session-database-lost-once', 'left-check-database-lost-once']],
  ])('an entry of session actions only, whose action\'s write loses its connection%s, has no record to come back to: its dispatch sends the action again, and the agent starts once', async (_what, faults) => {
    const { taskId, engine } = await taskAndEngine((id) => ({ GANTRY_TEST_WORKFLOW_FAIL: faults.map((f) => `${f}:${id}`).join(',') }), 'lost-session-only');
    await world.move(taskId, 'review');

    const sentAgain = (r: LogRecord) => r.taskId === taskId && r.message === 'session action could not be done now; sent again';
    await world.logged(sentAgain, 'the session action sent again', engine);
    const started = await eventually(async () => {
      const effects = (await world.effects(taskId)).filter((e) => e.type === 'AgentAutoStarted');
      return effects.length > 0 ? effects : null;
    }, { what: 'the agent\'s start recorded', timeoutMs: 30_000 });
    expect(world.records(engine).filter((r) => (r.rule === 'AC-C3' || r.rule === 'AC-L3') && r.taskId === taskId)).toEqual([]);
    expect(String(world.records(engine).find(sentAgain)!.cause)).toMatch(/terminating connection/);
    expect((await world.jobs(taskId, 'TASK_IMPLEMENTATION')).map((j) => j.jobId)).toEqual([started[0]!.data.jobId]);
  }, 120_000);
});
