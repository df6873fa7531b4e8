import {
  deriveWorktreeKey,
  ErrorCode,
  GantryError,
  ranOutWhileServed,
  type WorktreeLeaseStatus,
  type WorktreeReleaseReason,
  type WorktreeReleasePendingCause,
} from '@gantry/contracts';
import type { WorktreeLeaseCommand } from './commands.js';
import type { WorktreeLeaseEvent } from './events.js';
import { handOver, isPast, overdueWaiters, requestLock, type LockWaiter, type WorktreeLock } from './lock.js';
import { evolve, initialState, isHolding, isTerminal, type LeaseRecord, type WorktreeLeaseState } from './state.js';

/*
 * The WorktreeLease decider (docs/worktrees.md). One stream per worktree key holds the key's lock,
 * its leases and their fencing tokens. A lease moves
 *   acquiring_lock → creating_or_reusing → syncing → ready → releasing → released
 * and ends instead in lock_timeout, sync_failed, stale_released (released because it expired or
 * by a stale reset) or withdrawn (its job ended while it still waited). A ready lease whose claim
 * ended by someone other than its holder is *release pending*: still held, until its holder
 * releases it or it expires. The git work is requested as effects (see effects.ts) and its
 * outcome comes back as a Record… command.
 */

const HAPPY_PATH: readonly WorktreeLeaseStatus[] = ['acquiring_lock', 'creating_or_reusing', 'syncing', 'ready'];

const plusMs = (iso: string, ms: number): string => new Date(Date.parse(iso) + ms).toISOString();

const refuse = (code: ErrorCode, message: string, details?: Record<string, unknown>): never => {
  throw new GantryError(code, message, details);
};

function leaseOf(state: WorktreeLeaseState, leaseId: string): LeaseRecord {
  const lease = state.leases[leaseId];
  if (!lease) refuse(ErrorCode.NOT_FOUND, `worktree lease ${leaseId} does not exist`, { leaseId });
  return lease!;
}

/** A token that is not the lease's own is stale (an older grant) or forged: refused, nothing emitted. */
function assertFence(state: WorktreeLeaseState, lease: LeaseRecord, token: number): void {
  if (lease.token === null || lease.token !== token) {
    refuse(
      ErrorCode.STALE_FENCE,
      `token ${token} is not the token of worktree lease ${lease.leaseId} (current grant on ${lease.worktreeKey} is ${state.lastToken})`,
      { leaseId: lease.leaseId, token, currentToken: state.lastToken },
    );
  }
}

/**
 * An effect's report for a lease in `expected`: the events, or nothing when the lease already got
 * past that point (a redelivered or late report), or INVALID_TRANSITION when it has not got there.
 */
function reportStage(lease: LeaseRecord, expected: WorktreeLeaseStatus, what: string): 'apply' | 'ignore' {
  if (lease.status === expected) return 'apply';
  const at = HAPPY_PATH.indexOf(lease.status);
  const want = HAPPY_PATH.indexOf(expected);
  if (at === -1 || at > want) return 'ignore';
  return refuse(
    ErrorCode.INVALID_TRANSITION,
    `cannot record ${what} for worktree lease ${lease.leaseId}: it is ${lease.status}, not ${expected}`,
    { leaseId: lease.leaseId, status: lease.status },
  );
}

/** The events that hand the lock to the next waiter after its holder let go at `now`. */
function handOverEvents(state: WorktreeLeaseState, lock: WorktreeLock, now: string): WorktreeLeaseEvent[] {
  const { next, timedOut } = handOver(lock, now);
  const events: WorktreeLeaseEvent[] = timedOut.map((w) => lockTimedOut(state, w, now));
  if (next) {
    const lease = state.leases[next.leaseId]!;
    events.push(lockAcquired(lease, state.lastToken + 1, now));
  }
  return events;
}

function lockTimedOut(state: WorktreeLeaseState, waiter: LockWaiter, now: string): WorktreeLeaseEvent {
  const worktreeKey = state.leases[waiter.leaseId]!.worktreeKey;
  return {
    type: 'WorktreeLockTimedOut',
    data: { worktreeKey, leaseId: waiter.leaseId, lockDeadline: waiter.deadline, timedOutAt: now },
  };
}

function lockAcquired(lease: LeaseRecord, token: number, now: string): WorktreeLeaseEvent {
  return {
    type: 'WorktreeLockAcquired',
    data: {
      worktreeKey: lease.worktreeKey,
      leaseId: lease.leaseId,
      token,
      jobId: lease.jobId,
      repositoryUrl: lease.repositoryUrl,
      branch: lease.branch,
      baseRef: lease.baseRef,
      acquiredAt: now,
    },
  };
}

function releaseRequested(lease: LeaseRecord, reason: WorktreeReleaseReason, removeWorktree: boolean, now: string): WorktreeLeaseEvent {
  return {
    type: 'WorktreeReleaseRequested',
    data: {
      worktreeKey: lease.worktreeKey,
      leaseId: lease.leaseId,
      token: lease.token!,
      reason,
      removeWorktree,
      branch: lease.branch,
      requestedAt: now,
    },
  };
}

/** WorktreeRescued for a rescue an effect reports, if it made one. */
function rescued(lease: LeaseRecord, token: number, rescue: { branch: string; sha: string } | null, now: string): WorktreeLeaseEvent[] {
  if (!rescue) return [];
  return [
    {
      type: 'WorktreeRescued',
      data: { worktreeKey: lease.worktreeKey, leaseId: lease.leaseId, token, rescueBranch: rescue.branch, rescueSha: rescue.sha, rescuedAt: now },
    },
  ];
}

/**
 * A lease whose claim ended by someone other than its holder. Before it is ready no grant was handed
 * out, so no agent can be working in it: a waiting request is withdrawn, one being prepared released.
 * A ready lease may have an agent still running in it: it stays held, release pending, until its
 * holder releases it (it alone knows its agent is gone) or it expires. Asked again, nothing new.
 */
function endedElsewhere(lease: LeaseRecord, cause: WorktreeReleasePendingCause, now: string): WorktreeLeaseEvent[] {
  const reason: WorktreeReleaseReason = cause === 'job_cancelled' || cause === 'job_lease_expired' ? 'job_terminal' : 'stale_reset';
  switch (lease.status) {
    case 'acquiring_lock':
      return [{ type: 'WorktreeLeaseRequestWithdrawn', data: { worktreeKey: lease.worktreeKey, leaseId: lease.leaseId, reason, withdrawnAt: now } }];
    case 'creating_or_reusing':
    case 'syncing':
      return [releaseRequested(lease, reason, false, now)];
    case 'ready':
      if (lease.releasePending) return [];
      return [{ type: 'WorktreeReleasePending', data: { worktreeKey: lease.worktreeKey, leaseId: lease.leaseId, token: lease.token!, cause, pendingSince: now } }];
    default:
      return [];
  }
}

/** Fold `events` into `state` — for decisions that emit several events building on each other. */
const fold = (state: WorktreeLeaseState, events: WorktreeLeaseEvent[]): WorktreeLeaseState => events.reduce(evolve, state);

export function decide(command: WorktreeLeaseCommand, state: WorktreeLeaseState): WorktreeLeaseEvent[] {
  if (state.closed) {
    // The lease log decides on the open epoch only; this is a guard, not a path.
    refuse(ErrorCode.INVALID_TRANSITION, `the books of epoch ${state.epoch} of worktree ${state.worktreeKey} are closed: decide on epoch ${state.epoch + 1}`);
  }
  switch (command.type) {
    case 'RequestWorktreeLease':
      return decideRequest(command.data, state);

    case 'RecordWorktreePrepared': {
      const { leaseId, token, outcome, path, rescue, now } = command.data;
      const lease = leaseOf(state, leaseId);
      assertFence(state, lease, token);
      if (reportStage(lease, 'creating_or_reusing', `the worktree ${outcome}`) === 'ignore') return [];
      const base = { worktreeKey: lease.worktreeKey, leaseId, token, path };
      return outcome === 'created'
        ? [...rescued(lease, token, rescue ?? null, now), { type: 'WorktreeCreated', data: { ...base, createdAt: now } }]
        : [...rescued(lease, token, rescue ?? null, now), { type: 'WorktreeReused', data: { ...base, reusedAt: now } }];
    }

    case 'RecordWorktreeSynced': {
      const { leaseId, token, baseSha, rescue, now } = command.data;
      const lease = leaseOf(state, leaseId);
      assertFence(state, lease, token);
      if (reportStage(lease, 'syncing', 'the sync') === 'ignore') return [];
      return [
        ...rescued(lease, token, rescue ?? null, now),
        {
          type: 'WorktreeSynced',
          data: { worktreeKey: lease.worktreeKey, leaseId, token, baseSha, expiresAt: plusMs(now, lease.leaseDurationMs), syncedAt: now },
        },
      ];
    }

    case 'RecordWorktreeSyncFailed': {
      const { leaseId, token, stage, reason, fault, now } = command.data;
      const lease = leaseOf(state, leaseId);
      assertFence(state, lease, token);
      const expected: WorktreeLeaseStatus = stage === 'create_or_reuse' ? 'creating_or_reusing' : 'syncing';
      if (reportStage(lease, expected, `a failed ${stage}`) === 'ignore') return [];
      const failed: WorktreeLeaseEvent = {
        type: 'WorktreeSyncFailed',
        data: { worktreeKey: lease.worktreeKey, leaseId, token, stage, reason, fault, failedAt: now },
      };
      const after = fold(state, [failed]);
      return [failed, ...handOverEvents(after, after.lock, now)];
    }

    case 'RenewWorktreeLease': {
      const { leaseId, token, leaseDurationMs, now } = command.data;
      const lease = leaseOf(state, leaseId);
      assertFence(state, lease, token);
      if (!isHolding(lease)) {
        refuse(ErrorCode.STALE_FENCE, `worktree lease ${leaseId} is ${lease.status}: it can no longer be renewed`, {
          leaseId,
          status: lease.status,
        });
      }
      if (lease.expiresAt && isPast(lease.expiresAt, now)) {
        refuse(ErrorCode.STALE_FENCE, `worktree lease ${leaseId} expired at ${lease.expiresAt}`, { leaseId, expiresAt: lease.expiresAt });
      }
      return [
        {
          type: 'WorktreeLeaseRenewed',
          data: {
            worktreeKey: lease.worktreeKey,
            leaseId,
            token,
            expiresAt: plusMs(now, leaseDurationMs ?? lease.leaseDurationMs),
            renewedAt: now,
          },
        },
      ];
    }

    case 'AwaitHolderRelease': {
      const { leaseId, cause, now } = command.data;
      const lease = leaseOf(state, leaseId);
      return endedElsewhere(lease, cause, now);
    }

    case 'ReleaseWorktreeLease': {
      const { leaseId, token, reason, removeWorktree, now } = command.data;
      const lease = leaseOf(state, leaseId);
      if (lease.status === 'acquiring_lock') {
        refuse(ErrorCode.INVALID_TRANSITION, `worktree lease ${leaseId} still waits for the lock: withdraw the request instead`, {
          leaseId,
        });
      }
      assertFence(state, lease, token);
      // A release asked again while it runs is the same release; a lease that has ended is stale.
      if (lease.status === 'releasing') return [];
      if (!isHolding(lease)) {
        refuse(ErrorCode.STALE_FENCE, `worktree lease ${leaseId} has already ended (${lease.status})`, { leaseId, status: lease.status });
      }
      return [releaseRequested(lease, reason, removeWorktree, now)];
    }

    case 'RecordWorktreeReleased': {
      const { leaseId, token, rescue, removed, now } = command.data;
      const lease = leaseOf(state, leaseId);
      assertFence(state, lease, token);
      if (lease.status !== 'releasing') {
        if (isTerminal(lease)) return [];
        return refuse(ErrorCode.INVALID_TRANSITION, `worktree lease ${leaseId} is ${lease.status}, not releasing`, {
          leaseId,
          status: lease.status,
        });
      }
      const events: WorktreeLeaseEvent[] = rescued(lease, token, rescue, now);
      events.push({
        type: 'WorktreeReleased',
        data: { worktreeKey: lease.worktreeKey, leaseId, token, reason: lease.releaseReason!, removed, releasedAt: now },
      });
      const after = fold(state, events);
      return [...events, ...handOverEvents(after, after.lock, now)];
    }

    case 'ExpireWorktreeLease': {
      const { leaseId, now } = command.data;
      const lease = leaseOf(state, leaseId);
      // A timer that fires for a lease already let go, or since renewed, has nothing to do. A lease
      // still being prepared does not expire: its holder has no grant to renew yet.
      if (lease.status !== 'ready' || !lease.expiresAt || !isPast(lease.expiresAt, now)) return [];
      return [
        {
          type: 'WorktreeLeaseExpired',
          data: { worktreeKey: lease.worktreeKey, leaseId, token: lease.token!, expiresAt: lease.expiresAt, expiredAt: now },
        },
        releaseRequested(lease, 'expired', false, now),
      ];
    }

    case 'ResumeWorktreeLeases': {
      const { now, after, lastSweptAt } = command.data;
      const why = after === 'bus_loss' ? { resumedAfterBusLoss: true as const } : { resumedAtStart: true as const };
      return Object.values(state.leases).flatMap((lease): WorktreeLeaseEvent[] => {
        if (!isHolding(lease) || !lease.expiresAt) return [];
        // Ran out while a replica still served (a sweep came after its end): its holder could have
        // renewed it, so it is the sweep's to expire (docs/worktrees.md, "When a lease ends").
        if (ranOutWhileServed(lease.expiresAt, now, lastSweptAt)) return [];
        const expiresAt = plusMs(now, lease.leaseDurationMs);
        if (Date.parse(expiresAt) <= Date.parse(lease.expiresAt)) return [];
        return [{ type: 'WorktreeLeaseRenewed', data: { worktreeKey: lease.worktreeKey, leaseId: lease.leaseId, token: lease.token!, expiresAt, renewedAt: now, ...why } }];
      });
    }

    case 'TimeOutLockWaiters': {
      const { now } = command.data;
      return overdueWaiters(state.lock, now).map((w) => lockTimedOut(state, w, now));
    }

    case 'WithdrawWorktreeLeaseRequest': {
      const { leaseId, reason, now } = command.data;
      const lease = leaseOf(state, leaseId);
      if (isTerminal(lease)) return [];
      if (lease.status !== 'acquiring_lock') {
        refuse(ErrorCode.INVALID_TRANSITION, `worktree lease ${leaseId} holds the lock: release it instead of withdrawing`, {
          leaseId,
          status: lease.status,
        });
      }
      return [{ type: 'WorktreeLeaseRequestWithdrawn', data: { worktreeKey: lease.worktreeKey, leaseId, reason, withdrawnAt: now } }];
    }

    case 'EvictIdleWorktree': {
      const { worktreeKey, reason, now } = command.data;
      if (state.worktreeKey !== worktreeKey) {
        return refuse(ErrorCode.NOT_FOUND, `worktree key ${worktreeKey} has no leases here`, { worktreeKey });
      }
      const busy = state.lock.holder !== null || state.lock.waiters.length > 0 || Object.values(state.leases).some((l) => l.status === 'releasing');
      if (busy) {
        return refuse(ErrorCode.PRECONDITION_FAILED, `worktree ${worktreeKey} is in use: only an idle worktree is evicted`, { worktreeKey });
      }
      // Already gone, or already being evicted: nothing more to ask for.
      if (state.path === null || state.eviction !== null) return [];
      return [
        {
          type: 'WorktreeEvictionRequested',
          data: { worktreeKey, repositoryUrl: state.repositoryUrl!, branch: state.branch!, reason, requestedAt: now },
        },
      ];
    }

    case 'RecordWorktreeEvicted': {
      const { worktreeKey, rescue, removed, now } = command.data;
      if (state.eviction === null || state.worktreeKey !== worktreeKey) return [];
      const evicted: WorktreeLeaseEvent = {
        type: 'WorktreeEvicted',
        data: { worktreeKey, rescueBranch: rescue?.branch ?? null, rescueSha: rescue?.sha ?? null, removed, evictedAt: now },
      };
      // The acquirers that came while it ran waited in line for it: the first of them gets the lock.
      // (An older log may hold a lease granted during an eviction: that holder keeps it.)
      const after = fold(state, [evicted]);
      return after.lock.holder === null ? [evicted, ...handOverEvents(after, after.lock, now)] : [evicted];
    }

    case 'CloseBooks': {
      const { worktreeKey, now } = command.data;
      if (state.worktreeKey !== worktreeKey) return refuse(ErrorCode.NOT_FOUND, `worktree key ${worktreeKey} has no leases here`, { worktreeKey });
      return [{ type: 'WorktreeBooksClosed', data: { worktreeKey, epoch: state.epoch, nextEpoch: state.epoch + 1, closedAt: now } }];
    }

    default: {
      const unknown: never = command;
      return refuse(ErrorCode.INVALID_COMMAND, `unknown worktree lease command ${(unknown as { type: string }).type}`);
    }
  }
}

function decideRequest(
  data: Extract<WorktreeLeaseCommand, { type: 'RequestWorktreeLease' }>['data'],
  state: WorktreeLeaseState,
): WorktreeLeaseEvent[] {
  const { worktreeKey, leaseId, jobId, jobLeaseToken, repositoryUrl, branch, baseRef, leaseDurationMs, lockTimeoutMs, now } = data;

  const expectedKey = deriveWorktreeKey(repositoryUrl, branch);
  if (worktreeKey !== expectedKey) {
    refuse(ErrorCode.INVALID_COMMAND, `worktree key ${worktreeKey} does not belong to ${branch} of that repository (expected ${expectedKey})`, {
      worktreeKey,
      expectedKey,
    });
  }
  if (state.worktreeKey !== null && state.worktreeKey !== worktreeKey) {
    refuse(ErrorCode.INVALID_COMMAND, `this stream belongs to worktree key ${state.worktreeKey}, not ${worktreeKey}`);
  }

  const existing = state.leases[leaseId];
  if (existing) {
    const same =
      existing.jobId === jobId &&
      existing.jobLeaseToken === jobLeaseToken &&
      existing.repositoryUrl === repositoryUrl &&
      existing.branch === branch &&
      existing.baseRef === baseRef &&
      existing.leaseDurationMs === leaseDurationMs;
    if (same) return [];
    return refuse(ErrorCode.IDEMPOTENCY_CONFLICT, `worktree lease ${leaseId} was already requested with different content`, { leaseId });
  }

  const events: WorktreeLeaseEvent[] = [];
  // A job keeps at most one live lease per worktree. A newer claim of the job supersedes the older
  // claim's lease (that claim is gone: the job was requeued) — a ready one waits for its holder's
  // release, and the new request queues behind it; an older claim is fenced off.
  for (const other of Object.values(state.leases)) {
    if (other.jobId !== jobId || isTerminal(other) || other.status === 'releasing') continue;
    if (other.jobLeaseToken > jobLeaseToken) {
      refuse(ErrorCode.STALE_FENCE, `job ${jobId} claim ${jobLeaseToken} is older than claim ${other.jobLeaseToken}, which has lease ${other.leaseId}`, {
        jobId,
        jobLeaseToken,
        currentJobLeaseToken: other.jobLeaseToken,
      });
    }
    if (other.jobLeaseToken === jobLeaseToken) {
      refuse(ErrorCode.ALREADY_CLAIMED, `job ${jobId} claim ${jobLeaseToken} already has worktree lease ${other.leaseId} (${other.status})`, {
        leaseId: other.leaseId,
        status: other.status,
      });
    }
    events.push(...endedElsewhere(other, 'claim_superseded', now));
  }

  const lockDeadline = plusMs(now, lockTimeoutMs);
  const requested: WorktreeLeaseEvent = {
    type: 'WorktreeLeaseRequested',
    data: { worktreeKey, leaseId, jobId, jobLeaseToken, repositoryUrl, branch, baseRef, leaseDurationMs, lockDeadline, requestedAt: now },
  };
  events.push(requested);
  const after = fold(state, events);
  // An eviction under way (asked for while the key was idle) has the worktree until it is recorded:
  // granted now, the lease's create could run before it — a retried evict, another replica's — and
  // the eviction, still asked for, would then remove the worktree under its new holder.
  const outcome = requestLock(after.lock, { leaseId, deadline: lockDeadline }, now, after.eviction !== null);
  switch (outcome.kind) {
    case 'granted':
      events.push(lockAcquired(after.leases[leaseId]!, after.lastToken + 1, now));
      break;
    case 'queued':
      events.push({ type: 'WorktreeLockQueued', data: { worktreeKey, leaseId, position: outcome.position, lockDeadline, queuedAt: now } });
      break;
    case 'timed_out':
      events.push({ type: 'WorktreeLockTimedOut', data: { worktreeKey, leaseId, lockDeadline, timedOutAt: now } });
      break;
    default: {
      const unknown: never = outcome;
      throw new Error(`unknown lock outcome ${JSON.stringify(unknown)}`);
    }
  }
  return events;
}

/** The decider in the shape of `Decider` from @gantry/eventstore (`decideWithin`, `handleWithDecider`). */
export const worktreeLeaseDecider = { decide, evolve, initialState };
