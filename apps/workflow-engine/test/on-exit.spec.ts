import { randomUUID } from 'node:crypto';
import { eventually } from '@gantry/testing';
import { WorkflowWorld } from './harness.js';

/*
 * on_exit after the move it follows has committed (docs/workflow-engine.md, "Triggers other than
 * on_enter"): the exit is recorded with the move, so an action that could not be done then — its
 * service away, or the process gone — is done later, once, and a repeat of the move does not lose it.
 */
describe('on_exit across a refusal and a crash', () => {
  const crashed = `T-exit-crash-${randomUUID().slice(0, 8)}`;
  const world = new WorkflowWorld('wf_on_exit');

  beforeAll(async () => {
    await world.start({ withEngine: false });
    // killed once the exit's session mode is set and its fan-out has queued its first of two runs
    await world.startEngine({ GANTRY_TEST_WORKFLOW_KILL_AT: `${crashed}@review#1/run:1:1` });
    for (const p of ['rev-a', 'rev-b', 'closer']) await world.profile(p);
    await world.importYaml('exits', `
name: Exits
steps:
  - id: work
    name: Work
  - id: review
    name: Review
    participants:
      - { id: seat-a, role: reviewer, agent_profile_id: rev-a, decision_required: false }
      - { id: seat-b, role: reviewer, agent_profile_id: rev-b, decision_required: false }
    on_exit:
      - type: set_session_mode
        config: { mode: acceptEdits }
      - type: queue_run_for_each_participant
        config: { role: reviewer, reason: review_left }
      - type: queue_run
        config: { target: 'agent_profile_id:closer', reason: closing }
  - id: done
    name: Done
`);
  }, 120_000);
  afterAll(() => world.close(), 60_000);

  it('the job service away when the task leaves: the exit is done once it answers, once, and a repeat of the move adds nothing', async () => {
    const { taskId } = await world.task('exits');
    await world.move(taskId, 'review');
    await world.stopJobService();
    const key = world.key('leave');
    expect((await world.move(taskId, 'done', key)).placement).toMatchObject({ stepId: 'done', admitted: true });
    await world.startJobService();
    await world.move(taskId, 'done', key);
    const reviews = await eventually(async () => {
      const jobs = await world.jobs(taskId, 'REVIEW');
      return jobs.length === 3 ? jobs : null;
    }, { what: 'the exit\'s three runs', timeoutMs: 60_000 });
    await eventually(async () => ((await world.db.query(`SELECT 1 FROM step_exits WHERE task_id = $1 AND finished`, [taskId])).rowCount === 1 ? true : null), { what: 'the exit finished' });
    expect(reviews.map((j) => `${j.agentProfileId}/${j.reason}`).sort()).toEqual(['closer/closing', 'rev-a/review_left', 'rev-b/review_left']);
    expect(await world.jobs(taskId, 'REVIEW')).toHaveLength(3);
    expect((await world.effects(taskId)).filter((e) => e.type === 'SessionModeSet')).toHaveLength(1);
  }, 180_000);

  it('the job service away when the task leaves: the process runs the exit again by itself after growing pauses, and it is done once the service answers, with no repeat of the move', async () => {
    const { taskId } = await world.task('exits');
    await world.move(taskId, 'review');
    await world.stopJobService();
    expect((await world.move(taskId, 'done')).placement).toMatchObject({ stepId: 'done', admitted: true });
    const interrupted = (r: { message: string; taskId?: unknown }) => r.message === 'on_exit could not be done now; it runs again' && r.taskId === taskId;
    // tried again while the service is still away
    await eventually(() => world.records().filter(interrupted).length >= 2, { what: 'the exit tried again', timeoutMs: 60_000 });
    await world.startJobService();
    await eventually(async () => ((await world.db.query(`SELECT 1 FROM step_exits WHERE task_id = $1 AND finished`, [taskId])).rowCount === 1 ? true : null), { what: 'the exit finished', timeoutMs: 90_000 });
    expect((await world.jobs(taskId, 'REVIEW')).map((j) => `${j.agentProfileId}/${j.reason}`).sort()).toEqual(['closer/closing', 'rev-a/review_left', 'rev-b/review_left']);
    expect((await world.effects(taskId)).filter((e) => e.type === 'SessionModeSet')).toHaveLength(1);
  }, 180_000);

  it('the engine killed between two runs of the exit: the restart finishes the exit, one run per participant and target', async () => {
    await world.task('exits', { taskId: crashed });
    await world.move(crashed, 'review');
    await world.moveUntilKilled(crashed, 'done', world.engine);
    expect((await world.jobs(crashed, 'REVIEW')).map((j) => j.agentProfileId)).toEqual(['rev-a']);
    await world.startEngine();
    const reviews = await eventually(async () => {
      const jobs = await world.jobs(crashed, 'REVIEW');
      return jobs.length === 3 ? jobs : null;
    }, { what: 'the exit resumed after the restart', timeoutMs: 120_000 });
    await eventually(async () => ((await world.db.query(`SELECT 1 FROM step_exits WHERE task_id = $1 AND finished`, [crashed])).rowCount === 1 ? true : null), { what: 'the exit finished' });
    expect(reviews.map((j) => j.agentProfileId).sort()).toEqual(['closer', 'rev-a', 'rev-b']);
    expect(await world.jobs(crashed, 'REVIEW')).toHaveLength(3);
    expect((await world.effects(crashed)).filter((e) => e.type === 'SessionModeSet')).toHaveLength(1);
  }, 300_000);
});
