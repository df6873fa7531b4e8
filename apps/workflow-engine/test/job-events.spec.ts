import { WorkflowWorld } from './harness.js';

/*
 * What the engine learns from the job service's events (docs/workflow-engine.md, "Triggers other
 * than on_enter"), delivered late and together: a backlog the engine finds when it starts.
 */
describe('job events handled together', () => {
  const world = new WorkflowWorld('wf_job_events');

  beforeAll(async () => {
    await world.start();
    await world.importYaml('flow', `
name: Flow
steps:
  - id: todo
    name: To do
  - id: work
    name: Work
    on_turn_complete:
      - type: move_to_next
  - id: review
    name: Review
`);
    await world.importYaml('planned', `
name: Planned
steps:
  - id: todo
    name: To do
  - id: work
    name: Work
    on_turn_start:
      - type: enable_plan_mode
    on_turn_complete:
      - type: move_to_next
  - id: review
    name: Review
`);
  }, 120_000);
  afterAll(() => world.close(), 60_000);

  it('a job that started and finished while the engine was away moves its task when the engine comes back', async () => {
    const { taskId } = await world.task('flow');
    await world.move(taskId, 'work');
    await world.stopEngine(world.engine);
    // The task's first job: its start records the session start on the task's stream, its finish moves the task.
    await world.agentTurn(taskId);
    await world.startEngine();
    await world.atStep(taskId, 'review', 20_000);
    expect((await world.getTask(taskId)).session).toMatchObject({ started: true });
  });

  it('the first job of a task starting where on_turn_start records on the session: both land, the turn moves the task', async () => {
    const { taskId } = await world.task('planned');
    await world.move(taskId, 'work');
    await world.agentTurn(taskId);
    await world.atStep(taskId, 'review', 20_000);
    expect((await world.getTask(taskId)).session).toMatchObject({ started: true, planMode: true });
  });
});
