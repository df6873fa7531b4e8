import { cancelSprintRun, claimJob, createSprintRun, listJobs } from '@gantry/contracts';
import { eventually } from '@gantry/testing';
import { WorkflowWorld } from './harness.js';

/*
 * AC-T1 (docs/workflow-engine.md): the job service's sprint-run effect RETURN_TASKS_TO_TODO is the
 * engine's return_tasks_to_todo — a cancelled sprint run's open tasks go back to their workflow's
 * start step, each a return_to_todo entry dispatched like any other; tasks the engine does not know
 * are answered back.
 */
describe('a cancelled sprint run returns its tasks to the start step', () => {
  const world = new WorkflowWorld('wf_sprint');

  beforeAll(async () => {
    await world.start();
    await world.profile('rev-a');
    await world.importYaml('board', `
name: Board
start_step: todo
steps:
  - id: todo
    name: To do
    on_enter:
      - type: queue_run
        config: { target: 'agent_profile_id:rev-a', reason: back_to_todo }
  - id: doing
    name: Doing
  - id: done
    name: Done
`);
  }, 120_000);
  afterAll(() => world.close(), 60_000);

  it('V44 AC-T1: the engine moves the sprint\'s open tasks back to the start step when the job service cancels the run', async () => {
    const a = (await world.task('board', { stepId: 'doing' })).taskId;
    const b = (await world.task('board', { stepId: 'doing' })).taskId;
    const run = await world.client.request(createSprintRun, { sprintId: 'SP-1', productId: 'product-t', taskIds: [a, b, 'T-elsewhere'], branch: 'sprint/sp-1', idempotencyKey: world.key('sprint') });
    const jobs = await eventually(async () => {
      const j = (await world.client.request(listJobs, { sprintRunId: run.sprintRunId })).jobs;
      return j.length === 1 ? j : null;
    }, { what: "the sprint's first job (its tasks are queued one after the other)" });
    await world.client.request(claimJob, { runnerId: 'runner-s', kinds: ['SPRINT_IMPLEMENTATION'], jobId: jobs[0]!.jobId, idempotencyKey: world.key('claim') });
    await eventually(async () => (await world.jobsDb.query(`SELECT 1 FROM events WHERE stream_id = $1 AND type = 'SprintRunStarted'`, [run.sprintRunId])).rows.length > 0, { what: 'the run started' });
    await world.client.request(cancelSprintRun, { sprintRunId: run.sprintRunId, reason: 'scope changed', idempotencyKey: world.key('cancel') });
    for (const taskId of [a, b]) {
      const task = await world.atStep(taskId, 'todo');
      expect(task.currentEntry).toMatchObject({ stepId: 'todo', entryPath: 'return_to_todo', entrySeq: 1 });
      await world.terminalEntry(taskId, 'todo', 1);
      expect((await world.jobs(taskId, 'REVIEW')).map((j) => j.reason)).toEqual(['back_to_todo']);
    }
  });
});
