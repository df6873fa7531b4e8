import { randomUUID } from 'node:crypto';
import type { INestApplication } from '@nestjs/common';
import type { Subscription } from '@nats-io/transport-node';
import {
  cancelSprintRun,
  claimJob,
  commandSubject,
  createSprintRun,
  dispatchStreamName,
  enqueueJob,
  getJob,
  getSprintRun,
  listJobs,
  markPrReadyForReview,
  PullRequestChecksFailed,
  PullRequestMergeConflict,
  returnTasksToTodo,
  rollbackClaim,
  streamName,
  type EventEnvelope,
} from '@gantry/contracts';
import { consumerCaughtUp, deliverAgain, eventually, handledByConsumer } from '@gantry/testing';
import { OWN_EVENTS_DURABLE } from '../src/application/durables.js';
import { createWorld, envelopeOf, finishClaimedDone, key, registerProducts, sha, startInProcess, type TestWorld } from './harness.js';

/*
 * The job service's consumers of its own sprint-run and job events (docs/architecture.md, "Consumers
 * and their duplicates"), on two replicas: an event that comes again — as copies taken at once by both
 * replicas, and once more after it was handled — has its effect once: each job of a cancelled run
 * cancelled once and its tasks asked back to TO_DO once; a finished job's task recorded done once and
 * the next task queued once; a completed run's pull request asked ready once; a requeued job offered
 * once for its next attempt; a merge conflict pausing the run once; red checks failing the job that
 * pushed the head once.
 */
describe('job, sprint-run and pull-request events delivered more than once to the job service (two replicas)', () => {
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

  /** A fact of the pull request of `branch` as the pr-service publishes it. */
  const prEvent = (type: string, branch: string, data: Record<string, unknown>): EventEnvelope => ({
    eventId: randomUUID(), type, schemaVersion: 1, streamId: `pr-acme_twice-${branch.replace('/', '_')}`, streamVersion: 1, position: 1,
    occurredAt: new Date().toISOString(), correlationId: 'pr-test', causationId: null, idempotencyKey: null, actor: null,
    data: {
      pullRequestId: `pr-acme_twice-${branch.replace('/', '_')}`, repository: 'acme/twice', branch, baseBranch: 'main', prNumber: 7,
      prUrl: 'https://github.com/acme/twice/pull/7', detectedAt: new Date().toISOString(), ...data,
    },
  });

  /** A pull-request fact four times at once, then once more once `consumer` has handled it. */
  async function deliveredOftenOnPrs(event: EventEnvelope, consumer: string): Promise<void> {
    const prs = streamName(world.naming, 'prs');
    await consumerCaughtUp(world.bus.jsm, prs, consumer, { upTo: await deliverAgain(world.bus.js, world.naming, 'prs', event, 4) });
    await handledByConsumer(world.db, consumer, event.eventId);
    await consumerCaughtUp(world.bus.jsm, prs, consumer, { upTo: await deliverAgain(world.bus.js, world.naming, 'prs', event) });
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

  it("a requeue delivered four times at once and again once handled: the job's next attempt is offered once", async () => {
    const { jobId } = await world.client.request(enqueueJob, { kind: 'PLAN_CHAT', productId: 'product-tw', prompt: 'plan', idempotencyKey: key('enqueue') });
    const stream = dispatchStreamName(world.naming);
    const offers = async () => {
      const found: number[] = [];
      const info = await world.bus.jsm.streams.info(stream);
      for (let seq = info.state.first_seq; seq <= info.state.last_seq && info.state.messages > 0; seq++) {
        const msg = await world.bus.jsm.streams.getMessage(stream, { seq }).catch(() => null);
        const body = msg?.json<{ jobId: string; attempt: number }>();
        if (body?.jobId === jobId) found.push(body.attempt);
      }
      return found;
    };
    await eventually(async () => (await offers()).length === 1, { what: 'the first offer' });
    const claim = await world.client.request(claimJob, { runnerId: 'runner-tw-offers', kinds: ['PLAN_CHAT'], jobId, idempotencyKey: key('claim') });
    if (!claim.claimed) throw new Error('not claimed');
    await world.client.request(rollbackClaim, { jobId, runnerId: 'runner-tw-offers', leaseToken: claim.job.leaseToken, reason: 'agent exited 1', idempotencyKey: key('rollback') });
    await eventually(async () => (await offers()).length === 2, { what: 'the offer of attempt 2' });

    await deliveredOften(await envelopeOf(world, jobId, 'JobClaimRolledBack'), [OWN_EVENTS_DURABLE]);

    expect(await offers()).toEqual([1, 2]);
  }, 120_000);

  it("a merge conflict on a sprint run's head, delivered four times at once and again once handled: the run is paused once", async () => {
    const branch = 'sprint/SP-tw3';
    const created = await world.client.request(createSprintRun, {
      sprintId: 'SP-tw3', productId: 'product-tw', taskIds: ['T-tw5', 'T-tw6'], branch, idempotencyKey: key('sprint'),
    });
    const job = await eventually(async () => (await sprintJobs(created.sprintRunId)).find((j) => j.taskId === 'T-tw5' && j.status === 'QUEUED') ?? null, { what: 'the job of T-tw5' });
    const claim = await world.client.request(claimJob, { runnerId: 'runner-tw3', kinds: ['SPRINT_IMPLEMENTATION'], jobId: job.jobId, idempotencyKey: key('claim') });
    if (!claim.claimed) throw new Error('not claimed');
    await finishClaimedDone(world.client, { jobId: job.jobId, runnerId: 'runner-tw3', leaseToken: claim.job.leaseToken }, sha('d'));
    await eventually(async () => (await eventsOf('SprintRunTaskCompleted', [created.sprintRunId])) === 1, { what: 'T-tw5 done in the run' });
    const conflict = prEvent(PullRequestMergeConflict.type, branch, { headSha: sha('d'), conflictingFiles: ['src/app.ts'] });

    await deliveredOftenOnPrs(conflict, 'job-service-sprint-runs-merge-conflicts');

    expect(await world.client.request(getSprintRun, { sprintRunId: created.sprintRunId })).toMatchObject({ status: 'PAUSED', pause: { reason: 'MERGE_CONFLICT' } });
    expect(await eventsOf('SprintRunPaused', [created.sprintRunId])).toBe(1);
  }, 120_000);

  it('red checks on the head a story job pushed, delivered four times at once and again once handled: the job fails once', async () => {
    const branch = 'story/ST-tw';
    const { jobId } = await world.client.request(enqueueJob, {
      kind: 'TASK_IMPLEMENTATION', productId: 'product-tw', storyId: 'ST-tw', taskId: 'T-tw9', branch, baseRef: 'main', idempotencyKey: key('enqueue'),
    });
    const claim = await world.client.request(claimJob, { runnerId: 'runner-tw-story', kinds: ['TASK_IMPLEMENTATION'], jobId, idempotencyKey: key('claim') });
    if (!claim.claimed) throw new Error('not claimed');
    await finishClaimedDone(world.client, { jobId, runnerId: 'runner-tw-story', leaseToken: claim.job.leaseToken }, sha('c'));
    const failedChecks = prEvent(PullRequestChecksFailed.type, branch, { headSha: sha('c'), failedChecks: [{ name: 'ci/test', conclusion: 'failure', detailsUrl: null }] });

    await deliveredOftenOnPrs(failedChecks, 'job-service-sprint-runs-checks-failed');

    expect(await world.client.request(getJob, { jobId })).toMatchObject({ status: 'FAILED', taskStatus: 'IN_PROGRESS' });
    expect(await eventsOf('JobChecksFailed', [jobId])).toBe(1);
  }, 120_000);
});
