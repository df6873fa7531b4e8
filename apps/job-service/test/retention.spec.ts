import type { INestApplication } from '@nestjs/common';
import { claimJob, enqueueJob, ErrorCode, eventSubject, streamName } from '@gantry/contracts';
import { eventually } from '@gantry/testing';
import { OFFERS_CONSUMER } from '../src/application/offers.js';
import { createWorld, key, publishEnqueueWithoutItsOffer, registerProducts, startInProcess, type TestWorld } from './harness.js';

/**
 * Retention through the running service: every receipt but the run queue's (24 h) expires after 3 s
 * (a receipt may not go before the streams drop a message), dead letters are kept for a millisecond,
 * the streams keep messages for 3 s, and the pruning job
 * runs every 50 ms. See docs/DEVELOPING.md (retention).
 */
describe('retention: the pruning job of a running job service', () => {
  let world: TestWorld;
  let app: INestApplication;
  const streamMaxAgeMs = 3000;

  beforeAll(async () => {
    world = await createWorld('retention');
    app = await startInProcess(world, {
      GANTRY_RECEIPT_TTL_MS: String(streamMaxAgeMs),
      GANTRY_DEAD_LETTER_RETENTION_MS: '1',
      GANTRY_STREAM_MAX_AGE_MS: String(streamMaxAgeMs),
      GANTRY_STREAM_MAX_BYTES: String(64 * 1024 * 1024),
      GANTRY_PRUNE_INTERVAL_MS: '50',
    });
    await registerProducts(world.client, ['product-r']);
  });

  afterAll(async () => {
    await app?.close();
    await world?.close();
  });

  const receipt = async (key: string) => (await world.db.query(`SELECT 1 FROM idempotency_receipts WHERE key = $1`, [key])).rowCount === 1;
  const count = async (sql: string, params: unknown[] = []) => Number((await world.db.query(sql, params)).rows[0].n);

  const enqueue = (idempotencyKey: string, taskId: string) =>
    world.client.request(enqueueJob, { kind: 'TASK_IMPLEMENTATION', productId: 'product-r', taskId, prompt: 'do it', idempotencyKey });

  it('prunes an expired receipt and still refuses a replayed key inside its window, answering with the stored result', async () => {
    const enqueueKey = key('enqueue');
    const claimKey = key('claim');
    const created = await enqueue(enqueueKey, 'T-1');
    expect(created.outcome).toBe('created');
    const claimed = await world.client.request(claimJob, { runnerId: 'runner-r', kinds: ['TASK_IMPLEMENTATION'], jobId: created.jobId, idempotencyKey: claimKey });
    expect(claimed.claimed).toBe(true);

    // The claim's receipt (no window of its own: the 3 s default) goes; the enqueue's (24 h) stays.
    await eventually(async () => !(await receipt(claimKey)), { what: 'the pruning job to delete the expired claim receipt' });
    expect(await receipt(enqueueKey)).toBe(true);

    const events = await count(`SELECT count(*) AS n FROM events`);
    const repeat = await enqueue(enqueueKey, 'T-1');
    expect(repeat).toMatchObject({ jobId: created.jobId, outcome: 'deduplicated' });
    await expect(enqueue(enqueueKey, 'T-other')).rejects.toMatchObject({ code: ErrorCode.IDEMPOTENCY_CONFLICT });
    expect(await count(`SELECT count(*) AS n FROM events`)).toBe(events);
    expect(await count(`SELECT count(*) AS n FROM jobs WHERE product_id = 'product-r'`)).toBe(1);

    // The pruned key is free again: the same claim is now a new request (and finds nothing queued).
    const again = await world.client.request(claimJob, { runnerId: 'runner-r', kinds: ['TASK_IMPLEMENTATION'], jobId: created.jobId, idempotencyKey: claimKey }).catch((e) => e);
    expect(again).toMatchObject({ code: ErrorCode.ALREADY_CLAIMED });
  });

  it('creates its streams with the configured limits', async () => {
    const info = await world.bus.jsm.streams.info(streamName(world.naming, 'jobs'));
    expect(info.config.max_age).toBe(streamMaxAgeMs * 1_000_000);
    expect(info.config.max_bytes).toBe(64 * 1024 * 1024);
    expect(info.config.duplicate_window).toBeLessThanOrEqual(streamMaxAgeMs * 1_000_000);
  });

  it('prunes inbox rows once the stream no longer holds their events, and old dead letters', async () => {
    const { jobId } = await enqueue(key('enqueue'), 'T-2');
    // An enqueue's offer goes with its event, which no consumer then handles: published as an
    // earlier relay did, the offers consumer handles it and records it in its inbox.
    const enqueued = await publishEnqueueWithoutItsOffer(world, jobId);
    const inboxRow = () => count(`SELECT count(*) AS n FROM inbox WHERE consumer = $1 AND event_id = $2`, [OFFERS_CONSUMER, enqueued]);
    await eventually(async () => (await inboxRow()) === 1, { what: 'the offers consumer to record the JobEnqueued event' });
    await eventually(async () => (await inboxRow()) === 0, { what: 'the pruning job to delete the inbox row after the stream dropped its event', timeoutMs: 30_000 });

    // An event that does not match its contract is dead-lettered, then pruned.
    await world.bus.js.publish(eventSubject(world.naming, 'jobs', 'JobEnqueued', 'job-bad'), JSON.stringify({ not: 'an envelope' }));
    const deadLetters = () => count(`SELECT count(*) AS n FROM dead_letters WHERE consumer = $1`, [OFFERS_CONSUMER]);
    await eventually(async () => (await world.db.query(`SELECT 1 FROM pg_stat_user_tables WHERE relname = 'dead_letters' AND schemaname = $1 AND n_tup_ins > 0`, [world.name])).rowCount === 1, {
      what: 'the invalid event to be dead-lettered',
    });
    await eventually(async () => (await deadLetters()) === 0, { what: 'the pruning job to delete the dead letter' });
  });
});
