import { dispatchStreamName, enqueueJob, JobOfferSchema, jobOfferMessageId } from '@gantry/contracts';
import { eventually, startScratchNats, type ScratchNats } from '@gantry/testing';
import type { INestApplication } from '@nestjs/common';
import { createTestWorld } from '@gantry/service-runtime/testing';
import { registerProducts, startInProcess, taskEnqueueRequest, type TestWorld } from './harness.js';

/**
 * Offers JetStream lost while PostgreSQL still has the job QUEUED (docs/jobs.md, "Offers lost by
 * JetStream"): on a NATS server of the test's own, so that its streams may be purged and deleted.
 */
describe('queued jobs whose offer JetStream lost', () => {
  let nats: ScratchNats;
  let world: TestWorld;
  let app: INestApplication;

  beforeAll(async () => {
    nats = await startScratchNats();
    world = await createTestWorld('lost_offers', { natsUrl: nats.url });
    app = await startInProcess(world, { GANTRY_NATS_URL: nats.url, GANTRY_OFFER_SWEEP_MS: '300' });
    await registerProducts(world.client, ['product-lost']);
  });

  afterAll(async () => {
    await app?.close();
    await world?.close();
    await nats?.remove();
  });

  /** The ids of the offers on the dispatch stream, or null when the stream is gone. */
  async function offersOnStream(): Promise<string[] | null> {
    const stream = dispatchStreamName(world.naming);
    const info = await world.bus.jsm.streams.info(stream).catch(() => null);
    if (!info) return null;
    const ids: string[] = [];
    for (let seq = info.state.first_seq; seq <= info.state.last_seq; seq++) {
      const msg = await world.bus.jsm.streams.getMessage(stream, { seq }).catch(() => null);
      if (msg) ids.push(jobOfferMessageId(JobOfferSchema.parse(msg.json())));
    }
    return ids;
  }

  const enqueue = () =>
    world.client.request(enqueueJob, taskEnqueueRequest('product-lost'));

  it('a queued job whose offer was purged from the dispatch stream is offered again, under the same message id, once', async () => {
    const { jobId } = await enqueue();
    const offerId = `${jobId}-offer-1-0`;
    await eventually(async () => (await offersOnStream())?.includes(offerId) ?? false, { what: 'the enqueue offered' });
    // The server remembers the offer's Nats-Msg-Id for the duplicate window across a purge, and drops
    // a re-publish within it; shortened here so that the test need not wait two minutes.
    await world.bus.jsm.streams.update(dispatchStreamName(world.naming), { duplicate_window: 1_000_000_000 });
    await world.bus.jsm.streams.purge(dispatchStreamName(world.naming));
    expect(await offersOnStream()).toEqual([]);
    await eventually(async () => (await offersOnStream())?.includes(offerId) ?? false, { what: 'the job offered again after the purge', timeoutMs: 15_000 });
    // Several passes later, still one offer: one that is on the stream is not published again.
    await new Promise((r) => setTimeout(r, 1500));
    expect((await offersOnStream())!.filter((id) => id === offerId)).toHaveLength(1);
  });

  it('the dispatch stream deleted while the job service runs is created again, with the offers of the queued jobs', async () => {
    const { jobId } = await enqueue();
    await eventually(async () => (await offersOnStream())?.includes(`${jobId}-offer-1-0`) ?? false, { what: 'the enqueue offered' });
    await world.bus.jsm.streams.delete(dispatchStreamName(world.naming));
    const offers = await eventually(async () => {
      const ids = await offersOnStream();
      return ids && ids.includes(`${jobId}-offer-1-0`) ? ids : null;
    }, { what: 'the stream back with the job offered again', timeoutMs: 15_000 });
    // Every job still queued (the first test's too) is on it, each once.
    expect(new Set(offers).size).toBe(offers.length);
    expect(offers).toHaveLength(2);
  });

  it('a queued job whose offer the dispatch stream discarded at its max age is offered again', async () => {
    const stream = dispatchStreamName(world.naming);
    const { jobId } = await enqueue();
    const offerId = `${jobId}-offer-1-0`;
    await eventually(async () => (await offersOnStream())?.includes(offerId) ?? false, { what: 'the enqueue offered' });
    // Offers older than 2 s are discarded (the duplicate window may not be longer).
    await world.bus.jsm.streams.update(stream, { max_age: 2_000_000_000, duplicate_window: 1_000_000_000 });
    await eventually(async () => !(await offersOnStream())?.includes(offerId), { what: 'the offer aged out' });
    await eventually(async () => (await offersOnStream())?.includes(offerId) ?? false, { what: 'the job offered again after its offer aged out' });
  });

  it('after a nats-server started again on an empty store, every queued job is offered again', async () => {
    const { jobId } = await enqueue();
    await eventually(async () => (await offersOnStream())?.includes(`${jobId}-offer-1-0`) ?? false, { what: 'the enqueue offered' });
    const queued = Number((await world.db.query(`SELECT count(*) AS n FROM jobs WHERE status = 'QUEUED'`)).rows[0].n);
    await nats.startEmpty();
    const offers = await eventually(async () => {
      const ids = await offersOnStream().catch(() => null);
      return ids && ids.length === queued ? ids : null;
    }, { what: 'every queued job offered on the new server', timeoutMs: 20_000 });
    expect(offers).toContain(`${jobId}-offer-1-0`);
    expect(new Set(offers).size).toBe(queued);
  });
});
