import { enqueueJob, ErrorCode } from '@gantry/contracts';
import { eventually, startCuttableProxy, testDatabaseUrl, type CuttableProxy } from '@gantry/testing';
import type { INestApplication } from '@nestjs/common';
import { createWorld, key, registerProducts, startInProcess, taskEnqueueRequest, type TestWorld } from './harness.js';

/**
 * PostgreSQL stops answering without closing anything (a partition, a frozen host, a firewall
 * dropping packets): the job service's database is behind a proxy that forwards nothing and closes
 * nothing (docs/operations.md, "When PostgreSQL stops answering"). The bounds are short here, so
 * the test does not wait out the defaults.
 */
describe('the job service while its PostgreSQL stops answering', () => {
  let proxy: CuttableProxy;
  let world: TestWorld;
  let app: INestApplication;

  beforeAll(async () => {
    proxy = await startCuttableProxy(testDatabaseUrl);
    world = await createWorld('pg_blackhole');
    app = await startInProcess(world, {
      GANTRY_DATABASE_URL: proxy.url,
      GANTRY_DB_CONNECT_TIMEOUT_MS: '1000',
      GANTRY_DB_QUERY_TIMEOUT_MS: '1000',
      GANTRY_DB_KEEPALIVE_MS: '1000',
    });
    await registerProducts(world.client, ['product-dark']);
  });

  afterEach(() => proxy.restore());

  afterAll(async () => {
    // Cut, so that a connection still waiting on the blackhole (were the bounds missing) cannot hold the stop up.
    proxy?.cut();
    // The world (its schema) goes even when the stop fails.
    try {
      await app?.close();
    } finally {
      await world?.close();
      await proxy?.close();
    }
  });

  const enqueuedJobs = async () => Number((await world.db.query(`SELECT count(*) AS n FROM events WHERE type = 'JobEnqueued'`)).rows[0].n);
  const outboxRows = async () => Number((await world.db.query(`SELECT count(*) AS n FROM outbox`)).rows[0].n);

  it('answers a command UNAVAILABLE, not a timeout of its caller; once it answers again, the same command under the same key is done once and the relay carries on', async () => {
    await eventually(async () => (await outboxRows()) === 0, { what: 'the registration published' });
    const request = taskEnqueueRequest('product-dark', { taskId: 'T-1' });

    proxy.blackhole();
    // The caller would wait 20 s: the service answers first, with the answer that says "send it again".
    await expect(world.client.request(enqueueJob, request, { timeoutMs: 20_000 })).rejects.toMatchObject({ code: ErrorCode.UNAVAILABLE });

    proxy.restore();
    const { jobId } = await world.client.request(enqueueJob, request, { timeoutMs: 20_000 });
    expect(await world.client.request(enqueueJob, request, { timeoutMs: 20_000 })).toMatchObject({ jobId });
    expect(await enqueuedJobs()).toBe(1);
    const { rows } = await world.db.query(`SELECT count(*) AS n FROM events WHERE stream_id = $1`, [jobId]);
    expect(Number(rows[0].n)).toBe(1);
    // The relay's own connection was stuck on a poll sent into the blackhole: it gave up on it and
    // publishes again.
    await eventually(async () => (await outboxRows()) === 0, { what: 'the enqueue published', timeoutMs: 30_000 });
  });
});
