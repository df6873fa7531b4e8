import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { eventually } from '@gantry/testing';
import type { RunningApp } from '@gantry/testing';
import { WorkflowWorld, reviewYaml } from './harness.js';

/*
 * Several engine processes on one schema (docs/workflow-engine.md, "Markers", "Liveness of
 * processes"): V34 (AC-F1) and V41 (AC-L1, AC-L2).
 */
describe('two workflow-engine replicas', () => {
  const world = new WorkflowWorld('wf_replicas');

  const post = (engine: RunningApp, command: string, body: unknown) => world.post(engine, command, body);

  const dispatched = (engine: RunningApp, taskId: string) => world.records(engine).filter((r) => r.message === 'step entry dispatched' && r.taskId === taskId);

  beforeAll(async () => {
    await world.start({ withEngine: false });
    const first = await world.startEngine();
    void first;
    for (const p of ['rev-a', 'rev-b', 'rev-c']) await world.profile(p);
    await world.importYaml('rep', reviewYaml(`      - type: clear_decisions
      - type: queue_run_for_each_participant
        config: { role: reviewer }`, `    participants:
      - { id: s-a, role: reviewer, agent_profile_id: rev-a, decision_required: false }
      - { id: s-b, role: reviewer, agent_profile_id: rev-b, decision_required: false, position: 1 }
      - { id: s-c, role: reviewer, agent_profile_id: rev-c, decision_required: false, position: 2 }`));
    await world.stopEngine(world.engine, 'SIGTERM');
  }, 120_000);
  afterAll(() => world.close(), 60_000);

  it('V34 AC-F1: two dispatches of one entry — the same command answered again by the other replica while the first holds its clear mid-transaction: the second stops silently and queues nothing before the clear commits; each action runs once', async () => {
    const { taskId } = await (async () => {
      await world.startEngine();
      return world.task('rep');
    })();
    const a = await world.startEngine({ GANTRY_TEST_WORKFLOW_HOLD_AT: `${taskId}@review#1/clearing:0` });
    const b = await world.startEngine();
    const move = { taskId, toStepId: 'review', idempotencyKey: world.key('move') };
    expect(await post(a, 'move_task', move)).toMatchObject({ ok: true });
    await world.reachedHold(`${taskId}@review#1__clearing:0`);
    // the same command again, answered by the other replica: it replays, and dispatches the entry again
    expect(await post(b, 'move_task', move)).toMatchObject({ ok: true });
    await eventually(() => dispatched(b, taskId).length > 0, { what: 'the second dispatch' });
    expect(dispatched(b, taskId).map((r) => [r.mode, r.outcome])).toEqual([['resume', 'abandoned']]);
    expect(world.records(b).filter((r) => r.taskId === taskId && (r.level === 'warn' || r.level === 'error'))).toEqual([]);
    expect(await world.jobs(taskId, 'REVIEW')).toEqual([]);
    await world.releaseHold(`${taskId}@review#1__clearing:0`);
    const entry = await world.terminalEntry(taskId, 'review', 1);
    const epochs = new Set(entry.markers.map((m) => m.epoch));
    expect(epochs.size).toBe(1);
    await world.logged((r) => r.message === 'step entry dispatched' && r.taskId === taskId, 'the first dispatch', a);
    expect(dispatched(a, taskId).map((r) => [r.mode, r.outcome])).toEqual([['live', 'completed']]);
    const events = await world.events(world.pairStream(taskId, 'rep', 'review'));
    expect(events.filter((e) => e.type === 'DecisionsCleared')).toHaveLength(1);
    expect((await world.jobs(taskId, 'REVIEW')).map((j) => j.agentProfileId)).toEqual(['rev-a', 'rev-b', 'rev-c']);

    // two distinct entries of the same task and step both run in full
    await world.move(taskId, 'work');
    await world.move(taskId, 'review');
    const second = await world.terminalEntry(taskId, 'review', 2);
    expect(second.markers.map((m) => m.state)).toEqual(['done', 'done']);
    expect((await world.jobs(taskId, 'REVIEW')).map((j) => j.agentProfileId)).toEqual(['rev-a', 'rev-b', 'rev-c', 'rev-a', 'rev-b', 'rev-c']);
    for (const engine of world.engines) await engine.kill('SIGTERM');
  });

  it('V34 AC-F1 / AC-B8: the same move answered again by another replica while the first still walks the entry is left to the first — the auto_start_agent declared last still runs, and every action once', async () => {
    await world.startEngine();
    await world.importYaml('rep-auto', `
name: Review with an agent
steps:
  - id: work
    name: Work
  - id: review
    name: Review
    agent_profile_id: rev-b
    participants: [{ id: s-a, role: reviewer, agent_profile_id: rev-a, decision_required: false }]
    on_enter:
      - type: clear_decisions
      - type: queue_run_for_each_participant
        config: { role: reviewer }
      - type: auto_start_agent
`);
    const { taskId } = await world.task('rep-auto');
    // a: the clear done, held before it claims the fan-out; b: held once it has claimed the fan-out, if it does
    const a = await world.startEngine({ GANTRY_TEST_WORKFLOW_HOLD_AT: `${taskId}@review#1/finished:0` });
    const b = await world.startEngine({ GANTRY_TEST_WORKFLOW_HOLD_AT: `${taskId}@review#1/claimed:1` });
    for (const engine of world.engines.filter((e) => e !== a && e !== b)) await engine.kill('SIGTERM');
    const move = { taskId, toStepId: 'review', idempotencyKey: world.key('move') };
    expect(await post(a, 'move_task', move)).toMatchObject({ ok: true });
    await world.reachedHold(`${taskId}@review#1__finished:0`);
    // the answer was lost; the caller's retry reaches the other replica, which replays and dispatches the entry again
    expect(await post(b, 'move_task', move)).toMatchObject({ ok: true });
    const bHeld = join(world.holdDir, `${taskId}@review#1__claimed:1.reached`);
    await eventually(() => dispatched(b, taskId).length > 0 || existsSync(bHeld), { what: 'the repeated command\'s dispatch done or holding the fan-out' });
    await world.releaseHold(`${taskId}@review#1__finished:0`);
    await world.releaseHold(`${taskId}@review#1__claimed:1`);
    const entry = await world.terminalEntry(taskId, 'review', 1);
    expect(entry.markers.map((m) => [m.kind, m.state])).toEqual([['clear_decisions', 'done'], ['queue_run_for_each_participant', 'done']]);
    await world.logged((r) => r.message === 'step entry dispatched' && r.taskId === taskId, 'the first dispatch', a);
    expect((await world.jobs(taskId, 'REVIEW')).map((j) => j.agentProfileId)).toEqual(['rev-a']);
    expect((await world.jobs(taskId, 'TASK_IMPLEMENTATION')).map((j) => j.agentProfileId)).toEqual(['rev-b']);
    expect(dispatched(a, taskId).map((r) => [r.mode, r.outcome])).toEqual([['live', 'completed']]);
    expect(world.records(b).filter((r) => r.taskId === taskId && (r.level === 'warn' || r.level === 'error'))).toEqual([]);
    for (const engine of [a, b]) await engine.kill('SIGTERM');
  });

  it('V41 AC-L1 / AC-L2: one replica SIGKILLed mid-fan-out — the survivor takes the entry over only once the dead process\'s epoch lock is free, and every participant has exactly one job', async () => {
    await world.startEngine();
    const { taskId } = await world.task('rep');
    const doomed = await world.startEngine({ GANTRY_TEST_WORKFLOW_HOLD_AT: `${taskId}@review#1/run:1:1` });
    const survivor = await world.startEngine();
    for (const engine of world.engines.filter((e) => e !== doomed && e !== survivor)) await engine.kill('SIGTERM');
    expect(await post(doomed, 'move_task', { taskId, toStepId: 'review', idempotencyKey: world.key('move') })).toMatchObject({ ok: true });
    await world.reachedHold(`${taskId}@review#1__run:1:1`);
    const claims = async () => (await world.events(world.pairStream(taskId, 'rep', 'review'))).filter((e) => e.type === 'OnEnterActionClaimed');
    const doomedEpoch = (await claims())[0]!.data.epoch as string;
    // While the owner lives, the survivor waits on its epoch lock and touches nothing.
    await eventually(
      async () => {
        const { rows } = await world.db.query(
          `SELECT count(*)::int AS n FROM pg_locks l
            WHERE l.locktype = 'advisory' AND NOT l.granted
              AND l.classid::bigint = ((hashtextextended($1, 0) >> 32) & 4294967295)
              AND l.objid::bigint = (hashtextextended($1, 0) & 4294967295)`,
          [`gantry.workflow.epoch:${world.engineSchema}:${doomedEpoch}`],
        );
        return rows[0].n > 0;
      },
      { what: 'the survivor waiting on the owner\'s epoch lock' },
    );
    expect((await claims()).map((c) => [c.data.position, c.data.epoch])).toEqual([[0, doomedEpoch], [1, doomedEpoch]]);
    expect((await world.jobs(taskId, 'REVIEW')).map((j) => j.agentProfileId)).toEqual(['rev-a']);
    expect((await world.entries(taskId, 'review'))[0]!.terminal).toBe(false);

    const killSent = Date.now();
    await doomed.kill('SIGKILL');
    const entry = await world.terminalEntry(taskId, 'review', 1);
    expect(entry.termination).toBe('completed');
    const taken = (await world.events(world.pairStream(taskId, 'rep', 'review'))).filter((e) => e.type === 'OnEnterActionClaimed' && e.data.takenOverFrom === doomedEpoch);
    expect(taken).toHaveLength(1);
    expect(taken[0]!.recorded_at.getTime()).toBeGreaterThanOrEqual(killSent);
    expect(taken[0]!.data.epoch).not.toBe(doomedEpoch);
    await world.logged((r) => r.message === 'peer process gone; taking over its entries' && r.peerEpoch === doomedEpoch, 'the takeover', survivor);
    expect((await world.jobs(taskId, 'REVIEW')).map((j) => j.agentProfileId)).toEqual(['rev-a', 'rev-b', 'rev-c']);
    expect(entry.markers[1]!.runs.map((r) => r.outcome)).toEqual(['deduplicated', 'created', 'created']);
  });

  it('AC-L4: a takeover scan leaves alone an entry this process is still walking — its fan-out, held mid-way while the task left the step, is not closed skipped(step_left) under it, and ends done with every run it queued', async () => {
    await world.startEngine();
    const { taskId } = await world.task('rep');
    const walker = await world.startEngine({ GANTRY_TEST_WORKFLOW_HOLD_AT: `${taskId}@review#1/run:1:1` });
    const peer = await world.startEngine();
    for (const engine of world.engines.filter((e) => e !== walker && e !== peer)) await engine.kill('SIGTERM');
    expect(await post(walker, 'move_task', { taskId, toStepId: 'review', idempotencyKey: world.key('move') })).toMatchObject({ ok: true });
    await world.reachedHold(`${taskId}@review#1__run:1:1`);
    // the task leaves review while the walker's fan-out is under way
    expect(await post(walker, 'move_task', { taskId, toStepId: 'work', idempotencyKey: world.key('move') })).toMatchObject({ ok: true });
    const scans = () => world.records(walker).filter((r) => r.message === 'recovery scan finished' && String(r.reason).startsWith('takeover:'));
    await peer.kill('SIGKILL');
    await eventually(() => scans().length > 0, { what: 'the walker\'s takeover scan', timeoutMs: 120_000 });
    await world.releaseHold(`${taskId}@review#1__run:1:1`);
    const entry = await world.terminalEntry(taskId, 'review', 1);
    expect(entry.markers.map((m) => [m.kind, m.state, m.skipReason])).toEqual([['clear_decisions', 'done', null], ['queue_run_for_each_participant', 'done', null]]);
    expect(entry.termination).toBe('completed');
    expect((await world.jobs(taskId, 'REVIEW')).map((j) => j.agentProfileId)).toEqual(['rev-a', 'rev-b', 'rev-c']);
    await walker.kill('SIGTERM');
  });

  it('AC-L2: a SIGTERM during a takeover scan waits for it: the survivor finishes the entry it took over before it exits (0), every participant once', async () => {
    await world.startEngine();
    const { taskId } = await world.task('rep');
    const doomed = await world.startEngine({ GANTRY_TEST_WORKFLOW_HOLD_AT: `${taskId}@review#1/run:1:1` });
    const survivor = await world.startEngine({ GANTRY_TEST_WORKFLOW_HOLD_AT: `${taskId}@review#1/run:1:2` });
    for (const engine of world.engines.filter((e) => e !== doomed && e !== survivor)) await engine.kill('SIGTERM');
    expect(await post(doomed, 'move_task', { taskId, toStepId: 'review', idempotencyKey: world.key('move') })).toMatchObject({ ok: true });
    await world.reachedHold(`${taskId}@review#1__run:1:1`);
    await doomed.kill('SIGKILL');
    // the survivor's takeover has queued the second reviewer's run and waits before the third
    await world.reachedHold(`${taskId}@review#1__run:1:2`, 120_000);
    const stopped = survivor.kill('SIGTERM');
    await sleep(3_000);
    expect(survivor.process.exitCode).toBeNull();
    await world.releaseHold(`${taskId}@review#1__run:1:2`);
    expect(await stopped).toBe(0);
    // read from the log: no engine runs now to resume anything
    const ended = (await world.events(world.pairStream(taskId, 'rep', 'review'))).filter((e) => e.type === 'StepEntryTerminated');
    expect(ended.map((e) => [e.data.entrySeq, e.data.reason])).toEqual([[1, 'completed']]);
    expect((await world.jobs(taskId, 'REVIEW')).map((j) => j.agentProfileId)).toEqual(['rev-a', 'rev-b', 'rev-c']);
    expect(world.records(survivor).filter((r) => r.level === 'error')).toEqual([]);
  }, 240_000);

  it('a replica whose epoch lock session is ended while it is stopped: the survivor takes its entry over; woken, its late write is refused and it stops', async () => {
    await world.startEngine();
    const { taskId } = await world.task('rep');
    const zombie = await world.startEngine({ GANTRY_TEST_WORKFLOW_HOLD_AT: `${taskId}@review#1/run:1:1` });
    const survivor = await world.startEngine();
    for (const engine of world.engines.filter((e) => e !== zombie && e !== survivor)) await engine.kill('SIGTERM');
    expect(await post(zombie, 'move_task', { taskId, toStepId: 'review', idempotencyKey: world.key('move') })).toMatchObject({ ok: true });
    await world.reachedHold(`${taskId}@review#1__run:1:1`);
    const pairEvents = () => world.events(world.pairStream(taskId, 'rep', 'review'));
    const zombieEpoch = (await pairEvents()).find((e) => e.type === 'OnEnterActionClaimed')!.data.epoch as string;

    zombie.process.kill('SIGSTOP');
    // Its session goes (a network cut, an administrator): to everyone else the process is gone.
    await world.db.query(
      `SELECT pg_terminate_backend(l.pid) FROM pg_locks l
        WHERE l.locktype = 'advisory' AND l.granted
          AND l.classid::bigint = ((hashtextextended($1, 0) >> 32) & 4294967295)
          AND l.objid::bigint = (hashtextextended($1, 0) & 4294967295)`,
      [`gantry.workflow.epoch:${world.engineSchema}:${zombieEpoch}`],
    );
    // asked of the survivor: the frozen replica would swallow a bus request routed to it
    const entry = await world.terminalEntry(taskId, 'review', 1, { via: survivor });
    expect(entry.markers.map((m) => [m.state, m.epoch === zombieEpoch])).toEqual([['done', true], ['done', false]]);

    await world.releaseHold(`${taskId}@review#1__run:1:1`);
    zombie.process.kill('SIGCONT');
    await eventually(() => zombie.process.exitCode !== null || zombie.process.signalCode !== null, { what: 'the woken replica stopped' });
    const events = await pairEvents();
    expect(events.filter((e) => e.type === 'OnEnterActionFinished' && e.data.position === 1).map((e) => e.data.epoch === zombieEpoch)).toEqual([false]);
    expect(events.filter((e) => e.type === 'DecisionsCleared')).toHaveLength(1);
    expect(events.at(-1)!.type).toBe('StepEntryTerminated');
    expect((await world.jobs(taskId, 'REVIEW')).map((j) => j.agentProfileId)).toEqual(['rev-a', 'rev-b', 'rev-c']);
  });
});
