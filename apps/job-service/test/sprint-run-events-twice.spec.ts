import type { INestApplication } from '@nestjs/common';
import type { Subscription } from '@nats-io/transport-node';
import {
  cancelSprintRun,
  claimJob,
  commandSubject,
  createSprintRun,
  listJobs,
  markPrReadyForReview,
  returnTasksToTodo,
  streamName,
  type EventEnvelope,
} from '@gantry/contracts';
import { consumerCaughtUp, deliverAgain, eventually, handledByConsumer } from '@gantry/testing';
import { OWN_EVENTS_DURABLE } from '../src/application/durables.js';
import { createWorld, envelopeOf, finishClaimedDone, key, registerProducts, startInProcess, type TestWorld } from './harness.js';

/*
 * The job service's consumers of its own sprint-run and job events (docs/architecture.md, "Consumers
 * and their duplicates"), on two replicas: an event that comes again — as copies taken at once by both
 * replicas, and once more after it was handled — has its effect once: each job of a cancelled run
 * cancelled once and its tasks asked back to TO_DO once; a finished job's task recorded done once and
 * the next task queued once; a completed run's pull request asked ready once.
 */
describe('sprint-run and job events delivered more than once to the job service (two replicas)', () => {
  let world: TestWorld;
  const apps: INestApplication[] = [];
  const responders: Subscription[] = [];
  const asked: Record<string, Record<string, unknown>[]> = { [returnTasksToTodo.name]: [], [markPrReadyForReview.name]: [] };

  beforeAll(async () => {
    world = await createWorld('sprint-twice');
    apps.push(await startInProcess(world), await startInProcess(world));
    await registerProducts(world.client, ['product-tw'], { repository: 'acme/twice', prStrategy: 'SPRINT' });
    // Stand-ins for the workflow engine and the pr-service: each request they get is counted.
    const respond = (context: 'workflow' | 'prs', name: string, result: (request: Record<string, unknown>) => unknown) =>
      responders.push(world.bus.nc.subscribe(commandSubject(world.naming, context, name), {
        callback: (_error, msg) => {
          const request = JSON.parse(new TextDecoder().decode(msg.data)) as Record<string, unknown>;
          asked[name]!.push(request);
          msg.respond(JSON.stringify({ ok: true, result: result(request) }));
        },
      }));
    respond('workflow', returnTasksToTodo.name, (r) => ({ returned: [], unknownTaskIds: r.taskIds }));
    respond('prs', markPrReadyForReview.name, () => ({ pullRequestId: 'pr-tw', phase: 'ready_for_review', prUrl: 'https://github.com/acme/twice/pull/1' }));
  }, 60_000);

  afterAll(async () => {
    responders.forEach((s) => s.unsubscribe());
    for (const app of apps) await app.close();
    await world?.close();
  });

  const jobsStream = () => streamName(world.naming, 'jobs');
  const sprintJobs = async (sprintRunId: string) => (await world.client.request(listJobs, { sprintRunId })).jobs;
  const eventsOf = async (type: string, streamIds: string[]) =>
    (await world.db.query(`SELECT count(*)::int AS n FROM events WHERE type = $1 AND stream_id = ANY($2)`, [type, streamIds])).rows[0].n as number;
  const askedFor = (name: string, sprintRunId: string) => asked[name]!.filter((r) => r.sprintRunId === sprintRunId);

  /** Four copies of `event` at once, then one more once every consumer is past them: each durable named is caught up. */
  async function deliveredOften(event: EventEnvelope, durables: string[]): Promise<void> {
    const copies = await deliverAgain(world.bus.js, world.naming, 'jobs', event, 4);
    for (const durable of durables) await consumerCaughtUp(world.bus.jsm, jobsStream(), durable, { upTo: copies, timeoutMs: 60_000 });
    const late = await deliverAgain(world.bus.js, world.naming, 'jobs', event);
    for (const durable of durables) await consumerCaughtUp(world.bus.jsm, jobsStream(), durable, { upTo: late, timeoutMs: 60_000 });
  }

  it("a run's cancel: its queued job cancelled once, its tasks asked back to TO_DO once", async () => {
    const created = await world.client.request(createSprintRun, {
      sprintId: 'SP-tw1', productId: 'product-tw', taskIds: ['T-tw1', 'T-tw2'], branch: 'sprint/SP-tw1', idempotencyKey: key('sprint'),
    });
    await eventually(async () => (await sprintJobs(created.sprintRunId)).find((j) => j.status === 'QUEUED') ?? null, { what: 'the run queued its first job' });
    await world.client.request(cancelSprintRun, { sprintRunId: created.sprintRunId, reason: 'scope changed', idempotencyKey: key('cancel') });
    const cancelled = await eventually(() => envelopeOf(world, created.sprintRunId, 'SprintRunCancelled').catch(() => null), { what: 'the run cancelled' });
    await handledByConsumer(world.db, 'job-service-sprint-run-task-returns', cancelled.eventId);

    await deliveredOften(cancelled, [OWN_EVENTS_DURABLE, 'job-service-sprint-run-task-returns']);

    const jobIds = (await sprintJobs(created.sprintRunId)).map((j) => j.jobId);
    expect(jobIds).toHaveLength(1);
    expect(await eventsOf('JobCancelled', jobIds)).toBe(1);
    expect(askedFor(returnTasksToTodo.name, created.sprintRunId)).toHaveLength(1);
  }, 120_000);

  it("a job's finish and the run's completion: the task done once, the next task queued once, the pull request asked ready once", async () => {
    const created = await world.client.request(createSprintRun, {
      sprintId: 'SP-tw2', productId: 'product-tw', taskIds: ['T-tw3', 'T-tw4'], branch: 'sprint/SP-tw2', idempotencyKey: key('sprint'),
    });
    for (const taskId of ['T-tw3', 'T-tw4']) {
      const job = await eventually(async () => (await sprintJobs(created.sprintRunId)).find((j) => j.taskId === taskId && j.status === 'QUEUED') ?? null, { what: `the job of ${taskId}` });
      const claim = await world.client.request(claimJob, { runnerId: 'runner-tw', kinds: ['SPRINT_IMPLEMENTATION'], jobId: job.jobId, idempotencyKey: key('claim') });
      if (!claim.claimed) throw new Error('not claimed');
      await finishClaimedDone(world.client, { jobId: job.jobId, runnerId: 'runner-tw', leaseToken: claim.job.leaseToken });
      if (taskId === 'T-tw3') await deliveredOften(await envelopeOf(world, job.jobId, 'JobFinished'), [OWN_EVENTS_DURABLE]);
    }
    const completed = await eventually(() => envelopeOf(world, created.sprintRunId, 'SprintRunCompleted').catch(() => null), { what: 'the run completed' });
    await handledByConsumer(world.db, 'job-service-sprint-run-pr-ready', completed.eventId);

    await deliveredOften(completed, [OWN_EVENTS_DURABLE, 'job-service-sprint-run-pr-ready']);

    const jobs = await sprintJobs(created.sprintRunId);
    expect(jobs.map((j) => [j.taskId, j.status]).sort()).toEqual([['T-tw3', 'DONE'], ['T-tw4', 'DONE']]);
    expect(await eventsOf('SprintRunTaskCompleted', [created.sprintRunId])).toBe(2);
    expect(await eventsOf('SprintRunCompleted', [created.sprintRunId])).toBe(1);
    expect(askedFor(markPrReadyForReview.name, created.sprintRunId)).toHaveLength(1);
  }, 120_000);
});
