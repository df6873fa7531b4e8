import { removeStepParticipant } from '@gantry/contracts';
import { WorkflowWorld, reviewYaml } from './harness.js';

/*
 * A seat is named by its participant id, and a decision names the seat it is for
 * (docs/workflow-engine.md, "Decisions and quorum"). A task-level seat and a template seat of the
 * same step that share an id (the workflow re-imported with the id after the task's seat was added)
 * are one seat to a decision, and so to the quorum: one decision never counts twice.
 */
describe('seats sharing a participant id', () => {
  const world = new WorkflowWorld('wf_seat_ids');
  const yaml = (seats: string) => `
name: Majority
steps:
  - id: work
    name: Work
  - id: review
    name: Review
    on_turn_complete:
      - type: move_to_next
        guard: { wait_for_quorum: majority_approve }
    participants:
${seats}
  - id: done
    name: Done
`;

  beforeAll(async () => {
    await world.start();
    for (const p of ['rev-a', 'rev-b', 'rev-c']) await world.profile(p);
  }, 120_000);
  afterAll(() => world.close(), 60_000);

  it('one decision for an id both a task seat and a template seat have counts once', async () => {
    await world.importYaml('shared', yaml(`      - { id: seat-c, role: reviewer, agent_profile_id: rev-c, decision_required: true, position: 1 }`));
    const { taskId } = await world.task('shared');
    await world.seat(taskId, 'shared', 'review', 'reviewer', 'rev-a', { participantId: 'seat-x' });
    // The workflow now declares seat-x too: the step has seat-x (task and template rows) and seat-c.
    await world.importYaml('shared', yaml(`      - { id: seat-x, role: reviewer, agent_profile_id: rev-b, decision_required: true }
      - { id: seat-c, role: reviewer, agent_profile_id: rev-c, decision_required: true, position: 1 }`));
    await world.move(taskId, 'review');

    // majority_approve would hold at 2 of 3 if seat-x's approval counted twice; it is 1 of 2.
    const first = await world.decide(taskId, 'review', 'seat-x', 'approve');
    expect(first.moved).toBeNull();
    expect((await world.getTask(taskId)).placement).toMatchObject({ stepId: 'review', admitted: true });
    const second = await world.decide(taskId, 'review', 'seat-c', 'approve');
    expect(second.moved?.placement.stepId).toBe('done');
  });
});

/*
 * A quorum is over the step's current seats (docs/workflow-engine.md, "Decisions and quorum"):
 * removing a seat re-evaluates the step's guarded transitions at once, as a decision does.
 */
describe('a seat removed', () => {
  const world = new WorkflowWorld('wf_seat_removed');

  beforeAll(async () => {
    await world.start();
    for (const p of ['rev-a', 'rev-b']) await world.profile(p);
    await world.importYaml('rm', reviewYaml('      - type: clear_decisions'));
  }, 120_000);
  afterAll(() => world.close(), 60_000);

  it('whose vote was the one missing moves the task on the remaining seats\' decisions', async () => {
    const { taskId } = await world.task('rm');
    const a = await world.seat(taskId, 'rm', 'review', 'reviewer', 'rev-a');
    const b = await world.seat(taskId, 'rm', 'review', 'reviewer', 'rev-b', { position: 1 });
    await world.move(taskId, 'review');
    await world.terminalEntry(taskId, 'review', 1);
    expect((await world.decide(taskId, 'review', a, 'approve')).moved).toBeNull();

    await world.client.request(removeStepParticipant, { participantId: b, idempotencyKey: world.key('unseat') });
    // all_approve over the seat left: a approved.
    await world.atStep(taskId, 'done', 10_000);
  });

  it('of a task at another step changes nothing where the task is', async () => {
    const { taskId } = await world.task('rm');
    const a = await world.seat(taskId, 'rm', 'review', 'reviewer', 'rev-a');
    await world.move(taskId, 'work');
    await world.client.request(removeStepParticipant, { participantId: a, idempotencyKey: world.key('unseat') });
    expect((await world.getTask(taskId)).placement).toMatchObject({ stepId: 'work', admitted: true });
  });
});
