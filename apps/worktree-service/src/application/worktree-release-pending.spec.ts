import {
  acquireWorktree,
  deriveIdempotencyKey,
  GantryError,
  JobClaimRolledBack,
  JobRunStopped,
  jobExampleIds,
  releaseWorktree,
  renewWorktreeLease,
  type WorktreeLeaseGrant,
} from '@gantry/contracts';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { eventually } from '@gantry/testing';
import { claimedJob, createWorld, refusal, type TestWorld } from './testing/world.js';
import { startServiceProcess, type ServiceProcess } from './testing/process.js';

/*
 * A claim that ends by someone other than its holder — a cancel, the job's lease expiring, a newer
 * claim — leaves its ready lease held until its holder releases it or it expires (docs/worktrees.md):
 * the holder's agent may still be running in the worktree. The service is a real process, killed
 * with SIGKILL on the way; job events are published as the job service's relay publishes them.
 */
describe('a lease whose claim ended elsewhere waits for its holder (a real process)', () => {
  let world: TestWorld;
  let service: ServiceProcess | null = null;
  let n = 0;

  beforeAll(async () => {
    world = await createWorld('wt-pending');
  });
  afterEach(async () => {
    await service?.kill('SIGKILL');
    service = null;
  });
  afterAll(async () => {
    await world?.close();
  });

  const acquire = (
    jobId: string,
    branch: string,
    extra: { jobLeaseToken?: number; leaseDurationMs?: number; timeoutMs?: number; lockTimeoutMs?: number; key?: string } = {},
  ) =>
    world.client.request(
      acquireWorktree,
      {
        jobId,
        jobLeaseToken: extra.jobLeaseToken ?? 1,
        repositoryUrl: world.git.origin,
        branch,
        baseRef: 'main',
        leaseDurationMs: extra.leaseDurationMs ?? 600_000,
        lockTimeoutMs: extra.lockTimeoutMs ?? 120_000,
        idempotencyKey: deriveIdempotencyKey('test/acquire', { jobId, branch, token: extra.jobLeaseToken ?? 1, key: extra.key }),
      },
      { timeoutMs: extra.timeoutMs ?? 150_000 },
    );
  const release = (grant: WorktreeLeaseGrant) =>
    world.client.request(releaseWorktree, { leaseId: grant.leaseId, token: grant.token, idempotencyKey: `release:${++n}` }, { timeoutMs: 30_000 });
  const renew = (grant: WorktreeLeaseGrant) =>
    world.client.request(renewWorktreeLease, { leaseId: grant.leaseId, token: grant.token, idempotencyKey: `renew:${++n}` }, { timeoutMs: 30_000 });
  const row = async (leaseId: string) => (await world.db.query(`SELECT * FROM worktree_leases WHERE lease_id = $1`, [leaseId])).rows[0];
  const rowOf = async (jobId: string, jobLeaseToken = 1) =>
    (await world.db.query(`SELECT * FROM worktree_leases WHERE job_id = $1 AND job_lease_token = $2`, [jobId, jobLeaseToken])).rows[0];
  const cancel = (jobId: string, revokedLeaseToken: number | null = 1) =>
    world.publishJobEvent('JobCancelled', jobId, { jobId, previousStatus: 'RUNNING', revokedLeaseToken, reason: 'not needed', taskStatus: null, cancelledAt: new Date().toISOString() });
  /** The job service's expiry of claim `leaseToken`, saying whether it had been started (an older job service does not say). */
  const leaseExpired = (jobId: string, leaseToken = 1, started?: boolean) =>
    world.publishJobEvent('JobLeaseExpired', jobId, {
      jobId, runnerId: jobExampleIds.runnerId, leaseToken, attempt: leaseToken, outcome: 'REQUEUED', nextAttempt: leaseToken + 1, error: null,
      leaseExpiresAt: new Date(Date.now() - 1000).toISOString(), expiredAt: new Date().toISOString(), ...(started === undefined ? {} : { started }),
    });
  /** An acquire whose reply may be lost to a SIGKILL: the caller asks again under the same key. */
  const acquireAcrossRestarts = async (jobId: string, branch: string): Promise<WorktreeLeaseGrant> => {
    for (;;) {
      try {
        return await acquire(jobId, branch, { timeoutMs: 20_000 });
      } catch (error) {
        if (!(error instanceof GantryError) || !['UNAVAILABLE', 'TIMEOUT'].includes(error.code)) throw error;
        await new Promise((r) => setTimeout(r, 200));
      }
    }
  };

  it('cancelled: the worktree stays held, across a SIGKILL and restart, until its holder releases it; then the next job in line gets it', async () => {
    service = await startServiceProcess(world);
    const branch = 'feature/cancelled-holder';
    const first = await claimedJob(world);
    const grant = await acquire(first, branch);
    const second = await claimedJob(world);
    let next: WorktreeLeaseGrant | null = null;
    const waiting = acquireAcrossRestarts(second, branch).then((g) => (next = g));
    await eventually(async () => (await rowOf(second))?.status === 'acquiring_lock', { what: 'the second job in line' });

    await cancel(first);
    await eventually(async () => (await row(grant.leaseId)).release_pending_cause === 'job_cancelled', { what: 'the cancelled claim’s lease waiting for its holder' });
    expect(await row(grant.leaseId)).toMatchObject({ status: 'ready' });
    // The holder keeps it alive while its agent stops.
    const renewed = await renew(grant);
    expect(Date.parse(renewed.expiresAt)).toBeGreaterThan(Date.parse(grant.expiresAt) - 1);

    await service.kill('SIGKILL');
    service = await startServiceProcess(world);
    // The restart (its reconciliation and stale reset) changes nothing: the job is CANCELLED, by the job service.
    expect(await row(grant.leaseId)).toMatchObject({ status: 'ready', release_pending_cause: 'job_cancelled' });
    expect((await rowOf(second)).status).toBe('acquiring_lock');
    expect(next).toBeNull();

    // The holder's word: its agent is gone.
    expect((await release(grant)).status).toBe('released');
    const granted = await waiting;
    expect(granted).toMatchObject({ token: grant.token + 1, path: grant.path });
    expect(await row(grant.leaseId)).toMatchObject({ status: 'released', release_reason: 'released' });
    await release(granted);
  }, 120_000);

  it('a cancel that arrives while the service is down is handled at its restart the same way', async () => {
    service = await startServiceProcess(world);
    const jobId = await claimedJob(world);
    const grant = await acquire(jobId, 'feature/cancel-while-down');
    await service.kill('SIGKILL');
    await cancel(jobId);
    service = await startServiceProcess(world);
    await eventually(async () => (await row(grant.leaseId)).release_pending_cause === 'job_cancelled', { what: 'the lease waiting for its holder' });
    expect(await row(grant.leaseId)).toMatchObject({ status: 'ready' });
    await release(grant);
  }, 60_000);

  it('the job’s lease expired and its holder went silent: the worktree is held until the worktree lease expires, then the job’s next claim gets it', async () => {
    service = await startServiceProcess(world);
    const branch = 'feature/silent-holder';
    const jobId = await claimedJob(world);
    const grant = await acquire(jobId, branch, { leaseDurationMs: 6_000 });
    await leaseExpired(jobId);
    await eventually(async () => (await row(grant.leaseId)).release_pending_cause === 'job_lease_expired', { what: 'the lease waiting for its holder' });

    // The job's next claim asks for the same worktree: it waits in line behind the silent holder.
    await world.claimJob(jobId, 2);
    await eventually(async () => (await world.count(`SELECT count(*) AS n FROM job_statuses WHERE job_id = $1 AND lease_token = 2`, [jobId])) === 1, { what: 'claim 2 known' });
    const nextClaim = acquire(jobId, branch, { jobLeaseToken: 2 });
    await eventually(async () => (await rowOf(jobId, 2))?.status === 'acquiring_lock', { what: 'claim 2 in line' });
    expect(await row(grant.leaseId)).toMatchObject({ status: 'ready' });

    const granted = await nextClaim;
    // It got the worktree only when the first lease expired — never while it could still be in use.
    expect(await row(grant.leaseId)).toMatchObject({ status: 'stale_released', release_reason: 'expired' });
    expect((await world.db.query(`SELECT count(*) AS n FROM events WHERE type = 'WorktreeLeaseExpired' AND data->>'leaseId' = $1`, [grant.leaseId])).rows[0].n).toBe('1');
    expect(granted).toMatchObject({ token: grant.token + 1, path: grant.path });
    await release(granted);
  }, 60_000);

  it('a claim the job service ended before it was started leaves no agent: its lease is released at once, and the job’s next claim gets the worktree without waiting', async () => {
    service = await startServiceProcess(world);
    const branch = 'feature/never-started';
    const jobId = await claimedJob(world);
    // Claim 1's acquire is granted, its answer lost, its runner dead: nobody will release or renew it.
    const stranded = await acquire(jobId, branch);
    await writeFile(join(stranded.path, 'left-behind.txt'), 'work of a claim that never started\n');
    // Another job's lease on another branch, ready: the end of claim 1 is none of its business.
    const other = await claimedJob(world);
    const otherGrant = await acquire(other, 'feature/never-started-other');

    await leaseExpired(jobId, 1, false);
    await eventually(async () => (await row(stranded.leaseId)).status === 'released', { what: 'the never-started claim’s lease released' });
    // Released as its holder would release it: the uncommitted work saved on a rescue branch.
    expect(await row(stranded.leaseId)).toMatchObject({ release_reason: 'job_terminal', release_pending_cause: null });
    expect((await row(stranded.leaseId)).rescue_branch).toMatch(/^gantry\/rescue\//);
    expect(await row(otherGrant.leaseId)).toMatchObject({ status: 'ready', release_pending_cause: null });

    await world.claimJob(jobId, 2);
    await eventually(async () => (await world.count(`SELECT count(*) AS n FROM job_statuses WHERE job_id = $1 AND lease_token = 2`, [jobId])) === 1, { what: 'claim 2 known' });
    const started = Date.now();
    const granted = await acquire(jobId, branch, { jobLeaseToken: 2 });
    expect(Date.now() - started).toBeLessThan(20_000);
    expect(granted).toMatchObject({ token: stranded.token + 1, path: stranded.path });
    // The same acquire delivered again gets the same grant; the dead claim's acquire, asked anew, is refused.
    expect(await acquire(jobId, branch, { jobLeaseToken: 2 })).toMatchObject({ leaseId: granted.leaseId, token: granted.token });
    const late = await refusal(acquire(jobId, branch, { jobLeaseToken: 1, lockTimeoutMs: 1_000, key: 'late', timeoutMs: 30_000 }));
    expect(late.code).toBe('STALE_FENCE');
    expect(await row(granted.leaseId)).toMatchObject({ status: 'ready' });
    await release(granted);
    await release(otherGrant);
  }, 90_000);

  it('a next claim that asks before the end of the never-started one is heard waits only until it is; two later claims at once: the latest gets it; another job’s holder is still waited for', async () => {
    service = await startServiceProcess(world);
    const branch = 'feature/never-started-early';
    const jobId = await claimedJob(world);
    const stranded = await acquire(jobId, branch);
    const expired = (leaseToken: number) => leaseExpired(jobId, leaseToken, false);

    // Claim 2's acquire comes before this service has heard that claim 1 ended: it waits in line.
    const second = acquire(jobId, branch, { jobLeaseToken: 2 });
    await eventually(async () => (await rowOf(jobId, 2))?.status === 'acquiring_lock', { what: 'claim 2 in line' });
    expect(await row(stranded.leaseId)).toMatchObject({ status: 'ready', release_pending_cause: 'claim_superseded' });
    await expired(1);
    await world.claimJob(jobId, 2);
    const granted = await second;
    expect(granted).toMatchObject({ token: stranded.token + 1, path: stranded.path });
    expect(await row(stranded.leaseId)).toMatchObject({ status: 'released', release_reason: 'job_terminal' });

    // Claim 2 dies the same way; claims 3 and 4 follow it (3 ending unstarted too), and both acquires arrive at once.
    await expired(2);
    await world.claimJob(jobId, 3);
    await expired(3);
    await world.claimJob(jobId, 4);
    await eventually(async () => (await world.count(`SELECT count(*) AS n FROM job_statuses WHERE job_id = $1 AND lease_token = 4`, [jobId])) === 1, { what: 'claim 4 known' });
    const [third, fourth] = await Promise.allSettled([acquire(jobId, branch, { jobLeaseToken: 3 }), acquire(jobId, branch, { jobLeaseToken: 4 })]);
    expect(third.status === 'rejected' && (third.reason as GantryError).code).toBe('STALE_FENCE');
    expect(fourth.status === 'fulfilled' && fourth.value).toMatchObject({ token: granted.token + 1, path: stranded.path });
    expect(await row(granted.leaseId)).toMatchObject({ status: 'released', release_reason: 'job_terminal' });

    // Another job on the branch: its holder is waited for as ever, whatever became of this job's claims.
    const otherJob = await claimedJob(world);
    expect((await refusal(acquire(otherJob, branch, { lockTimeoutMs: 2_000, timeoutMs: 30_000 }))).code).toBe('LOCK_TIMEOUT');
    const held = (fourth as PromiseFulfilledResult<WorktreeLeaseGrant>).value;
    expect(await row(held.leaseId)).toMatchObject({ status: 'ready', release_pending_cause: null });
    await release(held);
  }, 120_000);

  it('a claim the job service ended after it was started still waits for its holder', async () => {
    service = await startServiceProcess(world);
    const jobId = await claimedJob(world);
    const grant = await acquire(jobId, 'feature/maybe-started');
    await leaseExpired(jobId, 1, true);
    await eventually(async () => (await row(grant.leaseId)).release_pending_cause === 'job_lease_expired', { what: 'the started claim’s lease waiting for its holder' });
    expect(await row(grant.leaseId)).toMatchObject({ status: 'ready' });
    await release(grant);
  }, 60_000);

  it('the holder’s own word releases at once: a stop confirmed after a cancel, a rollback of its claim', async () => {
    service = await startServiceProcess(world);
    const stopped = await claimedJob(world);
    const stoppedGrant = await acquire(stopped, 'feature/stopped');
    await cancel(stopped);
    await eventually(async () => (await row(stoppedGrant.leaseId)).release_pending_cause === 'job_cancelled', { what: 'waiting for the holder' });
    await world.publishJobEvent('JobRunStopped', stopped, { ...JobRunStopped.examples.valid[0], jobId: stopped, leaseToken: 1 });
    await eventually(async () => (await row(stoppedGrant.leaseId)).status === 'released', { what: 'released on the confirmed stop' });
    expect(await row(stoppedGrant.leaseId)).toMatchObject({ release_reason: 'job_terminal' });

    const rolledBack = await claimedJob(world);
    const rolledBackGrant = await acquire(rolledBack, 'feature/rolled-back');
    await world.publishJobEvent('JobClaimRolledBack', rolledBack, { ...JobClaimRolledBack.examples.valid[0], jobId: rolledBack, leaseToken: 1 });
    await eventually(async () => (await row(rolledBackGrant.leaseId)).status === 'released', { what: 'released on the rollback' });
    expect(await row(rolledBackGrant.leaseId)).toMatchObject({ release_reason: 'job_terminal', release_pending_cause: null });
  }, 60_000);
});
