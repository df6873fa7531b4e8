import { claimJob, enqueueJob, getJob } from '@gantry/contracts';
import { eventually, metricOf, startApp, type RunningApp } from '@gantry/testing';
import { createWorld, key, refuseLeaseExpiry, registerProducts, type TestWorld } from './harness.js';

/**
 * A lease whose expiry the database refuses, met by a sweep every 20 ms (docs/jobs.md, "Leases and
 * liveness"; docs/operations.md, "Metrics"): logged when first found and then at growing intervals,
 * the first a minute on, counted on /metrics at every try, and tried again at every pass.
 * These start the compiled service (apps/job-service/dist): build first.
 */
describe('a lease the sweep cannot expire, pass after pass', () => {
  let world: TestWorld;
  let app: RunningApp | undefined;

  beforeAll(async () => {
    world = await createWorld('jobs_faulty_log');
    app = await startApp('job-service', { schema: world.name, naming: world.naming, env: { GANTRY_LEASE_SWEEP_MS: '20', LOG_LEVEL: 'info' } });
    await registerProducts(world.client, ['product-faulty-log']);
  });

  afterAll(async () => {
    await app?.kill('SIGKILL');
    await world?.close();
  });

  const tries = () => metricOf(app!, 'gantry_lease_sweep_failures_total{sweep="job-lease"}');
  const standing = () => metricOf(app!, 'gantry_lease_sweep_faulty_leases{sweep="job-lease"}');
  const lines = (jobId: string, message: string) => app!.output().split('\n').filter((l) => l.includes(message) && l.includes(jobId));

  it('hundreds of passes log it once and count every try; once the database takes it, the next passes expire it and say so', async () => {
    const { jobId } = await world.client.request(enqueueJob, { kind: 'PLAN_CHAT', productId: 'product-faulty-log', idempotencyKey: key('e') });
    const claim = await world.client.request(claimJob, { runnerId: 'runner-stuck', kinds: ['PLAN_CHAT'], jobId, leaseDurationMs: 10_000, idempotencyKey: key('c') });
    if (!claim.claimed) throw new Error('not claimed');
    const allowExpiry = await refuseLeaseExpiry(world, jobId);
    try {
      const before = await tries();
      await eventually(async () => (await tries()) - before >= 200, { timeoutMs: 60_000, what: '200 passes that could not expire the lease' });
      // Every try counted and the lease still there; one line, under the minute before the next.
      expect(lines(jobId, 'a lease could not be expired')).toHaveLength(1);
      expect(JSON.parse(lines(jobId, 'a lease could not be expired')[0]!)).toMatchObject({ jobId, failedTries: 1, error: expect.stringMatching(/an operator trigger refuses this row/) });
      expect(await standing()).toBe(1);
      expect((await world.client.request(getJob, { jobId })).status).toBe('CLAIMED');
    } finally {
      await allowExpiry();
    }
    // Tried at every pass: expired within a few, not a backoff's wait later.
    await eventually(async () => (await world.client.request(getJob, { jobId })).status === 'QUEUED', { timeoutMs: 5_000, what: 'the lease expired once the database took it' });
    const expired = await eventually(() => lines(jobId, 'a lease that could not be expired has expired')[0], { what: 'its expiry logged' });
    expect(JSON.parse(expired).failedTries).toBeGreaterThanOrEqual(200);
    expect(await standing()).toBe(0);
  }, 120_000);
});
