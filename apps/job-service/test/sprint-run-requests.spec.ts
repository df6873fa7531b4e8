import type { INestApplication } from '@nestjs/common';
import type { Subscription } from '@nats-io/transport-node';
import {
  cancelSprintRun,
  claimJob,
  commandSubject,
  createSprintRun,
  getJob,
  listJobs,
  markPrReadyForReview,
  returnTasksToTodo,
} from '@gantry/contracts';
import { eventIdOf, eventually, handledByConsumer } from '@gantry/testing';
import { createWorld, finishClaimedDone, key, registerProducts, startInProcess, type TestWorld } from './harness.js';

/**
 * A sprint run's requests to other services (the workflow engine's return_tasks_to_todo, the
 * pr-service's mark_pr_ready_for_review) while nothing answers them: the run's own effects do not wait
 * for them, and they are asked again until answered, once in effect.
 */
describe("a sprint run's requests to other services", () => {
  let world: TestWorld;
  let app: INestApplication;
  const responders: Subscription[] = [];

  beforeAll(async () => {
    world = await createWorld('sprint-requests');
    app = await startInProcess(world);
    await registerProducts(world.client, ['product-rq'], { repository: 'acme/requests', prStrategy: 'SPRINT' });
  });

  afterAll(async () => {
    responders.forEach((s) => s.unsubscribe());
    await app?.close();
    await world?.close();
  });

  /** A stand-in for another service's command: records each request and answers it with `result`. */
  function respond(context: 'workflow' | 'prs', name: string, result: (request: Record<string, unknown>) => unknown): Record<string, unknown>[] {
    const requests: Record<string, unknown>[] = [];
    responders.push(world.bus.nc.subscribe(commandSubject(world.naming, context, name), {
      callback: (_error, msg) => {
        const request = JSON.parse(new TextDecoder().decode(msg.data)) as Record<string, unknown>;
        requests.push(request);
        msg.respond(JSON.stringify({ ok: true, result: result(request) }));
      },
    }));
    return requests;
  }

  const sprintJobs = async (sprintRunId: string) => (await world.client.request(listJobs, { sprintRunId })).jobs;

  it("a cancel's jobs are cancelled at once while the workflow engine does not answer; return_tasks_to_todo is asked until it does, once in effect", async () => {
    const created = await world.client.request(createSprintRun, {
      sprintId: 'SP-rq1', productId: 'product-rq', taskIds: ['T-rq1', 'T-rq2'], branch: 'sprint/SP-rq1', idempotencyKey: key('sprint'),
    });
    const job = await eventually(async () => (await sprintJobs(created.sprintRunId)).find((j) => j.status === 'QUEUED') ?? null, { what: 'the run queued its first job' });

    await world.client.request(cancelSprintRun, { sprintRunId: created.sprintRunId, reason: 'scope changed', idempotencyKey: key('cancel') });
    // No workflow engine: the run's own effect is not held back by it.
    await eventually(async () => (await world.client.request(getJob, { jobId: job.jobId })).status === 'CANCELLED', { what: "the cancelled run's queued job CANCELLED", timeoutMs: 15_000 });
    await expect(world.client.request(claimJob, { runnerId: 'runner-rq', kinds: ['SPRINT_IMPLEMENTATION'], jobId: job.jobId, idempotencyKey: key('claim') }))
      .rejects.toThrow(/CANCELLED and can no longer be claimed/);

    // Still unanswered after a while: the request is not given up (no dead letter), nor lost when the service
    // stops and starts again meanwhile, and asked once the engine answers.
    await new Promise((resolve) => setTimeout(resolve, 3000));
    expect((await world.db.query(`SELECT count(*)::int AS n FROM dead_letters`)).rows[0].n).toBe(0);
    await app.close();
    app = await startInProcess(world);
    const asked = respond('workflow', returnTasksToTodo.name, (r) => ({ returned: [], unknownTaskIds: r.taskIds }));
    const cancelEventId = await eventIdOf(world.db, created.sprintRunId, 'SprintRunCancelled');
    // An event JetStream sent to the stopped process as it closed comes back after its ack wait (30 s).
    await handledByConsumer(world.db, 'job-service-sprint-run-task-returns', cancelEventId, { timeoutMs: 75_000 });
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const ofRun = asked.filter((r) => r.sprintRunId === created.sprintRunId);
    expect(ofRun).toHaveLength(1);
    expect(ofRun[0]).toMatchObject({ taskIds: ['T-rq1', 'T-rq2'], idempotencyKey: expect.stringMatching(/^sprint-run:/) });
  }, 120_000);

  it("a completed run's mark_pr_ready_for_review is asked until the pr-service answers, once in effect", async () => {
    const created = await world.client.request(createSprintRun, {
      sprintId: 'SP-rq2', productId: 'product-rq', taskIds: ['T-rq3'], branch: 'sprint/SP-rq2', idempotencyKey: key('sprint'),
    });
    const job = await eventually(async () => (await sprintJobs(created.sprintRunId)).find((j) => j.status === 'QUEUED') ?? null, { what: 'the run queued its job' });
    const claim = await world.client.request(claimJob, { runnerId: 'runner-rq2', kinds: ['SPRINT_IMPLEMENTATION'], jobId: job.jobId, idempotencyKey: key('claim') });
    if (!claim.claimed) throw new Error('not claimed');
    await finishClaimedDone(world.client, { jobId: job.jobId, runnerId: 'runner-rq2', leaseToken: claim.job.leaseToken });
    const completedEventId = await eventually(() => eventIdOf(world.db, created.sprintRunId, 'SprintRunCompleted').catch(() => null), { what: 'the run completed' });

    await new Promise((resolve) => setTimeout(resolve, 3000));
    expect((await world.db.query(`SELECT count(*)::int AS n FROM dead_letters`)).rows[0].n).toBe(0);
    const asked = respond('prs', markPrReadyForReview.name, () => ({ pullRequestId: 'pr-rq', phase: 'ready_for_review', prUrl: 'https://github.com/acme/requests/pull/1' }));
    await handledByConsumer(world.db, 'job-service-sprint-run-pr-ready', completedEventId);
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const ofRun = asked.filter((r) => r.sprintRunId === created.sprintRunId);
    expect(ofRun).toHaveLength(1);
    expect(ofRun[0]).toMatchObject({ repository: 'acme/requests', branch: 'sprint/SP-rq2', idempotencyKey: expect.stringMatching(/^sprint-run:/) });
  });
});
