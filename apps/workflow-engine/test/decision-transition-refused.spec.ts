import { removeStepParticipant } from '@gantry/contracts';
import { WorkflowWorld } from './harness.js';

/*
 * A decision whose quorum calls for a transition the engine refuses (docs/workflow-engine.md,
 * "Decisions and quorum"): a switch_workflow to a workflow that does not exist. The decision is
 * recorded all the same; the refused move is answered and logged, and the task stays.
 */
describe('a decision whose transition is refused', () => {
  const world = new WorkflowWorld('wf_decision_refused');

  beforeAll(async () => {
    await world.start();
    await world.profile('rev-a');
    await world.importYaml('bad', `
name: Bad target
steps:
  - id: work
    name: Work
  - id: review
    name: Review
    on_turn_complete:
      - type: switch_workflow
        config: { workflow_id: nowhere }
        guard: { wait_for_quorum: any_reject }
  - id: done
    name: Done
`);
    await world.importYaml('bad-all', `
name: Bad target once all approve
steps:
  - id: work
    name: Work
  - id: review
    name: Review
    on_turn_complete:
      - type: switch_workflow
        config: { workflow_id: nowhere }
        guard: { wait_for_quorum: all_approve }
  - id: done
    name: Done
`);
  }, 120_000);
  afterAll(() => world.close(), 60_000);

  it('is recorded; the refusal is in the answer and logged; the task stays at the step', async () => {
    const { taskId } = await world.task('bad');
    const seat = await world.seat(taskId, 'bad', 'review', 'reviewer', 'rev-a');
    await world.move(taskId, 'review');
    const reply = await world.decide(taskId, 'review', seat, 'reject');
    expect(reply.moved).toBeNull();
    expect(reply.transitionRefused).toMatchObject({ code: 'NOT_FOUND' });
    const task = await world.getTask(taskId);
    expect(task.placement).toMatchObject({ stepId: 'review', admitted: true });
    expect(task.decisions).toEqual([expect.objectContaining({ decisionId: reply.decisionId, participantId: seat, verdict: 'reject' })]);
    await world.logged((r) => r.message === 'the decision\'s transition was refused' && r.taskId === taskId && r.code === 'NOT_FOUND', 'transition refused');
  });

  it('a seat removal whose quorum then calls for a refused transition stands; the task stays, the refusal is logged', async () => {
    const { taskId } = await world.task('bad-all');
    const a = await world.seat(taskId, 'bad-all', 'review', 'reviewer-a', 'rev-a');
    const b = await world.seat(taskId, 'bad-all', 'review', 'reviewer-b', 'rev-a');
    await world.move(taskId, 'review');
    await world.decide(taskId, 'review', a, 'approve');
    await world.client.request(removeStepParticipant, { participantId: b, idempotencyKey: world.key('unseat') });
    expect((await world.getTask(taskId)).placement).toMatchObject({ stepId: 'review', admitted: true });
    await world.logged((r) => r.message === 'the transition the removal of a seat called for was refused' && r.taskId === taskId && r.code === 'NOT_FOUND', 'removal transition refused');
  });
});
