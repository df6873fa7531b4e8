import { claimJob, enqueueJob, getJob, renewJobLease } from '@gantry/contracts';
import { isTransient } from '@gantry/messaging';
import { eventually, startApp, type RunningApp } from '@gantry/testing';
import { createWorld, key, registerProducts, type TestWorld } from './harness.js';

/*
 * A start slower to serve than a whole lease (docs/jobs.md, "A job service outage"): no runner can
 * renew a lease while no job service serves, so the lease's time counts again only from the moment
 * this one serves — not from an earlier point of its start, which a slow start (loading, migrations,
 * a busy host) could leave more than a lease behind. Starts apps/job-service/dist: build first.
 */
describe('a job service start slower to serve than a whole lease (real PostgreSQL and NATS)', () => {
  const HOLD = 'job-start:before-serving';
  let world: TestWorld;
  const running: RunningApp[] = [];

  beforeAll(async () => {
    world = await createWorld('job-slowstart');
  });
  afterAll(async () => {
    await Promise.all(running.map((app) => app.kill('SIGKILL')));
    await world?.close();
  });

  const start = async (env: Record<string, string> = {}, waitReady = true) => {
    const app = await startApp('job-service', { schema: world.name, naming: world.naming, env: { GANTRY_LEASE_SWEEP_MS: '50', ...env }, waitReady });
    running.push(app);
    return app;
  };

  it('expires no lease while it has not served yet, and the runner renews its lease once it serves', async () => {
    const first = await start();
    await registerProducts(world.client, ['product-slow-start']);
    const { jobId } = await world.client.request(enqueueJob, { kind: 'PLAN_CHAT', productId: 'product-slow-start', idempotencyKey: key('e') });
    const claim = await world.client.request(claimJob, { runnerId: 'runner-slow-start', kinds: ['PLAN_CHAT'], jobId, leaseDurationMs: 10_000, idempotencyKey: key('c') });
    if (!claim.claimed) throw new Error('the job was not claimed');
    const leaseToken = claim.job.leaseToken!;
    await first.kill('SIGKILL');

    const second = await start({ GANTRY_TEST_HOLD_AT: HOLD }, false);
    await eventually(() => second.output().includes(`"testHold":"${HOLD}"`), { what: 'the start held before it serves', timeoutMs: 120_000 });
    // Held until the lease's expiry as the database has it now (resumed or not) is behind us, by more
    // than a few of the 50 ms sweeps: no renewal could reach a job service meanwhile.
    // (A lease expired meanwhile ends the wait too: then the claim is lost, as the renewal below says.)
    await eventually(
      async () => {
        const [job] = (await world.db.query(`SELECT status, now() > lease_expires_at + interval '1 second' AS past FROM jobs WHERE job_id = $1`, [jobId])).rows;
        return job.status !== 'CLAIMED' || job.past === true;
      },
      { what: "the lease's expiry passed while the start was held", timeoutMs: 60_000 },
    );
    second.process.kill('SIGUSR2');

    // The runner's next renewal, once a job service serves (until then: nobody answers), keeps the claim.
    const renewal = { jobId, runnerId: 'runner-slow-start', leaseToken, idempotencyKey: key('r') };
    const renewed = await eventually(
      () => world.client.request(renewJobLease, renewal, { timeoutMs: 2_000 }).catch((error: unknown) => (isTransient(error) ? false : { error })),
      { what: 'a renewal answered', timeoutMs: 60_000 },
    );
    expect(renewed).not.toHaveProperty('error');
    const { rows } = await world.db.query(`SELECT count(*)::int AS n FROM events WHERE stream_id = $1 AND type = 'JobLeaseExpired'`, [jobId]);
    expect(rows[0].n).toBe(0);
    expect(await world.client.request(getJob, { jobId })).toMatchObject({ status: 'CLAIMED', lease: { runnerId: 'runner-slow-start', leaseToken } });
  }, 240_000);
});
