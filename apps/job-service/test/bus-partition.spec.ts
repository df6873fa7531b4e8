import type { INestApplication } from '@nestjs/common';
import { claimJob, enqueueJob, getJob, logImplementation, renewJobLease, reportAgentStatus, startJob } from '@gantry/contracts';
import { Bus } from '@gantry/messaging';
import { CutOff, eventually, testNatsUrl, type CuttableProxy } from '@gantry/testing';
import { createWorld, key, registerProducts, startInProcess, type TestWorld } from './harness.js';

/** A job service in this process whose bus goes through a proxy the test cuts, with a product registered. */
const jobServiceCutOff = (label: string, productId: string, env: Record<string, string>) =>
  CutOff.start(testNatsUrl, async (natsUrl, onClose) => {
    const world = await createWorld(label);
    onClose(() => world.close());
    const app = await startInProcess(world, { GANTRY_NATS_URL: natsUrl, ...env });
    onClose(() => app.close());
    await registerProducts(world.client, [productId]);
    return { world, app };
  });

const eventsOfJob = async (world: TestWorld, jobId: string) =>
  (await world.db.query<{ type: string; data: Record<string, unknown> }>(`SELECT type, data FROM events WHERE stream_id = $1 ORDER BY stream_version`, [jobId])).rows;

/**
 * The job service cut off from NATS while its PostgreSQL is fine (docs/jobs.md, "A job service
 * outage"): its bus goes through a proxy the test cuts. The runner (this test's client, on NATS
 * directly) cannot reach a job service meanwhile — its renewals find nobody serving — so the time
 * the job service is away from the bus does not count against the claim, although the job service
 * itself still runs and reads the leases from PostgreSQL.
 */
describe('a job service cut off from NATS for longer than a claim\'s lease', () => {
  let cut: CutOff<{ world: TestWorld; app: INestApplication }> | undefined;
  let proxy: CuttableProxy;
  let world: TestWorld;
  let app: INestApplication | undefined;

  beforeAll(async () => {
    cut = await jobServiceCutOff('jobs_bus_cut', 'product-cut', { GANTRY_LEASE_SWEEP_MS: '100' });
    ({ proxy, started: { world, app } } = cut);
  });

  // A case that failed while cut off leaves the next one a job service on its bus.
  afterEach(async () => {
    proxy.restore();
    if (app) await eventually(() => app!.get(Bus).connected, { what: 'the job service back on its bus', timeoutMs: 60_000 });
  }, 90_000);

  afterAll(() => cut?.close());

  const eventsOf = (jobId: string) => eventsOfJob(world, jobId);

  it('expires no claim while its bus is down and resumes the live ones when it is back: the runner\'s commands are obeyed, no attempt is spent', async () => {
    const { jobId } = await world.client.request(enqueueJob, {
      kind: 'TASK_IMPLEMENTATION', productId: 'product-cut', taskId: 'T-cut', payload: {}, baseRef: 'main', maxAttempts: 1, idempotencyKey: key('enqueue'),
    });
    const claim = await world.client.request(claimJob, { runnerId: 'runner-cut', kinds: ['TASK_IMPLEMENTATION'], jobId, leaseDurationMs: 10_000, idempotencyKey: key('claim') });
    if (!claim.claimed) throw new Error('not claimed');
    const lease = { jobId, runnerId: 'runner-cut', leaseToken: claim.job.leaseToken };
    await world.client.request(startJob, { ...lease, branch: 'feat/cut', idempotencyKey: key('start') });

    const bus = app!.get(Bus);
    proxy.cut();
    await eventually(() => !bus.connected, { what: 'the job service seeing its bus gone', timeoutMs: 30_000 });
    // Cut off until well past the lease's expiry, its sweep running every 100 ms on PostgreSQL all along.
    await eventually(() => Date.now() > Date.parse(claim.job.leaseExpiresAt) + 3000, { what: 'the lease expiry passed while cut off', timeoutMs: 30_000 });
    expect((await eventsOf(jobId)).map((e) => e.type)).not.toContain('JobLeaseExpired');
    proxy.restore();

    // The agent's story-log call and the renewal, sent again under their keys until a job service answers, are obeyed.
    await world.client.request(logImplementation, { ...lease, summary: 'written while the job service was cut off', idempotencyKey: key('log') }, { retryUntil: Date.now() + 60_000 });
    const renewed = await world.client.request(renewJobLease, { ...lease, leaseDurationMs: 10_000 }, { retryUntil: Date.now() + 60_000 });
    expect(Date.parse(renewed.leaseExpiresAt)).toBeGreaterThan(Date.now());
    const events = await eventsOf(jobId);
    expect(events.map((e) => e.type)).not.toContain('JobLeaseExpired');
    const resumed = events.find((e) => e.type === 'JobLeaseRenewed' && e.data.resumedAfterBusLoss === true);
    // resumed for the 10 s it was granted, from the moment the bus was back
    expect(resumed?.data).toMatchObject({ leaseToken: 1, runnerId: 'runner-cut' });
    expect(Date.parse(resumed!.data.leaseExpiresAt as string) - Date.parse(resumed!.data.renewedAt as string)).toBe(10_000);
    expect(await world.client.request(getJob, { jobId })).toMatchObject({ status: 'RUNNING', attempt: 1, storyLog: { implementationEntries: 1 } });
  }, 120_000);

  it('still expires a claim whose runner stopped renewing while the bus is up: the resumption gives it one lease more, not forever', async () => {
    const { jobId } = await world.client.request(enqueueJob, {
      kind: 'TASK_IMPLEMENTATION', productId: 'product-cut', taskId: 'T-silent', payload: {}, baseRef: 'main', maxAttempts: 1, idempotencyKey: key('enqueue'),
    }, { retryUntil: Date.now() + 60_000 });
    const claim = await world.client.request(claimJob, { runnerId: 'runner-silent', kinds: ['TASK_IMPLEMENTATION'], jobId, leaseDurationMs: 10_000, idempotencyKey: key('claim') });
    if (!claim.claimed) throw new Error('not claimed');
    const bus = app!.get(Bus);
    proxy.cut();
    await eventually(() => !bus.connected, { what: 'the job service seeing its bus gone', timeoutMs: 30_000 });
    proxy.restore();
    await eventually(() => bus.connected, { what: 'the job service back on its bus', timeoutMs: 30_000 });
    // Its runner is gone for good: the claim expires after the lease resumed at the reconnect, its one attempt spent.
    await eventually(async () => (await eventsOf(jobId)).some((e) => e.type === 'JobLeaseExpired'), { what: 'the silent claim expired', timeoutMs: 60_000 });
    expect(await world.client.request(getJob, { jobId })).toMatchObject({ status: 'FAILED' });
  }, 120_000);
});

/**
 * The runner's requests, asked again through the outage, reach the job service as soon as NATS gives
 * it its subscriptions back, which can be before its next sweep: here there is none for an hour. Each
 * command under a claim waits for the resumption of the leases instead of judging a lease that ran out
 * during the outage (docs/jobs.md, "A job service outage").
 */
describe('a runner\'s command that reaches the job service before its sweep, once its bus is back', () => {
  let cut: CutOff<{ world: TestWorld; app: INestApplication }> | undefined;
  let proxy: CuttableProxy;
  let world: TestWorld;
  let app: INestApplication | undefined;

  beforeAll(async () => {
    cut = await jobServiceCutOff('jobs_bus_first', 'product-first', { GANTRY_LEASE_SWEEP_MS: '3600000' });
    ({ proxy, started: { world, app } } = cut);
  });

  afterAll(() => cut?.close());

  it('is judged under the resumed lease: the story log and the agent\'s report are taken, the leases resumed once', async () => {
    const { jobId } = await world.client.request(enqueueJob, {
      kind: 'TASK_IMPLEMENTATION', productId: 'product-first', taskId: 'T-first', payload: {}, baseRef: 'main', maxAttempts: 1, idempotencyKey: key('enqueue'),
    });
    const claim = await world.client.request(claimJob, { runnerId: 'runner-first', kinds: ['TASK_IMPLEMENTATION'], jobId, leaseDurationMs: 10_000, idempotencyKey: key('claim') });
    if (!claim.claimed) throw new Error('not claimed');
    const lease = { jobId, runnerId: 'runner-first', leaseToken: claim.job.leaseToken };
    await world.client.request(startJob, { ...lease, branch: 'feat/first', idempotencyKey: key('start') });

    const bus = app!.get(Bus);
    proxy.cut();
    await eventually(() => !bus.connected, { what: 'the job service seeing its bus gone', timeoutMs: 30_000 });
    await eventually(() => Date.now() > Date.parse(claim.job.leaseExpiresAt) + 1000, { what: 'the lease expiry passed while cut off', timeoutMs: 30_000 });
    proxy.restore();
    await eventually(() => bus.connected, { what: 'the job service back on its bus', timeoutMs: 60_000 });

    // Both at once: one resumption serves them.
    const [logged, reported] = await Promise.all([
      world.client.request(logImplementation, { ...lease, summary: 'written while the job service was cut off', idempotencyKey: key('log') }, { retryUntil: Date.now() + 60_000 }),
      world.client.request(reportAgentStatus, { ...lease, status: 'IN_PROGRESS', summary: 'still at it', idempotencyKey: key('status') }, { retryUntil: Date.now() + 60_000 }),
    ]);
    expect(logged).toEqual({ jobId, status: 'RUNNING' });
    expect(reported).toMatchObject({ jobId, status: 'IN_PROGRESS' });
    const resumptions = (await eventsOfJob(world, jobId)).filter((e) => e.type === 'JobLeaseRenewed' && e.data.resumedAfterBusLoss === true);
    expect(resumptions).toHaveLength(1);
    expect(resumptions[0]!.data).toMatchObject({ leaseToken: 1, runnerId: 'runner-first' });
    expect(await world.client.request(getJob, { jobId })).toMatchObject({ status: 'RUNNING', attempt: 1, storyLog: { implementationEntries: 1 } });
  }, 120_000);

  it('a renewal that waited for the resumption runs from when it is decided, not from when it arrived', async () => {
    const claimed = async (taskId: string, runnerId: string) => {
      const { jobId } = await world.client.request(enqueueJob, {
        kind: 'TASK_IMPLEMENTATION', productId: 'product-first', taskId, payload: {}, baseRef: 'main', maxAttempts: 1, idempotencyKey: key('enqueue'),
      }, { retryUntil: Date.now() + 60_000 });
      const claim = await world.client.request(claimJob, { runnerId, kinds: ['TASK_IMPLEMENTATION'], jobId, leaseDurationMs: 60_000, idempotencyKey: key('claim') });
      if (!claim.claimed) throw new Error('not claimed');
      return { jobId, runnerId, leaseToken: claim.job.leaseToken };
    };
    const renewer = await claimed('T-renewer', 'runner-renewer');
    const other = await claimed('T-slow', 'runner-slow');

    const bus = app!.get(Bus);
    const losses = bus.connectionLosses;
    proxy.cut();
    await eventually(() => bus.connectionLosses > losses, { what: 'the job service seeing its bus gone', timeoutMs: 30_000 });
    proxy.restore();
    await eventually(() => bus.connected, { what: 'the job service back on its bus', timeoutMs: 60_000 });

    // The other job's row held by another session: the resumption waits on it, and so does the renewal.
    const holder = await world.db.connect();
    let renewed: Promise<{ leaseExpiresAt: string }>;
    let releasedAt = 0;
    try {
      await holder.query('BEGIN');
      await holder.query(`SELECT 1 FROM jobs WHERE job_id = $1 FOR UPDATE`, [other.jobId]);
      renewed = world.client.request(renewJobLease, { ...renewer, leaseDurationMs: 60_000 }, { timeoutMs: 30_000 });
      await new Promise((resolve) => setTimeout(resolve, 3000));
    } finally {
      releasedAt = Date.now();
      await holder.query('COMMIT');
      holder.release();
    }
    const reply = await renewed;
    const renewals = (await eventsOfJob(world, renewer.jobId)).filter((e) => e.type === 'JobLeaseRenewed');
    const resumed = renewals.find((e) => e.data.resumedAfterBusLoss === true);
    const asked = renewals.at(-1)!;
    expect(resumed).toBeDefined();
    expect(asked.data.resumedAfterBusLoss).not.toBe(true);
    // Decided once the resumption was done (after the row was let go), so its 60 s run from then.
    expect(Date.parse(asked.data.renewedAt as string)).toBeGreaterThanOrEqual(releasedAt);
    expect(Date.parse(reply.leaseExpiresAt)).toBeGreaterThanOrEqual(releasedAt + 60_000);
    expect(reply.leaseExpiresAt).toBe(asked.data.leaseExpiresAt);
  }, 120_000);
});
