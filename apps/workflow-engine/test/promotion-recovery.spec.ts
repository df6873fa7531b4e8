import { eventually } from '@gantry/testing';
import { WorkflowWorld } from './harness.js';

/*
 * A seat that came free while the engine died (docs/workflow-engine.md, "Tasks and WIP admission",
 * "Recovery"): the promotion of the waiting task follows the move's commit in the same process; a
 * crash between the two must not leave the waiting task waiting for a seat that is free.
 */
describe('promotion across a crash', () => {
  const world = new WorkflowWorld('wf_promote');

  beforeAll(async () => {
    await world.start();
    await world.profile('rev-a');
    // on_exit's run keeps the process between the move's commit and the promotion while the job service is away.
    await world.importYaml('wip', `
name: WIP
steps:
  - id: work
    name: Work
  - id: review
    name: Review
    wip_limit: 1
    on_exit:
      - type: queue_run
        config: { target: 'agent_profile_id:rev-a' }
  - id: done
    name: Done
`);
  }, 120_000);
  afterAll(() => world.close(), 60_000);

  it('the engine killed after a move freed a seat, before promoting: the restart promotes the waiting task', async () => {
    const { taskId: first } = await world.task('wip');
    const { taskId: waiting } = await world.task('wip');
    await world.move(first, 'review');
    const held = await world.move(waiting, 'review');
    expect(held.placement).toMatchObject({ stepId: 'work', queuedForStepId: 'review' });

    await world.stopJobService();
    const leaving = world.move(first, 'done').catch(() => undefined);
    await eventually(async () => (await world.db.query(`SELECT 1 FROM tasks WHERE task_id = $1 AND step_id = 'done'`, [first])).rowCount === 1, {
      what: 'the move out of review committed',
    });
    await world.stopEngine(world.engine);
    await leaving;
    const { rows } = await world.db.query(`SELECT step_id, queued_for_step_id FROM tasks WHERE task_id = $1`, [waiting]);
    expect(rows[0]).toEqual({ step_id: 'work', queued_for_step_id: 'review' });

    await world.startJobService();
    await world.startEngine();
    const promoted = await world.atStep(waiting, 'review', 20_000);
    expect(promoted.placement).toMatchObject({ admitted: true, queuedForStepId: null });
  });

  it('a limit raised by two admits the two longest-waiting tasks, not one', async () => {
    const yaml = (limit: number) => `
name: Raised
steps:
  - id: work
    name: Work
  - id: review
    name: Review
    wip_limit: ${limit}
  - id: done
    name: Done
`;
    await world.importYaml('raised', yaml(1));
    const { taskId: first } = await world.task('raised');
    await world.move(first, 'review');
    const waiting = [];
    for (let i = 0; i < 3; i++) {
      const { taskId } = await world.task('raised');
      expect((await world.move(taskId, 'review')).placement).toMatchObject({ stepId: 'work', queuedForStepId: 'review' });
      waiting.push(taskId);
    }
    await world.importYaml('raised', yaml(3));
    await world.atStep(waiting[0]!, 'review', 10_000);
    await world.atStep(waiting[1]!, 'review', 10_000);
    expect((await world.getTask(waiting[2]!)).placement).toMatchObject({ stepId: 'work', queuedForStepId: 'review' });
  });
});
