import type { INestApplication } from '@nestjs/common';
import { register } from 'prom-client';
import { claimJob, enqueueJob, getJob } from '@gantry/contracts';
import { eventually } from '@gantry/testing';
import { LeaseExpirySweep } from '../src/application/lease-expiry.js';
import { createWorld, key, registerProducts, startInProcess, type TestWorld } from './harness.js';

/**
 * Expired leases the sweep cannot expire, however many, do not keep it from the others (docs/jobs.md,
 * "Leases and liveness"). A faulty lease here is a jobs view row with no log behind it, its lease long
 * run out: expiring it is refused NOT_FOUND at every pass, and it comes first in expiry order.
 */
describe('the job lease sweep past a page of faulty leases', () => {
  let world: TestWorld;
  let app: INestApplication;

  beforeAll(async () => {
    world = await createWorld('jobs_sweep_faulty');
    // No pass of its own after the first: the test runs each one.
    app = await startInProcess(world, { GANTRY_LEASE_SWEEP_MS: '3600000' });
    await registerProducts(world.client, ['product-faulty']);
  });

  afterAll(async () => {
    await app?.close();
    await world?.close();
  });

  const failures = async () => (await register.getSingleMetric('gantry_lease_sweep_failures_total')?.get())?.values.find((v) => v.labels.sweep === 'job-lease')?.value ?? 0;

  it('with more faulty expired leases than a pass reads at a time ahead of it, a healthy expired lease is still expired by the next pass', async () => {
    const pageSize = 3;
    const faulty = 2 * pageSize + 1;
    await world.db.query(
      `INSERT INTO jobs (job_id, enqueue_position, status, kind, product_id, exclude_from_coalescing, created_at, attempt, max_attempts,
                         lease_token, runner_id, lease_expires_at, payloads, state)
       SELECT 'job-ghost-' || g, 0, 'RUNNING', 'PLAN_CHAT', 'product-faulty', false, now(), 1, 3, 1, 'runner-ghost', now() - interval '1 hour', '[]', '{}'
         FROM generate_series(1, $1::int) AS g`,
      [faulty],
    );
    const { jobId } = await world.client.request(enqueueJob, { kind: 'PLAN_CHAT', productId: 'product-faulty', idempotencyKey: key('enqueue') });
    const claim = await world.client.request(claimJob, { runnerId: 'runner-silent', kinds: ['PLAN_CHAT'], jobId, leaseDurationMs: 10_000, idempotencyKey: key('claim') });
    if (!claim.claimed) throw new Error('not claimed');
    await eventually(() => Date.now() > Date.parse(claim.job.leaseExpiresAt) + 100, { what: 'the healthy lease ran out', timeoutMs: 30_000 });
    const failedBefore = await failures();

    const sweep = app.get(LeaseExpirySweep);
    const expired = [await sweep.sweep(pageSize), await sweep.sweep(pageSize)];
    expect({ expired, status: (await world.client.request(getJob, { jobId })).status }).toEqual({ expired: [1, 0], status: 'QUEUED' });
    // Every faulty lease was met by each pass, logged and counted, and is still there for a look.
    expect((await failures()) - failedBefore).toBe(2 * faulty);
    const { rows } = await world.db.query(`SELECT count(*)::int AS n FROM jobs WHERE job_id LIKE 'job-ghost-%' AND status = 'RUNNING'`);
    expect(rows[0].n).toBe(faulty);
  }, 60_000);
});
