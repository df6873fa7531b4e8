import { contractRegistry, ErrorCode } from '@gantry/contracts';
import { type Decider, DeciderSpecification } from '@gantry/eventstore/testing';
import type { WorktreeLeaseCommand } from './commands.js';
import { worktreeLeaseDecider } from './decider.js';
import { pendingEffects } from './effects.js';
import type { WorktreeLeaseEvent } from './events.js';
import { currentHolder, type WorktreeLeaseState } from './state.js';
import { leaseViewOf, worktreeStatus } from './view.js';
import {
  A,
  aAcquired,
  acquired,
  aReady,
  aReadyBWaiting,
  at,
  B,
  branch,
  C,
  created,
  path,
  pending,
  queued,
  released,
  releaseRequested,
  repositoryUrl,
  request,
  requested,
  sha,
  synced,
  T0,
  timedOut,
  worktreeKey,
} from '../testing/lease-fixtures.js';
const given = DeciderSpecification.for(worktreeLeaseDecider);

// The wiring runs it through @gantry/eventstore's decideWithin: it must have that shape.
const asStoredDecider: Decider<WorktreeLeaseCommand, WorktreeLeaseState, WorktreeLeaseEvent> = worktreeLeaseDecider;

describe('WorktreeLease: requesting a lease', () => {
  it('starts idle, with no lease and no token granted', () => {
    expect(asStoredDecider.initialState).toEqual({
      worktreeKey: null, epoch: 0, closed: false, repositoryUrl: null, branch: null, lastToken: 0, lock: { holder: null, waiters: [] }, leases: {}, path: null, eviction: null,
    });
    expect(worktreeStatus(asStoredDecider.initialState)).toBe('idle');
  });

  it('grants a free lock at once with fencing token 1 and asks for the worktree', () => {
    const state = given([]).when(request(A, T0)).then(aAcquired);
    expect(worktreeStatus(state)).toBe('creating_or_reusing');
    // its expiry starts when it is ready
    expect(state.leases[A]!.expiresAt).toBeNull();
  });

  it('puts a second acquirer in line behind the holder, with its deadline', () => {
    const state = given(aReady).when(request(B, at(10))).then([requested(B, at(10)), queued(B, 1, at(10))]);
    expect(state.lock.waiters).toEqual([{ leaseId: B, deadline: at(70) }]);
    expect(currentHolder(state)?.leaseId).toBe(A);
  });

  it('lines up waiters in arrival order', () => {
    given(aReadyBWaiting).when(request(C, at(20))).then([requested(C, at(20)), queued(C, 2, at(20))]);
  });

  it('times out at once an acquirer that will not wait (lock timeout 0) while the lock is held', () => {
    const req = requested(B, at(10));
    const data = { ...req.data, lockDeadline: at(10) } as typeof req.data;
    given(aReady)
      .when(request(B, at(10), { lockTimeoutMs: 0 }))
      .then([{ type: 'WorktreeLeaseRequested', data }, timedOut(B, at(10), at(10))] as WorktreeLeaseEvent[]);
  });

  it('treats the same request again as already done', () => {
    given(aAcquired).when(request(A, at(5))).thenNothingHappened();
  });

  it('refuses a lease id reused for a different request', () => {
    given(aAcquired).when(request(A, at(5), { baseRef: 'develop' })).thenThrows(ErrorCode.IDEMPOTENCY_CONFLICT);
  });

  it('refuses a second lease for the same claim of the same job', () => {
    given(aAcquired).when(request(B, at(5), { jobId: 'job-a' })).thenThrows(ErrorCode.ALREADY_CLAIMED, /job-a/);
  });

  it('fences off a request from an older claim of the job', () => {
    given([requested(A, T0, 2), acquired(A, 1, T0)]).when(request(B, at(5), { jobId: 'job-a', jobLeaseToken: 1 })).thenThrows(ErrorCode.STALE_FENCE);
  });

  it('lets a newer claim of the job supersede the older claim’s ready lease: the old one waits for its holder, the new one waits in line', () => {
    const newer = { ...requested(B, at(30), 2), data: { ...requested(B, at(30), 2).data, jobId: 'job-a' } } as WorktreeLeaseEvent;
    const state = given(aReady)
      .when(request(B, at(30), { jobId: 'job-a', jobLeaseToken: 2 }))
      .then([pending(A, 1, 'claim_superseded', at(30)), newer, queued(B, 1, at(30))]);
    expect(state.leases[A]).toMatchObject({ status: 'ready', releasePending: { cause: 'claim_superseded', since: at(30) } });
    expect(currentHolder(state)?.leaseId).toBe(A);
  });

  it('releases at once the older claim’s lease that is still being prepared (no grant was handed out)', () => {
    const newer = { ...requested(B, at(30), 2), data: { ...requested(B, at(30), 2).data, jobId: 'job-a' } } as WorktreeLeaseEvent;
    given([...aAcquired, created(A, 1, at(1))])
      .when(request(B, at(30), { jobId: 'job-a', jobLeaseToken: 2 }))
      .then([releaseRequested(A, 1, at(30), 'stale_reset'), newer, queued(B, 1, at(30))]);
  });

  it('withdraws the older claim’s request that still waits when a newer claim of the job asks', () => {
    const bOld = requested(B, at(10));
    const cNewer = { ...requested(C, at(20), 2), data: { ...requested(C, at(20), 2).data, jobId: 'job-b' } } as WorktreeLeaseEvent;
    given([...aReady, bOld, queued(B, 1, at(10))])
      .when(request(C, at(20), { jobId: 'job-b', jobLeaseToken: 2 }))
      .then([
        { type: 'WorktreeLeaseRequestWithdrawn', data: { worktreeKey, leaseId: B, reason: 'stale_reset', withdrawnAt: at(20) } },
        cNewer,
        queued(C, 1, at(20)),
      ]);
  });

  it('refuses a worktree key that is not the one of the repository and branch', () => {
    given([]).when(request(A, T0, { worktreeKey: 'someone-else-0123456789ab' })).thenThrows(ErrorCode.INVALID_COMMAND);
  });
});

describe('WorktreeLease: creating, reusing and syncing', () => {
  it('moves to syncing when the worktree was created', () => {
    const state = given(aAcquired)
      .when({ type: 'RecordWorktreePrepared', data: { leaseId: A, token: 1, outcome: 'created', path, now: at(1) } })
      .then([created(A, 1, at(1))]);
    expect(worktreeStatus(state)).toBe('syncing');
    expect(state.path).toBe(path);
  });

  it('records a reused worktree the same way', () => {
    given(aAcquired)
      .when({ type: 'RecordWorktreePrepared', data: { leaseId: A, token: 1, outcome: 'reused', path, now: at(1) } })
      .then([{ type: 'WorktreeReused', data: { worktreeKey, leaseId: A, token: 1, path, reusedAt: at(1) } }]);
  });

  it('reports the rescue of a dirty worktree left behind before reusing it', () => {
    const rescueBranch = `gantry/rescue/${worktreeKey}/20261130T060001000Z`;
    given(aAcquired)
      .when({ type: 'RecordWorktreePrepared', data: { leaseId: A, token: 1, outcome: 'reused', path, rescue: { branch: rescueBranch, sha }, now: at(1) } })
      .then([
        { type: 'WorktreeRescued', data: { worktreeKey, leaseId: A, token: 1, rescueBranch, rescueSha: sha, rescuedAt: at(1) } },
        { type: 'WorktreeReused', data: { worktreeKey, leaseId: A, token: 1, path, reusedAt: at(1) } },
      ]);
  });

  it('becomes ready at the base SHA, with the lease running from the sync', () => {
    const state = given([...aAcquired, created(A, 1, at(1))])
      .when({ type: 'RecordWorktreeSynced', data: { leaseId: A, token: 1, baseSha: sha, now: at(2) } })
      .then([synced(A, 1, at(2))]);
    expect(worktreeStatus(state)).toBe('ready');
    expect(state.leases[A]).toMatchObject({ baseSha: sha, expiresAt: at(602) });
  });

  it('reports the rescue of local commits an earlier holder left, then becomes ready at the origin’s commit', () => {
    const rescueBranch = `gantry/rescue/${worktreeKey}/20261130T060002000Z`;
    const leftBehind = '9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a291807';
    given([...aAcquired, created(A, 1, at(1))])
      .when({ type: 'RecordWorktreeSynced', data: { leaseId: A, token: 1, baseSha: sha, rescue: { branch: rescueBranch, sha: leftBehind }, now: at(2) } })
      .then([
        { type: 'WorktreeRescued', data: { worktreeKey, leaseId: A, token: 1, rescueBranch, rescueSha: leftBehind, rescuedAt: at(2) } },
        synced(A, 1, at(2)),
      ]);
  });

  it('ignores a redelivered report of a step already recorded', () => {
    given(aReady).when({ type: 'RecordWorktreePrepared', data: { leaseId: A, token: 1, outcome: 'created', path, now: at(3) } }).thenNothingHappened();
    given(aReady).when({ type: 'RecordWorktreeSynced', data: { leaseId: A, token: 1, baseSha: sha, now: at(3) } }).thenNothingHappened();
  });

  it('refuses a sync report before the worktree exists', () => {
    given(aAcquired)
      .when({ type: 'RecordWorktreeSynced', data: { leaseId: A, token: 1, baseSha: sha, now: at(2) } })
      .thenThrows(ErrorCode.INVALID_TRANSITION);
  });

  it('refuses a report carrying another token', () => {
    given(aAcquired)
      .when({ type: 'RecordWorktreePrepared', data: { leaseId: A, token: 2, outcome: 'created', path, now: at(1) } })
      .thenThrows(ErrorCode.STALE_FENCE);
  });

  it('refuses a report for a lease that still waits for the lock (it has no token)', () => {
    given(aReadyBWaiting)
      .when({ type: 'RecordWorktreePrepared', data: { leaseId: B, token: 2, outcome: 'created', path, now: at(11) } })
      .thenThrows(ErrorCode.STALE_FENCE);
  });

  it('refuses a report for an unknown lease', () => {
    given(aAcquired)
      .when({ type: 'RecordWorktreeSynced', data: { leaseId: C, token: 1, baseSha: sha, now: at(2) } })
      .thenThrows(ErrorCode.NOT_FOUND);
  });

  it('ends in sync_failed and hands the lock to the next waiter with the next token', () => {
    const history = [...aAcquired, created(A, 1, at(1)), requested(B, at(10)), queued(B, 1, at(10))];
    const state = given(history)
      .when({ type: 'RecordWorktreeSyncFailed', data: { leaseId: A, token: 1, stage: 'sync', reason: 'diverged', fault: 'HOST', now: at(20) } })
      .then([
        { type: 'WorktreeSyncFailed', data: { worktreeKey, leaseId: A, token: 1, stage: 'sync', reason: 'diverged', fault: 'HOST', failedAt: at(20) } },
        acquired(B, 2, at(20)),
      ]);
    expect(state.leases[A]!.status).toBe('sync_failed');
    expect(currentHolder(state)?.leaseId).toBe(B);
  });

  it('refuses a failure report for a stage the lease is not in', () => {
    given(aAcquired)
      .when({ type: 'RecordWorktreeSyncFailed', data: { leaseId: A, token: 1, stage: 'sync', reason: 'x', fault: 'HOST', now: at(2) } })
      .thenThrows(ErrorCode.INVALID_TRANSITION);
  });

  it('records a failed create and frees the lock when no one waits', () => {
    const state = given(aAcquired)
      .when({ type: 'RecordWorktreeSyncFailed', data: { leaseId: A, token: 1, stage: 'create_or_reuse', reason: 'base ref v9 is not a branch, tag or commit of the origin', fault: 'JOB', now: at(2) } })
      .then([{ type: 'WorktreeSyncFailed', data: { worktreeKey, leaseId: A, token: 1, stage: 'create_or_reuse', reason: 'base ref v9 is not a branch, tag or commit of the origin', fault: 'JOB', failedAt: at(2) } }]);
    expect(worktreeStatus(state)).toBe('idle');
  });
});

describe('WorktreeLease: renewing', () => {
  it('extends a ready lease from now by its own duration or the one asked for', () => {
    given(aReady)
      .when({ type: 'RenewWorktreeLease', data: { leaseId: A, token: 1, now: at(100) } })
      .then([{ type: 'WorktreeLeaseRenewed', data: { worktreeKey, leaseId: A, token: 1, expiresAt: at(700), renewedAt: at(100) } }]);
    given(aReady)
      .when({ type: 'RenewWorktreeLease', data: { leaseId: A, token: 1, leaseDurationMs: 30_000, now: at(100) } })
      .then([{ type: 'WorktreeLeaseRenewed', data: { worktreeKey, leaseId: A, token: 1, expiresAt: at(130), renewedAt: at(100) } }]);
  });

  it('refuses a renew with a stale token, emitting nothing', () => {
    given(aReady).when({ type: 'RenewWorktreeLease', data: { leaseId: A, token: 0, now: at(100) } }).thenThrows(ErrorCode.STALE_FENCE);
  });

  it('refuses a renew of a lease that was released, even with its own token', () => {
    given([...aReady, releaseRequested(A, 1, at(50)), released(A, 1, at(51))])
      .when({ type: 'RenewWorktreeLease', data: { leaseId: A, token: 1, now: at(100) } })
      .thenThrows(ErrorCode.STALE_FENCE, /released/);
  });

  it('refuses a renew after the expiry moment, before the expiry is recorded', () => {
    given(aReady).when({ type: 'RenewWorktreeLease', data: { leaseId: A, token: 1, now: at(602) } }).thenThrows(ErrorCode.STALE_FENCE, /expired/);
  });

  it('refuses the old holder’s token once the lock has passed to a newer grant', () => {
    const history = [...aReadyBWaiting, releaseRequested(A, 1, at(50)), released(A, 1, at(51)), acquired(B, 2, at(51))];
    given(history).when({ type: 'RenewWorktreeLease', data: { leaseId: B, token: 1, now: at(60) } }).thenThrows(ErrorCode.STALE_FENCE);
    given(history).when({ type: 'ReleaseWorktreeLease', data: { leaseId: A, token: 1, reason: 'released', removeWorktree: false, now: at(60) } }).thenThrows(ErrorCode.STALE_FENCE);
  });
});

describe('WorktreeLease: resumed at the service\'s start (docs/worktrees.md, "When a lease ends")', () => {
  const resume = (s: number) => ({ type: 'ResumeWorktreeLeases' as const, data: { now: at(s) } });

  it('a held lease whose expiry passed while the service was down runs as long again from the start, and its holder is obeyed', () => {
    const resumed: WorktreeLeaseEvent = { type: 'WorktreeLeaseRenewed', data: { worktreeKey, leaseId: A, token: 1, expiresAt: at(1300), renewedAt: at(700), resumedAtStart: true } };
    given(aReady).when(resume(700)).then([resumed]);
    given([...aReady, resumed])
      .when({ type: 'RenewWorktreeLease', data: { leaseId: A, token: 1, now: at(701) } })
      .then([{ type: 'WorktreeLeaseRenewed', data: { worktreeKey, leaseId: A, token: 1, expiresAt: at(1301), renewedAt: at(701) } }]);
    given([...aReady, resumed]).when({ type: 'ExpireWorktreeLease', data: { leaseId: A, now: at(701) } }).thenNothingHappened();
  });

  it('resumed after the service lost NATS, the renewal says so (and not that it was at a start)', () => {
    given(aReady)
      .when({ type: 'ResumeWorktreeLeases', data: { now: at(700), after: 'bus_loss' } })
      .then([{ type: 'WorktreeLeaseRenewed', data: { worktreeKey, leaseId: A, token: 1, expiresAt: at(1300), renewedAt: at(700), resumedAfterBusLoss: true } }]);
  });

  it('a lease that ran out by the last sweep a replica made with its bus up is not resumed: it ran out while one served, the sweep expires it', () => {
    const resumeAfterSweep = (sweptAt: number, after?: 'bus_loss') => ({
      type: 'ResumeWorktreeLeases' as const,
      data: { now: at(700), lastSweptAt: at(sweptAt), ...(after ? { after } : {}) },
    });
    // Granted until T0+602s.
    given(aReady).when(resumeAfterSweep(603)).thenNothingHappened();
    given(aReady).when(resumeAfterSweep(602)).thenNothingHappened();
    given(aReady).when(resumeAfterSweep(650, 'bus_loss')).thenNothingHappened();
    // Still live at the last sweep: serving stopped before it ran out, so it is resumed.
    given(aReady)
      .when(resumeAfterSweep(601))
      .then([{ type: 'WorktreeLeaseRenewed', data: { worktreeKey, leaseId: A, token: 1, expiresAt: at(1300), renewedAt: at(700), resumedAtStart: true } }]);
    // A sweep stamped later than this replica's now (clocks differ) proves nothing past now.
    given(aReady)
      .when({ type: 'ResumeWorktreeLeases', data: { now: at(601), lastSweptAt: at(700) } })
      .then([{ type: 'WorktreeLeaseRenewed', data: { worktreeKey, leaseId: A, token: 1, expiresAt: at(1201), renewedAt: at(601), resumedAtStart: true } }]);
  });

  it('leaves alone a lease that runs longer already, a released one and a waiter', () => {
    given(aReadyBWaiting).when(resume(1)).thenNothingHappened();
    given([...aReady, releaseRequested(A, 1, at(50)), released(A, 1, at(51))]).when(resume(700)).thenNothingHappened();
  });
});

describe('WorktreeLease: releasing', () => {
  it('asks for the worktree to be rescued and kept when its holder releases it', () => {
    const state = given(aReady)
      .when({ type: 'ReleaseWorktreeLease', data: { leaseId: A, token: 1, reason: 'released', removeWorktree: false, now: at(50) } })
      .then([releaseRequested(A, 1, at(50))]);
    expect(worktreeStatus(state)).toBe('releasing');
  });

  it.each(['job_terminal', 'stale_reset', 'shutdown'] as const)('releases on %s like any other release', (reason) => {
    given(aReady)
      .when({ type: 'ReleaseWorktreeLease', data: { leaseId: A, token: 1, reason, removeWorktree: true, now: at(50) } })
      .then([releaseRequested(A, 1, at(50), reason, true)]);
  });

  it('releases a lease whose worktree is still being created (the job ended meanwhile)', () => {
    given(aAcquired)
      .when({ type: 'ReleaseWorktreeLease', data: { leaseId: A, token: 1, reason: 'job_terminal', removeWorktree: false, now: at(1) } })
      .then([releaseRequested(A, 1, at(1), 'job_terminal')]);
  });

  it('treats a release asked again while it runs as the same release', () => {
    given([...aReady, releaseRequested(A, 1, at(50))])
      .when({ type: 'ReleaseWorktreeLease', data: { leaseId: A, token: 1, reason: 'job_terminal', removeWorktree: false, now: at(51) } })
      .thenNothingHappened();
  });

  it('refuses a release with a stale token and changes nothing', () => {
    given(aReady)
      .when({ type: 'ReleaseWorktreeLease', data: { leaseId: A, token: 7, reason: 'released', removeWorktree: false, now: at(50) } })
      .thenThrows(ErrorCode.STALE_FENCE);
  });

  it('refuses to release a request that still waits (it must be withdrawn)', () => {
    given(aReadyBWaiting)
      .when({ type: 'ReleaseWorktreeLease', data: { leaseId: B, token: 2, reason: 'released', removeWorktree: false, now: at(50) } })
      .thenThrows(ErrorCode.INVALID_TRANSITION);
  });

  it('records the rescue and the release, then grants the next waiter the next token', () => {
    const rescueBranch = `gantry/rescue/${worktreeKey}/20261130T060051000Z`;
    const state = given([...aReadyBWaiting, releaseRequested(A, 1, at(50))])
      .when({ type: 'RecordWorktreeReleased', data: { leaseId: A, token: 1, rescue: { branch: rescueBranch, sha }, removed: false, now: at(51) } })
      .then([
        { type: 'WorktreeRescued', data: { worktreeKey, leaseId: A, token: 1, rescueBranch, rescueSha: sha, rescuedAt: at(51) } },
        released(A, 1, at(51)),
        acquired(B, 2, at(51)),
      ]);
    expect(state.leases[A]!.status).toBe('released');
    expect(currentHolder(state)).toMatchObject({ leaseId: B, token: 2, status: 'creating_or_reusing' });
    expect(state.lastToken).toBe(2);
  });

  it('frees the lock when no one waits, and forgets the path of a removed worktree', () => {
    const state = given([...aReady, releaseRequested(A, 1, at(50), 'released', true)])
      .when({ type: 'RecordWorktreeReleased', data: { leaseId: A, token: 1, rescue: null, removed: true, now: at(51) } })
      .then([released(A, 1, at(51), 'released', true)]);
    expect(worktreeStatus(state)).toBe('idle');
    expect(state.path).toBeNull();
  });

  it('skips waiters whose deadline passed while the holder held the lock', () => {
    given([...aReadyBWaiting, requested(C, at(80)), queued(C, 2, at(80)), releaseRequested(A, 1, at(100))])
      .when({ type: 'RecordWorktreeReleased', data: { leaseId: A, token: 1, rescue: null, removed: false, now: at(101) } })
      .then([released(A, 1, at(101)), timedOut(B, at(70), at(101)), acquired(C, 2, at(101))]);
  });

  it('ends an expired or stale-reset lease in stale_released', () => {
    const state = given([...aReady, releaseRequested(A, 1, at(700), 'expired')])
      .when({ type: 'RecordWorktreeReleased', data: { leaseId: A, token: 1, rescue: null, removed: false, now: at(701) } })
      .then([released(A, 1, at(701), 'expired')]);
    expect(state.leases[A]!.status).toBe('stale_released');
  });

  it('refuses a release report for a lease that was not asked to release', () => {
    given(aReady)
      .when({ type: 'RecordWorktreeReleased', data: { leaseId: A, token: 1, rescue: null, removed: false, now: at(51) } })
      .thenThrows(ErrorCode.INVALID_TRANSITION);
  });

  it('ignores a redelivered release report', () => {
    given([...aReady, releaseRequested(A, 1, at(50)), released(A, 1, at(51))])
      .when({ type: 'RecordWorktreeReleased', data: { leaseId: A, token: 1, rescue: null, removed: false, now: at(52) } })
      .thenNothingHappened();
  });
});

describe('WorktreeLease: a claim that ended elsewhere (release pending)', () => {
  const aPending = [...aReadyBWaiting, pending(A, 1, 'job_cancelled', at(20))];

  it('keeps a ready lease held, waiting for its holder: the next acquirer stays in line', () => {
    const state = given(aReadyBWaiting).when({ type: 'AwaitHolderRelease', data: { leaseId: A, cause: 'job_cancelled', now: at(20) } }).then([pending(A, 1, 'job_cancelled', at(20))]);
    expect(currentHolder(state)?.leaseId).toBe(A);
    expect(state.lock.waiters.map((w) => w.leaseId)).toEqual([B]);
    expect(leaseViewOf(state.leases[A]!)).toMatchObject({ status: 'ready', releasePending: { cause: 'job_cancelled', since: at(20) } });
  });

  it('asked again, changes nothing', () => {
    given(aPending).when({ type: 'AwaitHolderRelease', data: { leaseId: A, cause: 'job_lease_expired', now: at(21) } }).thenNothingHappened();
  });

  it('withdraws a request still in line and releases a lease still being prepared: no agent can be in them', () => {
    given(aReadyBWaiting)
      .when({ type: 'AwaitHolderRelease', data: { leaseId: B, cause: 'job_cancelled', now: at(20) } })
      .then([{ type: 'WorktreeLeaseRequestWithdrawn', data: { worktreeKey, leaseId: B, reason: 'job_terminal', withdrawnAt: at(20) } }]);
    given([...aAcquired, created(A, 1, at(1))])
      .when({ type: 'AwaitHolderRelease', data: { leaseId: A, cause: 'job_lease_expired', now: at(20) } })
      .then([releaseRequested(A, 1, at(20), 'job_terminal')]);
  });

  it('lets its holder renew it while its agent stops, and release it with its token; then the next in line gets it', () => {
    given(aPending)
      .when({ type: 'RenewWorktreeLease', data: { leaseId: A, token: 1, now: at(25) } })
      .then([{ type: 'WorktreeLeaseRenewed', data: { worktreeKey, leaseId: A, token: 1, expiresAt: at(625), renewedAt: at(25) } }]);
    const releasing = given(aPending)
      .when({ type: 'ReleaseWorktreeLease', data: { leaseId: A, token: 1, reason: 'released', removeWorktree: false, now: at(30) } })
      .then([releaseRequested(A, 1, at(30))]);
    expect(releasing.lock.holder).toBe(A);
    given([...aPending, releaseRequested(A, 1, at(30))])
      .when({ type: 'RecordWorktreeReleased', data: { leaseId: A, token: 1, rescue: null, removed: false, now: at(31) } })
      .then([released(A, 1, at(31)), acquired(B, 2, at(31))]);
  });

  it('refuses a stale token on it as on any lease', () => {
    given(aPending).when({ type: 'ReleaseWorktreeLease', data: { leaseId: A, token: 7, reason: 'released', removeWorktree: false, now: at(30) } }).thenThrows(ErrorCode.STALE_FENCE);
  });

  it('releases it when it expires without its holder’s word', () => {
    given(aPending)
      .when({ type: 'ExpireWorktreeLease', data: { leaseId: A, now: at(602) } })
      .then([
        { type: 'WorktreeLeaseExpired', data: { worktreeKey, leaseId: A, token: 1, expiresAt: at(602), expiredAt: at(602) } },
        releaseRequested(A, 1, at(602), 'expired'),
      ]);
  });

  it('does nothing to a lease that has ended', () => {
    given([...aReady, releaseRequested(A, 1, at(3)), released(A, 1, at(4))]).when({ type: 'AwaitHolderRelease', data: { leaseId: A, cause: 'job_cancelled', now: at(5) } }).thenNothingHappened();
  });

  it('its event satisfies its published contract', () => {
    expect(contractRegistry.event('worktrees', 'WorktreeReleasePending', 1)!.data.safeParse(pending(A, 1, 'claim_unknown', at(1)).data).error).toBeUndefined();
  });
});

describe('WorktreeLease: expiry and lock timeouts', () => {
  it('expires a lease at its expiry and asks for its release', () => {
    given(aReady)
      .when({ type: 'ExpireWorktreeLease', data: { leaseId: A, now: at(602) } })
      .then([
        { type: 'WorktreeLeaseExpired', data: { worktreeKey, leaseId: A, token: 1, expiresAt: at(602), expiredAt: at(602) } },
        releaseRequested(A, 1, at(602), 'expired'),
      ]);
  });

  it('does nothing for an expiry timer that fired early, after a renew, or after the release', () => {
    given(aReady).when({ type: 'ExpireWorktreeLease', data: { leaseId: A, now: at(601) } }).thenNothingHappened();
    const renewed: WorktreeLeaseEvent = { type: 'WorktreeLeaseRenewed', data: { worktreeKey, leaseId: A, token: 1, expiresAt: at(900), renewedAt: at(300) } };
    given([...aReady, renewed]).when({ type: 'ExpireWorktreeLease', data: { leaseId: A, now: at(602) } }).thenNothingHappened();
    given([...aReady, releaseRequested(A, 1, at(50))]).when({ type: 'ExpireWorktreeLease', data: { leaseId: A, now: at(700) } }).thenNothingHappened();
  });

  it('does not expire a lease being prepared, however long that takes: its holder cannot renew it yet', () => {
    given(aAcquired).when({ type: 'ExpireWorktreeLease', data: { leaseId: A, now: at(6000) } }).thenNothingHappened();
    given([...aAcquired, created(A, 1, at(3000))]).when({ type: 'ExpireWorktreeLease', data: { leaseId: A, now: at(6000) } }).thenNothingHappened();
    // the expiry runs from its readiness: ready at 5000 s, it lasts its 600 s from there
    const readyLate = [...aAcquired, created(A, 1, at(3000)), synced(A, 1, at(5000))];
    given(readyLate).when({ type: 'ExpireWorktreeLease', data: { leaseId: A, now: at(5599) } }).thenNothingHappened();
    given(readyLate)
      .when({ type: 'ExpireWorktreeLease', data: { leaseId: A, now: at(5600) } })
      .then([
        { type: 'WorktreeLeaseExpired', data: { worktreeKey, leaseId: A, token: 1, expiresAt: at(5600), expiredAt: at(5600) } },
        releaseRequested(A, 1, at(5600), 'expired'),
      ]);
  });

  it('obeys no expiry an older log recorded with the lock', () => {
    const [req, lock] = aAcquired as [WorktreeLeaseEvent, Extract<WorktreeLeaseEvent, { type: 'WorktreeLockAcquired' }>];
    const older = { ...lock, data: { ...lock.data, expiresAt: at(600) } };
    given([req, older]).when({ type: 'ExpireWorktreeLease', data: { leaseId: A, now: at(700) } }).thenNothingHappened();
    expect([req, older].reduce(worktreeLeaseDecider.evolve, worktreeLeaseDecider.initialState).leases[A]!.expiresAt).toBeNull();
  });

  it('times out the waiters past their deadline with LOCK_TIMEOUT and keeps the others in line', () => {
    const state = given([...aReadyBWaiting, requested(C, at(40)), queued(C, 2, at(40))])
      .when({ type: 'TimeOutLockWaiters', data: { now: at(70) } })
      .then([timedOut(B, at(70), at(70))]);
    expect(state.leases[B]!.status).toBe('lock_timeout');
    expect(state.lock.waiters.map((w) => w.leaseId)).toEqual([C]);
  });

  it('times out no one before their deadline', () => {
    given(aReadyBWaiting).when({ type: 'TimeOutLockWaiters', data: { now: at(69) } }).thenNothingHappened();
  });
});

describe('WorktreeLease: withdrawing a waiting request', () => {
  it('takes a waiter out of line when its job ends', () => {
    const state = given(aReadyBWaiting)
      .when({ type: 'WithdrawWorktreeLeaseRequest', data: { leaseId: B, reason: 'job_terminal', now: at(30) } })
      .then([{ type: 'WorktreeLeaseRequestWithdrawn', data: { worktreeKey, leaseId: B, reason: 'job_terminal', withdrawnAt: at(30) } }]);
    expect(state.lock.waiters).toEqual([]);
  });

  it('refuses to withdraw a lease that holds the lock', () => {
    given(aReady).when({ type: 'WithdrawWorktreeLeaseRequest', data: { leaseId: A, reason: 'job_terminal', now: at(30) } }).thenThrows(ErrorCode.INVALID_TRANSITION);
  });

  it('does nothing for a request that already ended', () => {
    given([...aReadyBWaiting, timedOut(B, at(70), at(70))])
      .when({ type: 'WithdrawWorktreeLeaseRequest', data: { leaseId: B, reason: 'job_terminal', now: at(80) } })
      .thenNothingHappened();
  });
});

describe('WorktreeLease: the lock is never held twice', () => {
  // A seeded walk through random commands; after every accepted decision at most one lease may
  // be between the grant and the end of its release, tokens only grow, and the holder is that lease.
  it('keeps one holder and growing tokens through 2000 random commands', () => {
    let seed = 42;
    const rnd = (n: number) => {
      seed = (seed * 1103515245 + 12345) & 0x7fffffff;
      return (seed >>> 16) % n;
    };
    const ids = [A, B, C];
    let state = worktreeLeaseDecider.initialState;
    let clock = 0;
    let requests = 0;
    let accepted = 0;
    const outstanding = new Set<string>(); // lease ids used so far
    for (let i = 0; i < 2000; i++) {
      clock += rnd(40);
      const now = at(clock);
      const known = [...outstanding];
      const fresh = `00000000-0000-4000-8000-${String(requests).padStart(12, '0')}`;
      const pick = rnd(4);
      const leaseId = pick === 0 && state.lock.holder ? state.lock.holder : pick === 1 || !known.length ? fresh : known[rnd(known.length)]!;
      const lease = state.leases[leaseId];
      const token = lease?.token ?? state.lastToken;
      const commands: WorktreeLeaseCommand[] = [
        request(ids[rnd(3)]!, now, { leaseId, jobId: `job-${rnd(6)}`, jobLeaseToken: 1 + rnd(3), lockTimeoutMs: rnd(3) * 30_000 }),
        { type: 'RecordWorktreePrepared', data: { leaseId, token, outcome: rnd(2) ? 'created' : 'reused', path, now } },
        { type: 'RecordWorktreeSynced', data: { leaseId, token, baseSha: sha, now } },
        { type: 'RecordWorktreeSyncFailed', data: { leaseId, token, stage: rnd(2) ? 'sync' : 'create_or_reuse', reason: 'x', fault: 'HOST', now } },
        { type: 'RenewWorktreeLease', data: { leaseId, token, now } },
        { type: 'ReleaseWorktreeLease', data: { leaseId, token, reason: 'released', removeWorktree: rnd(2) === 0, now } },
        { type: 'RecordWorktreeReleased', data: { leaseId, token, rescue: null, removed: false, now } },
        { type: 'ExpireWorktreeLease', data: { leaseId, now } },
        { type: 'TimeOutLockWaiters', data: { now } },
        { type: 'WithdrawWorktreeLeaseRequest', data: { leaseId, reason: 'job_terminal', now } },
      ];
      const command = commands[rnd(commands.length)]!;
      if (command.type === 'RequestWorktreeLease') {
        requests++;
        outstanding.add(leaseId);
      }
      let events: WorktreeLeaseEvent[];
      try {
        events = worktreeLeaseDecider.decide(command, state);
      } catch {
        continue;
      }
      accepted++;
      const before = state.lastToken;
      state = events.reduce(worktreeLeaseDecider.evolve, state);
      const active = Object.values(state.leases).filter((l) => ['creating_or_reusing', 'syncing', 'ready', 'releasing'].includes(l.status));
      const granted = events.filter((e) => e.type === 'WorktreeLockAcquired');
      expect(granted.length).toBeLessThanOrEqual(1);
      if (granted.length) expect(state.lastToken).toBe(before + 1);
      // A superseded lease may still be releasing while the lock is on its way; no two are granted.
      const holding = active.filter((l) => l.status !== 'releasing');
      expect(holding.length).toBeLessThanOrEqual(1);
      if (holding.length === 1) expect(state.lock.holder).toBe(holding[0]!.leaseId);
      if (state.lock.holder) expect(active.map((l) => l.leaseId)).toContain(state.lock.holder);
      for (const e of events) expect(contractRegistry.event('worktrees', e.type, 1)!.data.safeParse(e.data).error).toBeUndefined();
    }
    expect(accepted).toBeGreaterThan(300);
    expect(state.lastToken).toBeGreaterThan(10);
  });
});


describe('WorktreeLease events', () => {
  it('satisfy their published contracts', () => {
    const history: WorktreeLeaseEvent[] = [
      ...aReadyBWaiting,
      { type: 'WorktreeLeaseRenewed', data: { worktreeKey, leaseId: A, token: 1, expiresAt: at(700), renewedAt: at(100) } },
      releaseRequested(A, 1, at(200)),
      { type: 'WorktreeRescued', data: { worktreeKey, leaseId: A, token: 1, rescueBranch: `gantry/rescue/${worktreeKey}/20261130T060000000Z`, rescueSha: sha, rescuedAt: at(201) } },
      released(A, 1, at(201)),
      timedOut(C, at(70), at(70)),
    ];
    for (const event of history) {
      const contract = contractRegistry.event('worktrees', event.type, 1);
      expect(contract).toBeDefined();
      expect(contract!.data.safeParse(event.data).error).toBeUndefined();
    }
  });
});

describe('WorktreeLease eviction (hygiene)', () => {
  const aReleased = [requested(A, T0), acquired(A, 1, T0), created(A, 1, at(1)), synced(A, 1, at(2)), releaseRequested(A, 1, at(3)), released(A, 1, at(4))];
  const evictionRequested: WorktreeLeaseEvent = {
    type: 'WorktreeEvictionRequested',
    data: { worktreeKey, repositoryUrl, branch, reason: 'over_capacity', requestedAt: at(10) },
  };

  it('asks to remove an idle worktree', () => {
    given(aReleased).when({ type: 'EvictIdleWorktree', data: { worktreeKey, reason: 'over_capacity', now: at(10) } }).then([evictionRequested]);
  });

  it('refuses to evict a worktree that is held or waited for', () => {
    given([requested(A, T0), acquired(A, 1, T0), created(A, 1, at(1)), synced(A, 1, at(2))])
      .when({ type: 'EvictIdleWorktree', data: { worktreeKey, reason: 'over_capacity', now: at(10) } })
      .thenThrows(ErrorCode.PRECONDITION_FAILED);
  });

  it('asks nothing when the eviction is already asked for or the worktree is already gone', () => {
    given([...aReleased, evictionRequested]).when({ type: 'EvictIdleWorktree', data: { worktreeKey, reason: 'over_capacity', now: at(11) } }).thenNothingHappened();
    const gone: WorktreeLeaseEvent = { type: 'WorktreeEvicted', data: { worktreeKey, rescueBranch: null, rescueSha: null, removed: true, evictedAt: at(12) } };
    given([...aReleased, evictionRequested, gone]).when({ type: 'EvictIdleWorktree', data: { worktreeKey, reason: 'over_capacity', now: at(13) } }).thenNothingHappened();
  });

  it('records the eviction once, with the rescue that saved its changes', () => {
    const rescue = { branch: `gantry/rescue/${worktreeKey}/20261130T060011000Z`, sha };
    const state = given([...aReleased, evictionRequested])
      .when({ type: 'RecordWorktreeEvicted', data: { worktreeKey, rescue, removed: true, now: at(11) } })
      .then([{ type: 'WorktreeEvicted', data: { worktreeKey, rescueBranch: rescue.branch, rescueSha: sha, removed: true, evictedAt: at(11) } }]);
    expect(state.path).toBeNull();
    expect(state.eviction).toBeNull();
    given([...aReleased, evictionRequested, { type: 'WorktreeEvicted', data: { worktreeKey, rescueBranch: null, rescueSha: null, removed: true, evictedAt: at(11) } }])
      .when({ type: 'RecordWorktreeEvicted', data: { worktreeKey, rescue: null, removed: true, now: at(12) } })
      .thenNothingHappened();
  });

  it('a lease asked for while the eviction is under way waits in line for it, and gets the lock once the eviction is recorded', () => {
    // Granted at once, its create could run before the eviction (a retried evict, another replica's)
    // and the eviction, still asked for, would then remove the worktree under the new holder.
    const waiting = given([...aReleased, evictionRequested])
      .when(request(B, at(11)))
      .then([requested(B, at(11)), queued(B, 1, at(11))]);
    expect(waiting.lock).toEqual({ holder: null, waiters: [{ leaseId: B, deadline: at(71) }] });
    expect(pendingEffects(waiting).map((effect) => effect.type)).toEqual(['evict']);

    const evicted: WorktreeLeaseEvent = { type: 'WorktreeEvicted', data: { worktreeKey, rescueBranch: null, rescueSha: null, removed: true, evictedAt: at(12) } };
    const granted = given([...aReleased, evictionRequested, requested(B, at(11)), queued(B, 1, at(11))])
      .when({ type: 'RecordWorktreeEvicted', data: { worktreeKey, rescue: null, removed: true, now: at(12) } })
      .then([evicted, acquired(B, 2, at(12))]);
    expect(pendingEffects(granted).map((effect) => effect.type)).toEqual(['create_or_reuse']);
  });

  it('a lease asked for while the eviction is under way times out in line when it will not wait', () => {
    const req = requested(B, at(11));
    const data = { ...req.data, lockDeadline: at(11) } as typeof req.data;
    given([...aReleased, evictionRequested])
      .when(request(B, at(11), { lockTimeoutMs: 0 }))
      .then([{ type: 'WorktreeLeaseRequested', data }, timedOut(B, at(11), at(11))] as WorktreeLeaseEvent[]);
  });

  it('events satisfy their published contracts', () => {
    for (const event of [evictionRequested, { type: 'WorktreeEvicted', data: { worktreeKey, rescueBranch: null, rescueSha: null, removed: true, evictedAt: at(11) } }]) {
      expect(contractRegistry.event('worktrees', event.type, 1)!.data.safeParse(event.data).error).toBeUndefined();
    }
  });
});

