import { enqueueJob } from '@gantry/contracts';
import { eventually } from '@gantry/testing';
import { WorkflowWorld } from './harness.js';

/*
 * A job's start and finish handled before the engine recorded the job (docs/workflow-engine.md,
 * "Triggers other than on_enter"): its JobEnqueued failed and is being retried (or was given up on),
 * or another replica holds it. The job is the engine's — its task is one the engine knows — so its
 * finish is a completed turn all the same.
 */
describe('job events of a job the engine has not recorded yet', () => {
  const taskId = 'T-late-enqueue';
  const world = new WorkflowWorld('wf_job_order');

  beforeAll(async () => {
    // Every JobEnqueued of this task's jobs fails in the engine's handler: the engine never learns the job from it.
    await world.start({ engineEnv: { GANTRY_TEST_WORKFLOW_FAIL: `job-enqueued:${taskId}` } });
    await world.importYaml('flow', `
name: Flow
steps:
  - id: work
    name: Work
    on_turn_complete:
      - type: move_to_next
  - id: review
    name: Review
`);
  }, 120_000);
  afterAll(() => world.close(), 60_000);

  /** How many get_job the job service has answered (its /metrics). */
  const getJobs = async () => {
    const text = await (await fetch(`${world.jobService.url}/metrics`)).text();
    const count = /^gantry_command_duration_seconds_count\{command="jobs\.get_job",outcome="ok"\} (\d+)$/m.exec(text)?.[1];
    return count === undefined ? 0 : Number(count);
  };

  it('the finish of a job of a known task whose JobEnqueued was not handled still completes the turn', async () => {
    const asked = await getJobs();
    await world.task('flow', { taskId });
    await world.move(taskId, 'work');
    await world.agentTurn(taskId);
    await world.atStep(taskId, 'review', 20_000);
    expect((await world.getTask(taskId)).session).toMatchObject({ started: true });
    // The engine asked the job service whose the job is.
    expect(await getJobs()).toBeGreaterThan(asked);
  });

  it('the events of a job whose task the engine does not know are passed over, without asking the job service once its JobEnqueued said so', async () => {
    const asked = await getJobs();
    const jobId = await world.agentTurn('T-not-the-engines');
    const { rows } = await world.jobsDb.query(`SELECT event_id FROM events WHERE type = 'JobFinished' AND data->>'jobId' = $1`, [jobId]);
    await eventually(async () => (await world.db.query(`SELECT 1 FROM inbox WHERE event_id = $1`, [rows[0].event_id])).rowCount === 1, { what: 'the foreign JobFinished handled' });
    expect((await world.db.query(`SELECT 1 FROM task_jobs WHERE job_id = $1`, [jobId])).rowCount).toBe(0);
    // Its JobEnqueued came first and named a task the engine does not have: its start and finish asked nothing.
    expect(await getJobs()).toBe(asked);
  });
  it('a job queued for a task before the engine had the task is the task\'s once the engine has it: its finish completes the turn, though its JobEnqueued found no such task', async () => {
    const early = 'T-task-after-its-job';
    const { jobId } = await world.client.request(enqueueJob, {
      kind: 'PLAN_CHAT', productId: 'product-t', taskId: early, prompt: 'take a turn', idempotencyKey: world.key('early'), excludeFromCoalescing: true,
    });
    const { rows } = await world.jobsDb.query(`SELECT event_id FROM events WHERE type = 'JobEnqueued' AND data->>'jobId' = $1`, [jobId]);
    await eventually(async () => (await world.db.query(`SELECT 1 FROM inbox WHERE event_id = $1`, [rows[0].event_id])).rowCount === 1, { what: 'the JobEnqueued handled before the task existed' });
    await world.task('flow', { taskId: early });
    await world.move(early, 'work');
    await world.finishAsRunner(jobId, 'PLAN_CHAT');
    // as an engine process that never saw the JobEnqueued (another replica, this one restarted) would judge it
    await world.atStep(early, 'review', 20_000);
    expect((await world.db.query(`SELECT step_id FROM task_jobs WHERE job_id = $1`, [jobId])).rows).toEqual([{ step_id: 'work' }]);
  });
});
