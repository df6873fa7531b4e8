import { WorkflowWorld } from './harness.js';

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
