import type { INestApplication } from '@nestjs/common';
import { claimJob, enqueueJob, ErrorCode, getJob, renewJobLease } from '@gantry/contracts';
import { SettingsError, settingsOf } from '@gantry/service-runtime';
import { eventually } from '@gantry/testing';
import { jobServiceSettings } from '../src/application/job-service-settings.js';
import { createWorld, key, registerProducts, startInProcess, type TestWorld } from './harness.js';

describe('the lease sweep interval (GANTRY_LEASE_SWEEP_MS)', () => {
  it('defaults to one second', () => {
    expect(settingsOf(jobServiceSettings, {}).leaseSweepMs).toBe(1000);
  });

  it('takes a whole number of milliseconds', () => {
    expect(settingsOf(jobServiceSettings, { GANTRY_LEASE_SWEEP_MS: '250' }).leaseSweepMs).toBe(250);
  });

  it.each(['0', '-5', '1.5', 'fast'])('refuses %s at start rather than sweeping at a nonsense rate', (raw) => {
    expect(() => settingsOf(jobServiceSettings, { GANTRY_LEASE_SWEEP_MS: raw })).toThrow(SettingsError);
    expect(() => settingsOf(jobServiceSettings, { GANTRY_LEASE_SWEEP_MS: raw })).toThrow(/GANTRY_LEASE_SWEEP_MS must be a whole number/);
  });
});

describe('a replica that sweeps seldom (docs/jobs.md, "A job service outage")', () => {
  let world: TestWorld;
  let app: INestApplication | undefined;

  beforeAll(async () => {
    world = await createWorld('jobs_seldom_sweep');
  });

  afterAll(async () => {
    await app?.close();
    await world?.close();
  });

  it('a lease that ran out while a replica with an hour between its sweeps served is not resumed by the next start: its first sweep, at once, expires it, and the attempt is spent', async () => {
    app = await startInProcess(world, { GANTRY_LEASE_SWEEP_MS: '3600000' });
    await registerProducts(world.client, ['product-seldom']);
    const { jobId } = await world.client.request(enqueueJob, {
      kind: 'TASK_IMPLEMENTATION', productId: 'product-seldom', taskId: 'T-seldom', payload: {}, baseRef: 'main', maxAttempts: 2, idempotencyKey: key('enqueue'),
    });
    const claim = await world.client.request(claimJob, { runnerId: 'runner-dead', kinds: ['TASK_IMPLEMENTATION'], jobId, leaseDurationMs: 10_000, idempotencyKey: key('claim') });
    if (!claim.claimed) throw new Error('not claimed');
    // The runner stays silent past its lease's end while the replica serves (and has not swept yet).
    await eventually(() => Date.now() > Date.parse(claim.job.leaseExpiresAt) + 2_500, { what: 'the lease ran out while served', timeoutMs: 30_000 });
    // Served: a renewal now is refused, the runner takes the claim as lost.
    await expect(world.client.request(renewJobLease, { jobId, runnerId: 'runner-dead', leaseToken: claim.job.leaseToken })).rejects.toMatchObject({ code: ErrorCode.STALE_FENCE });
    await app.close();
    // The next start sweeps as seldom: its first pass, at once, expires the lease.
    app = await startInProcess(world, { GANTRY_LEASE_SWEEP_MS: '3600000' });

    await eventually(async () => (await world.client.request(getJob, { jobId })).status === 'QUEUED', { what: 'the lease expired by the sweep' });
    const events = (await world.db.query<{ type: string }>(`SELECT type FROM events WHERE stream_id = $1 ORDER BY stream_version`, [jobId])).rows;
    expect(events.map((e) => e.type)).toEqual(['JobEnqueued', 'JobClaimed', 'JobLeaseExpired']);
    expect(await world.client.request(getJob, { jobId })).toMatchObject({ status: 'QUEUED', attempt: 2 });
  }, 90_000);
});
