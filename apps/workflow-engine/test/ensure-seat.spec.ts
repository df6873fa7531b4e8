import { randomUUID } from 'node:crypto';
import { removeStepParticipant } from '@gantry/contracts';
import { WorkflowWorld } from './harness.js';

/*
 * ensure_participant_seat (docs/workflow-engine.md, "Actions"): adds a task-level seat at the step
 * unless one with that role and profile exists — on every entry, the fan-out after it included.
 */
describe('ensure_participant_seat', () => {
  const world = new WorkflowWorld('wf_seats');

  beforeAll(async () => {
    await world.start();
    await world.profile('rev-a');
    await world.importYaml('seats', `
name: Seats
steps:
  - id: work
    name: Work
  - id: review
    name: Review
    on_enter:
      - type: ensure_participant_seat
        config: { role: reviewer, agent_profile_id: rev-a, decision_required: true }
      - type: queue_run_for_each_participant
        config: { role: reviewer }
  - id: done
    name: Done
`);
  }, 120_000);
  afterAll(() => world.close(), 60_000);

  it('a seat it added and someone removed is seated again on the next entry, and that entry fans out to it', async () => {
    const { taskId } = await world.task('seats');
    await world.move(taskId, 'review');
    const first = await world.terminalEntry(taskId, 'review', 1);
    expect(first.markers.map((m) => m.state)).toEqual(['done', 'done']);
    const [seat] = (await world.getTask(taskId)).participants;
    expect(seat).toMatchObject({ role: 'reviewer', agentProfileId: 'rev-a' });
    expect(await world.jobs(taskId, 'REVIEW')).toHaveLength(1);

    await world.client.request(removeStepParticipant, { participantId: seat!.participantId, idempotencyKey: world.key('unseat') });
    await world.move(taskId, 'work');
    await world.move(taskId, 'review');
    const second = await world.terminalEntry(taskId, 'review', 2);
    expect(second.markers.map((m) => m.state)).toEqual(['done', 'done']);
    expect((await world.getTask(taskId)).participants).toEqual([expect.objectContaining({ role: 'reviewer', agentProfileId: 'rev-a' })]);
    expect(await world.jobs(taskId, 'REVIEW')).toHaveLength(2);
  });

  it('a crash after the seat was added, before its marker: the restart finds the seat, adds none, and the entry completes', async () => {
    const taskId = `T-crash-${randomUUID().slice(0, 8)}`;
    await world.task('seats', { taskId });
    await world.stopEngine(world.engine);
    const doomed = await world.startEngine({ GANTRY_TEST_WORKFLOW_KILL_AT: `${taskId}@review#1/effect:0` });
    await world.moveUntilKilled(taskId, 'review', doomed, 'the engine killed after the seat was added');
    await world.startEngine();
    const entry = await world.terminalEntry(taskId, 'review', 1);
    expect(entry.markers.map((m) => m.state)).toEqual(['done', 'done']);
    expect((await world.getTask(taskId)).participants).toHaveLength(1);
    expect(await world.jobs(taskId, 'REVIEW')).toHaveLength(1);
  });

  it('a run the job service answers VERSION_CONFLICT (nothing written, send again) is sent again under its key: no participant failure, the fan-out is done and queues one job', async () => {
    const taskId = `T-busy-${randomUUID().slice(0, 8)}`;
    await world.task('seats', { taskId });
    await world.stopEngine(world.engine);
    const engine = await world.startEngine({ GANTRY_TEST_WORKFLOW_FAIL: `enqueue-conflict:${taskId}` });
    await world.move(taskId, 'review');
    const entry = await world.terminalEntry(taskId, 'review', 1);
    expect(entry.markers.map((m) => [m.kind, m.state])).toEqual([['ensure_participant_seat', 'done'], ['queue_run_for_each_participant', 'done']]);
    expect(world.records(engine).filter((r) => r.rule === 'AC-C1' && r.taskId === taskId)).toEqual([]);
    expect(await world.jobs(taskId, 'REVIEW')).toHaveLength(1);
  });

  it('a seat whose append meets its stream kept busy past its patience is no failed action: the dispatch stops with the claim kept, and the next start resumes the entry', async () => {
    const taskId = `T-busy-${randomUUID().slice(0, 8)}`;
    await world.task('seats', { taskId });
    await world.stopEngine(world.engine);
    const busy = await world.startEngine({ GANTRY_TEST_WORKFLOW_FAIL: `seat-conflict:${taskId}` });
    await world.move(taskId, 'review');
    const ended = (r: { message: string; taskId?: unknown }) => r.taskId === taskId && (r.message === 'step entry dispatched' || r.message === 'step entry dispatch failed; it resumes at the next start');
    await world.logged(ended, 'the dispatch ended', busy);
    expect(world.records(busy).filter((r) => r.rule === 'AC-C3' && r.taskId === taskId)).toEqual([]);
    expect((await world.entries(taskId, 'review'))[0]!.markers.map((m) => [m.kind, m.state])).toEqual([['ensure_participant_seat', 'in_progress'], ['queue_run_for_each_participant', 'absent']]);
    await world.stopEngine(busy);
    await world.startEngine();
    const entry = await world.terminalEntry(taskId, 'review', 1);
    expect(entry.markers.map((m) => [m.kind, m.state])).toEqual([['ensure_participant_seat', 'done'], ['queue_run_for_each_participant', 'done']]);
    expect((await world.getTask(taskId)).participants).toEqual([expect.objectContaining({ role: 'reviewer', agentProfileId: 'rev-a' })]);
    expect(await world.jobs(taskId, 'REVIEW')).toHaveLength(1);
  });

  it('AC-L3: a dispatch stopped by its seat\'s stream kept busy past its patience is resumed by the process itself once the stream is free, not at its next start: the seat once, the fan-out once', async () => {
    const taskId = `T-busy-${randomUUID().slice(0, 8)}`;
    await world.task('seats', { taskId });
    await world.stopEngine(world.engine);
    const engine = await world.startEngine({ GANTRY_TEST_WORKFLOW_FAIL: `seat-conflict-once:${taskId}`, GANTRY_WORKFLOW_RUN_QUEUE_PATIENCE_MS: '1500' });
    await world.move(taskId, 'review');
    const ended = (r: { message: string; taskId?: unknown }) => r.taskId === taskId && (r.message === 'step entry dispatched' || r.message === 'step entry dispatch failed; it resumes at the next start');
    await world.logged(ended, 'the dispatch stopped at the busy stream', engine);
    expect((await world.entries(taskId, 'review'))[0]!.markers.map((m) => [m.kind, m.state])).toEqual([['ensure_participant_seat', 'in_progress'], ['queue_run_for_each_participant', 'absent']]);
    const entry = await world.terminalEntry(taskId, 'review', 1, { timeoutMs: 30_000 });
    expect(world.records(engine).filter((r) => r.rule === 'AC-L3' && r.taskId === taskId && r.cause !== undefined).map((r) => r.level)).toEqual(['error']);
    expect(entry.markers.map((m) => [m.kind, m.state])).toEqual([['ensure_participant_seat', 'done'], ['queue_run_for_each_participant', 'done']]);
    expect(world.records(engine).filter((r) => r.rule === 'AC-C3' && r.taskId === taskId)).toEqual([]);
    expect((await world.getTask(taskId)).participants).toEqual([expect.objectContaining({ role: 'reviewer', agentProfileId: 'rev-a' })]);
    expect(await world.jobs(taskId, 'REVIEW')).toHaveLength(1);
    // the same process did it: no restart
    expect(engine.process.exitCode).toBeNull();
    expect(world.engines.at(-1)).toBe(engine);
  }, 120_000);
});
