import { randomUUID } from 'node:crypto';
import type { RunningApp } from '@gantry/testing';
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
    await world.profile('rev-a');
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

  /** A task at `work` and an engine started with the task's `env`, a 1.5 s patience so that stopped entries are scanned again soon. */
  async function taskAndEngine(env: (taskId: string) => Record<string, string>): Promise<{ taskId: string; engine: RunningApp }> {
    const taskId = `T-lost-${randomUUID().slice(0, 8)}`;
    await world.task('lost', { taskId });
    await world.stopEngine(world.engine);
    return { taskId, engine: await world.startEngine({ ...env(taskId), GANTRY_WORKFLOW_RUN_QUEUE_PATIENCE_MS: '1500' }) };
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
});
