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
});
