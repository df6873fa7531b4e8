import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { INestApplication } from '@nestjs/common';
import { acquireWorktree, ErrorCode, JobClaimRolledBack, jobExampleIds, listWorktreeLeases, type RequestOf } from '@gantry/contracts';
import { eventually } from '@gantry/testing';
import { leaseIdFor } from './command-context.js';
import { claimedJob, createWorld, refusal, startInProcess, type TestWorld } from './testing/world.js';

/**
 * An acquire whose own write committed but whose answer never reached its caller (docs/worktrees.md,
 * "When a lease ends"): here the caller stops waiting for it at once, so the service commits the
 * request and prepares the lease for nobody. Asked again under its key it is that lease; given up, it
 * ends with the claim the runner then gives back.
 */
describe('an acquire whose answer was lost', () => {
  let world: TestWorld;
  let app: INestApplication;

  beforeAll(async () => {
    world = await createWorld('wt-acquire-lost');
    app = await startInProcess(world);
  });
  afterAll(async () => {
    await app?.close();
    await world?.close();
  });

  const asked = async (branch: string): Promise<RequestOf<typeof acquireWorktree>> => ({
    jobId: await claimedJob(world),
    jobLeaseToken: 1,
    repositoryUrl: world.git.origin,
    branch,
    baseRef: 'main',
    leaseDurationMs: 600_000,
    idempotencyKey: `acquire:${randomUUID()}`,
  });
  /** Sent, and its answer left behind: the caller's wait is over before the service answers. */
  const answerLost = async (request: RequestOf<typeof acquireWorktree>) => {
    expect((await refusal(world.client.request(acquireWorktree, request, { timeoutMs: 1 }))).code).toBe(ErrorCode.TIMEOUT);
  };
  const leaseOf = async (request: RequestOf<typeof acquireWorktree>) => {
    const leaseId = leaseIdFor(request.idempotencyKey);
    return (await world.client.request(listWorktreeLeases, { jobId: request.jobId })).leases.find((l) => l.leaseId === leaseId);
  };
  const requestsOf = (request: RequestOf<typeof acquireWorktree>) =>
    world.count(`SELECT count(*) AS n FROM events WHERE type = 'WorktreeLeaseRequested' AND data->>'jobId' = $1`, [request.jobId]);

  it('asked again under its key, it is the same lease, ready, with the grant it had: one request, one token', async () => {
    const request = await asked('feature/lost-answer');
    await answerLost(request);
    await eventually(async () => (await leaseOf(request))?.status === 'ready', { what: 'the lease ready for a caller that stopped waiting' });
    const first = await leaseOf(request);

    const grant = await world.client.request(acquireWorktree, request, { timeoutMs: 60_000 });
    expect(grant).toMatchObject({ leaseId: first!.leaseId, token: first!.token, expiresAt: first!.expiresAt });
    expect(await requestsOf(request)).toBe(1);
    // And again: the same answer, but for what is left of the lease by now.
    expect(await world.client.request(acquireWorktree, request, { timeoutMs: 60_000 })).toEqual({ ...grant, expiresInMs: expect.any(Number) });
  });

  it('asked again later, its grant says what is left of the lease when the service answers, not the duration it began with', async () => {
    const request = await asked('feature/lost-answer-later');
    await answerLost(request);
    await eventually(async () => (await leaseOf(request))?.status === 'ready', { what: 'the lease ready for a caller that stopped waiting' });
    const readySeenAt = Date.now();
    await sleep(1_500);

    const sentAt = Date.now();
    const grant = await world.client.request(acquireWorktree, request, { timeoutMs: 60_000 });
    const answeredAt = Date.now();
    // Less than the lease by at least the time since it was ready; by the service's clock (this one) as it answered.
    expect(grant.expiresInMs).toBeLessThanOrEqual(request.leaseDurationMs - (sentAt - readySeenAt));
    expect(grant.expiresInMs).toBeLessThanOrEqual(Date.parse(grant.expiresAt) - sentAt);
    expect(grant.expiresInMs).toBeGreaterThanOrEqual(Date.parse(grant.expiresAt) - answeredAt);

    // Reckoned at each answer, not stored with the first: asked again later still, less again.
    await sleep(500);
    const again = await world.client.request(acquireWorktree, request, { timeoutMs: 60_000 });
    expect(again).toMatchObject({ leaseId: grant.leaseId, token: grant.token, expiresAt: grant.expiresAt });
    expect(again.expiresInMs).toBeLessThanOrEqual(grant.expiresInMs! - 500);
  });

  it('given up, its claim given back ends it: no lease is left held for a caller that never had it, and asked again it is refused, not made anew', async () => {
    const request = await asked('feature/lost-given-up');
    await answerLost(request);
    await eventually(async () => (await leaseOf(request))?.status === 'ready', { what: 'the lease ready for a caller that stopped waiting' });

    // The runner, having no grant, gives its claim back.
    await world.publishJobEvent('JobClaimRolledBack', request.jobId, { ...JobClaimRolledBack.examples.valid[0], jobId: request.jobId, leaseToken: 1 });
    await eventually(async () => (await leaseOf(request))?.status === 'released', { what: 'the lease released with the claim' });

    const refused = await refusal(world.client.request(acquireWorktree, request, { timeoutMs: 60_000 }));
    expect(refused.code).toBe(ErrorCode.STALE_FENCE);
    expect(refused.details).toMatchObject({ leaseEnded: { leaseId: leaseIdFor(request.idempotencyKey), status: 'released', reason: 'job_terminal', claimEnded: true } });
    expect(await requestsOf(request)).toBe(1);
    // The key's next claim gets the worktree at once, with the next token.
    const next = await world.client.request(acquireWorktree, await asked('feature/lost-given-up'), { timeoutMs: 60_000 });
    expect(next.token).toBe((await leaseOf(request))!.token! + 1);
  });

  it('asked again after its claim expired before it was started (the lease released at once): told the lease ended and why, never its grant', async () => {
    const request = await asked('feature/lost-never-started');
    await answerLost(request);
    await eventually(async () => (await leaseOf(request))?.status === 'ready', { what: 'the lease ready for a caller that stopped waiting' });
    // While the lease holds, asked again under its key: the same grant.
    const grant = await world.client.request(acquireWorktree, request, { timeoutMs: 60_000 });

    // The runner was cut off: the job service expires the claim, never started, and the lease is released at once.
    await world.publishJobEvent('JobLeaseExpired', request.jobId, {
      jobId: request.jobId, runnerId: jobExampleIds.runnerId, leaseToken: 1, attempt: 1, outcome: 'REQUEUED', nextAttempt: 2, error: null,
      leaseExpiresAt: new Date(Date.now() - 1000).toISOString(), expiredAt: new Date().toISOString(), started: false,
    });
    await eventually(async () => (await leaseOf(request))?.status === 'released', { what: 'the never-started claim’s lease released' });

    // The cut-off runner's retry, under the same key: no grant of a released lease, but the lease's end, typed.
    const refused = await refusal(world.client.request(acquireWorktree, request, { timeoutMs: 60_000 }));
    expect(refused.code).toBe(ErrorCode.STALE_FENCE);
    expect(refused.details).toMatchObject({ leaseEnded: { leaseId: grant.leaseId, status: 'released', reason: 'job_terminal', claimEnded: true } });
    expect(await requestsOf(request)).toBe(1);
    // Another request under that key is still a conflict, not the lease's end.
    const other = await refusal(world.client.request(acquireWorktree, { ...request, baseRef: 'other' }, { timeoutMs: 60_000 }));
    expect(other.code).toBe(ErrorCode.IDEMPOTENCY_CONFLICT);
  });

  it('asked again after its lease expired unrenewed, its claim still live: told the lease expired, and that the claim did not end', async () => {
    const request = { ...(await asked('feature/lost-expired')), leaseDurationMs: 1_000 };
    await answerLost(request);
    await eventually(async () => (await leaseOf(request))?.status === 'stale_released', { what: 'the lease expired with nobody renewing it' });

    const refused = await refusal(world.client.request(acquireWorktree, request, { timeoutMs: 60_000 }));
    expect(refused.code).toBe(ErrorCode.STALE_FENCE);
    expect(refused.details).toMatchObject({ leaseEnded: { leaseId: leaseIdFor(request.idempotencyKey), status: 'stale_released', reason: 'expired', claimEnded: false } });
    expect(await requestsOf(request)).toBe(1);
  });
});
