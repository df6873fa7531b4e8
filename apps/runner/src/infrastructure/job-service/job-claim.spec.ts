import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { enqueueJob, registerProduct } from '@gantry/contracts';
import { createTestWorld, type TestWorld } from '@gantry/service-runtime/testing';
import { eventually, startApp, type RunningApp } from '@gantry/testing';
import { claimUnderKey } from './job-claim.js';

/**
 * A claim's end by the runner's clock across a restart of the job service (docs/jobs.md, "A runner's
 * clock"): its first try decided and the service killed before it answered, the next start slow to
 * serve commands (the runner's tries meanwhile find nobody serving, and that time does not count
 * against the lease) and resuming the claim's lease as it begins to serve, and the repeat answered
 * under its key.
 */
describe("a claim's end, by the runner's clock, across a restart of the job service", () => {
  const BEFORE_SERVING = 'job-start:before-serving';
  let world: TestWorld;
  let service: RunningApp | undefined;

  beforeAll(async () => {
    world = await createTestWorld('runner-claim-end');
  });
  afterAll(async () => {
    await service?.kill('SIGTERM');
    await world?.close();
  });

  const start = (env: Record<string, string>, waitReady = true) => startApp('job-service', { schema: world.name, naming: world.naming, env, waitReady });

  it('a claim decided before the service died, answered again after a start that resumed its lease, is counted to end no later than the service ends it', async () => {
    const first = await start({ GANTRY_TEST_CRASH_AFTER_COMMIT: 'claim_job' });
    service = first;
    await world.client.request(registerProduct, {
      productId: 'product-claim-end', repository: 'acme/product-claim-end', cloneUrl: 'https://github.com/acme/product-claim-end.git',
      targetBranch: 'main', prStrategy: 'STORY', mergeMethod: 'SQUASH', requiredChecks: [], idempotencyKey: 'product-claim-end/register:test',
    });
    const { jobId } = await world.client.request(enqueueJob, { kind: 'PLAN_CHAT', productId: 'product-claim-end', idempotencyKey: `enqueue:${randomUUID()}` });
    const leaseDurationMs = 60_000;
    const claiming = claimUnderKey(
      world.client,
      { runnerId: 'runner-claim-end', kinds: ['PLAN_CHAT'], jobId, leaseDurationMs, idempotencyKey: `claim:${randomUUID()}` },
      { timeoutMs: 2_000, stopped: () => false, sleep: (ms) => sleep(ms) },
    );

    // The claim's first try is decided, and the service dies before it answers: that try gets no reply.
    await eventually(() => first.process.signalCode === 'SIGKILL', { what: 'the job service killed right after the claim was written' });
    // Started again, slow to serve; as it begins to, it resumes the claim's lease, its clock running again from then.
    const second = await start({ GANTRY_TEST_HOLD_AT: BEFORE_SERVING }, false);
    service = second;
    await eventually(() => second.output().includes(`"testHold":"${BEFORE_SERVING}"`), { what: 'the start held before it serves', timeoutMs: 120_000 });
    // A start this much slower to serve its first command than the try whose reply was lost took: the
    // runner's tries meanwhile find nobody serving.
    await sleep(5_000);
    second.process.kill('SIGUSR2');

    const { reply, leaseRunsOutAt } = await claiming;
    expect(reply).toMatchObject({ claimed: true, job: { jobId, leaseToken: 1 } });
    const claims = await world.db.query(`SELECT count(*) AS n FROM events WHERE stream_id = $1 AND type = 'JobClaimed'`, [jobId]);
    expect(Number(claims.rows[0].n)).toBe(1);
    const { rows } = await world.db.query<{ lease_expires_at: Date }>(`SELECT lease_expires_at FROM jobs WHERE job_id = $1`, [jobId]);
    // One host, one clock: the service's expiry and the runner's reckoning can be compared here.
    expect(leaseRunsOutAt).toBeLessThanOrEqual(rows[0]!.lease_expires_at.getTime());
    // Not far before it either: the lease as the start resumed it.
    expect(leaseRunsOutAt).toBeGreaterThan(rows[0]!.lease_expires_at.getTime() - 2_000);
  }, 240_000);
});
