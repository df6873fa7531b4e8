import { claimJob, dispatchStreamName, enqueueJob, JobOfferSchema, jobOfferMessageId, rollbackClaim, streamName } from '@gantry/contracts';
import { eventually, startScratchNats, type ScratchServer } from '@gantry/testing';
import type { INestApplication } from '@nestjs/common';
import { createTestWorld } from '@gantry/service-runtime/testing';
import { key, registerProducts, startInProcess, taskEnqueueRequest, type TestWorld } from './harness.js';

/**
 * The job service's own event stream deleted under it (docs/operations.md, "JetStream state lost"):
 * on a NATS server of the test's own.
 */
describe('the jobs event stream deleted while the job service runs', () => {
  let nats: ScratchServer;
  let world: TestWorld;
  let app: INestApplication;

  beforeAll(async () => {
    nats = await startScratchNats();
    world = await createTestWorld('lost_streams', { natsUrl: nats.url });
    app = await startInProcess(world, { GANTRY_NATS_URL: nats.url });
    await registerProducts(world.client, ['product-gone']);
  });

  afterAll(async () => {
    await app?.close();
    await world?.close();
    await nats?.remove();
  });

  it('is created again by the relay, the events appended since are published on it (their outbox rows then deleted), and the durable consumer of the service reads it again', async () => {
    const stream = streamName(world.naming, 'jobs');
    await eventually(async () => Number((await world.db.query(`SELECT count(*) AS n FROM outbox`)).rows[0].n) === 0, { what: 'the outbox empty' });
    await world.bus.jsm.streams.delete(stream);
    const { jobId } = await world.client.request(enqueueJob, taskEnqueueRequest('product-gone', { taskId: 'T-1' }));
    await eventually(async () => (await world.bus.jsm.streams.info(stream).catch(() => null))?.state.messages === 1, { what: 'the enqueue published on the stream created again', timeoutMs: 15_000 });
    const msg = (await world.bus.jsm.streams.getMessage(stream, { seq: (await world.bus.jsm.streams.info(stream)).state.first_seq }))!;
    expect(msg.json<{ streamId: string; type: string }>()).toMatchObject({ streamId: jobId, type: 'JobEnqueued' });
    await eventually(async () => Number((await world.db.query(`SELECT count(*) AS n FROM outbox`)).rows[0].n) === 0, { what: 'the outbox empty again' });
    // Its offer went with it.
    expect((await world.bus.jsm.streams.info(dispatchStreamName(world.naming))).state.messages).toBe(1);
    // The service's durable consumer was created again on the new stream: a requeue is offered by it.
    const claim = await world.client.request(claimJob, { runnerId: 'runner-gone', kinds: ['TASK_IMPLEMENTATION'], jobId, baseSha: 'b'.repeat(40), idempotencyKey: key('claim') });
    if (!claim.claimed) throw new Error('not claimed');
    await world.client.request(rollbackClaim, { jobId, runnerId: 'runner-gone', leaseToken: claim.job.leaseToken, reason: 'agent exited 1', exitCode: 1, idempotencyKey: key('rb') });
    await eventually(async () => {
      const dispatch = dispatchStreamName(world.naming);
      const info = await world.bus.jsm.streams.info(dispatch);
      for (let seq = info.state.first_seq; seq <= info.state.last_seq; seq++) {
        const offer = await world.bus.jsm.streams.getMessage(dispatch, { seq }).catch(() => null);
        if (offer && jobOfferMessageId(JobOfferSchema.parse(offer.json())) === `${jobId}-offer-2-1`) return true;
      }
      return false;
    }, { what: 'the requeue offered by the consumer on the stream created again' });
  });

  it('another context\'s stream it reads, deleted while its owner publishes nothing, is created again by the consumer, which attaches to it again', async () => {
    const prs = streamName(world.naming, 'prs');
    await world.bus.jsm.consumers.info(prs, 'job-service-sprint-runs-merge-conflicts');
    await world.bus.jsm.streams.delete(prs);
    await eventually(async () => (await world.bus.jsm.consumers.info(prs, 'job-service-sprint-runs-merge-conflicts').catch(() => null)) !== null, {
      what: 'the consumer back on the prs stream created again',
      timeoutMs: 10_000,
    });
  });
});
