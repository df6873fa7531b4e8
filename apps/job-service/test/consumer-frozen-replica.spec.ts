import { readFile } from 'node:fs/promises';
import type { Subscription } from '@nats-io/transport-node';
import { claimJob, commandSubject, createSprintRun, listJobs, markPrReadyForReview, streamName } from '@gantry/contracts';
import { consumerCaughtUp, eventIdOf, eventually, handledByConsumer, startApp, type RunningApp } from '@gantry/testing';
import { createWorld, finishClaimedDone, key, registerProducts, type TestWorld } from './harness.js';

const PR_READY_CONSUMER = 'job-service-sprint-run-pr-ready';

/*
 * A consumer racing its own redelivery (docs/architecture.md, "Consumers and their duplicates"): a
 * replica frozen (SIGSTOP) after its handler asked the pr-service to make a completed run's pull request
 * ready, before its transaction committed. Past the ack wait the event goes to the other replica, which
 * asks again — under the same key, so the pr-service's receipt answers it as the first — and commits;
 * woken, the frozen one's transaction is gone, and the event it comes back with is found handled.
 * These start the compiled service (apps/job-service/dist): build first.
 */
describe('a replica frozen in the middle of a consumer\'s handler', () => {
  let world: TestWorld;
  const running: RunningApp[] = [];
  let responder: Subscription | undefined;
  const asked: Record<string, unknown>[] = [];

  beforeAll(async () => {
    world = await createWorld('frozen-consumer');
    responder = world.bus.nc.subscribe(commandSubject(world.naming, 'prs', markPrReadyForReview.name), {
      callback: (_error, msg) => {
        asked.push(JSON.parse(new TextDecoder().decode(msg.data)) as Record<string, unknown>);
        msg.respond(JSON.stringify({ ok: true, result: { pullRequestId: 'pr-fz', phase: 'ready_for_review', prUrl: 'https://github.com/acme/frozen/pull/1' } }));
      },
    });
  });

  afterAll(async () => {
    responder?.unsubscribe();
    await Promise.all(running.map((r) => r.kill('SIGKILL')));
    await world?.close();
  });

  const start = async (env: Record<string, string> = {}) => {
    const app = await startApp('job-service', { schema: world.name, naming: world.naming, env });
    running.push(app);
    return app;
  };
  const stopped = async (app: RunningApp) => (await readFile(`/proc/${app.process.pid}/stat`, 'utf8')).split(') ')[1]!.startsWith('T');

  it("its request is asked again by the other replica under the same key, and the event is handled once", async () => {
    // Its session, idle in its transaction while it is frozen, is ended after 2 s.
    const frozen = await start({ GANTRY_TEST_HOLD_AT: 'sprint-run-requests:pr-ready-asked', GANTRY_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS: '2000' });
    await registerProducts(world.client, ['product-fz'], { repository: 'acme/frozen', prStrategy: 'SPRINT' });
    const created = await world.client.request(createSprintRun, {
      sprintId: 'SP-fz', productId: 'product-fz', taskIds: ['T-fz'], branch: 'sprint/SP-fz', idempotencyKey: key('sprint'),
    });
    const job = await eventually(async () => (await world.client.request(listJobs, { sprintRunId: created.sprintRunId })).jobs.find((j) => j.status === 'QUEUED') ?? null, { what: 'the run queued its job' });
    const claim = await world.client.request(claimJob, { runnerId: 'runner-fz', kinds: ['SPRINT_IMPLEMENTATION'], jobId: job.jobId, idempotencyKey: key('claim') });
    if (!claim.claimed) throw new Error('not claimed');
    await finishClaimedDone(world.client, { jobId: job.jobId, runnerId: 'runner-fz', leaseToken: claim.job.leaseToken });

    await eventually(() => frozen.output().includes('"testHold":"sprint-run-requests:pr-ready-asked"'), { what: 'the request asked, not committed', timeoutMs: 30_000 });
    frozen.process.kill('SIGSTOP');
    await eventually(() => stopped(frozen), { what: 'the replica frozen' });
    expect(asked).toHaveLength(1);

    // The other replica gets the event once the frozen one's ack wait (30 s) has run out.
    await start();
    const completed = await eventIdOf(world.db, created.sprintRunId, 'SprintRunCompleted');
    await handledByConsumer(world.db, PR_READY_CONSUMER, completed, { timeoutMs: 90_000 });

    frozen.process.kill('SIGCONT');
    frozen.process.kill('SIGUSR2');
    await consumerCaughtUp(world.bus.jsm, streamName(world.naming, 'jobs'), PR_READY_CONSUMER, { timeoutMs: 90_000 });

    expect(asked).toHaveLength(2);
    expect(new Set(asked.map((r) => r.idempotencyKey)).size).toBe(1);
    expect(asked[0]).toMatchObject({ sprintRunId: created.sprintRunId, idempotencyKey: expect.stringMatching(/^sprint-run:/) });
    expect((await world.db.query(`SELECT count(*)::int AS n FROM inbox WHERE consumer = $1 AND event_id = $2`, [PR_READY_CONSUMER, completed])).rows[0].n).toBe(1);
    expect((await world.db.query(`SELECT count(*)::int AS n FROM dead_letters`)).rows[0].n).toBe(0);
  }, 180_000);
});
