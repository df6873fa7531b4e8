import type { WorktreeReleaseReason } from '@gantry/contracts';
import type { WorktreeLeaseEvent } from './events.js';
import type { LeaseRecord, WorktreeLeaseState } from './state.js';

/*
 * The git work a WorktreeLease asks for, as data. The effect processor runs each one idempotently
 * (looking at the worktree on disk first) and reports the outcome as a Record… command carrying
 * the same lease id and token; a report for a lease that moved on is refused with STALE_FENCE or
 * changes nothing.
 */

interface LeaseEffectBase {
  readonly worktreeKey: string;
  readonly leaseId: string;
  readonly token: number;
  readonly repositoryUrl: string;
  readonly branch: string;
}

export type WorktreeEffect =
  /** Ensure the shared clone, then `git worktree add` the key's worktree, or reuse a clean one. → RecordWorktreePrepared */
  | (LeaseEffectBase & { readonly type: 'create_or_reuse'; readonly baseRef: string })
  /** Fetch, then move the branch to the base ref without losing local commits. → RecordWorktreeSynced / RecordWorktreeSyncFailed */
  | (LeaseEffectBase & { readonly type: 'sync'; readonly baseRef: string })
  /** Commit a dirty worktree's changes to a rescue branch; keep the (now clean) worktree. → RecordWorktreeReleased */
  | (LeaseEffectBase & { readonly type: 'rescue'; readonly reason: WorktreeReleaseReason })
  /** Rescue as above, then `git worktree remove` + `git worktree prune`. → RecordWorktreeReleased */
  | (LeaseEffectBase & { readonly type: 'rescue_and_remove'; readonly reason: WorktreeReleaseReason })
  /** Hygiene: rescue an idle worktree's changes, then remove it; `requestedAt` names the eviction. → RecordWorktreeEvicted */
  | { readonly type: 'evict'; readonly worktreeKey: string; readonly repositoryUrl: string; readonly branch: string; readonly requestedAt: string };

export type WorktreeEffectType = WorktreeEffect['type'];

function base(lease: LeaseRecord): LeaseEffectBase {
  return {
    worktreeKey: lease.worktreeKey,
    leaseId: lease.leaseId,
    token: lease.token!,
    repositoryUrl: lease.repositoryUrl,
    branch: lease.branch,
  };
}

/** The effect a lease in its current status waits for, if any. */
export function effectFor(lease: LeaseRecord): WorktreeEffect | null {
  switch (lease.status) {
    case 'creating_or_reusing':
      return { ...base(lease), type: 'create_or_reuse', baseRef: lease.baseRef };
    case 'syncing':
      return { ...base(lease), type: 'sync', baseRef: lease.baseRef };
    case 'releasing':
      return { ...base(lease), type: lease.removeWorktree ? 'rescue_and_remove' : 'rescue', reason: lease.releaseReason! };
    case 'acquiring_lock':
    case 'ready':
    case 'released':
    case 'lock_timeout':
    case 'sync_failed':
    case 'stale_released':
    case 'withdrawn':
      return null;
    default: {
      const unknown: never = lease.status;
      throw new Error(`unknown lease status ${String(unknown)}`);
    }
  }
}

/**
 * Every effect the stream waits for: what a restarted service re-runs. At most one lease of a key
 * holds the lock, but a superseded lease may still be releasing beside it.
 */
export function pendingEffects(state: WorktreeLeaseState): WorktreeEffect[] {
  const leaseEffects = Object.values(state.leases)
    .map(effectFor)
    .filter((effect): effect is WorktreeEffect => effect !== null);
  // An eviction was asked for before any lease that came after it: it runs first.
  const eviction = evictionEffect(state);
  return eviction ? [eviction, ...leaseEffects] : leaseEffects;
}

function evictionEffect(state: WorktreeLeaseState): WorktreeEffect | null {
  if (!state.eviction || !state.worktreeKey) return null;
  const { repositoryUrl, branch, requestedAt } = state.eviction;
  return { type: 'evict', worktreeKey: state.worktreeKey, repositoryUrl, branch, requestedAt };
}

/** Identifies an effect within its worktree key: the same identity means the same work. */
export function effectIdentity(effect: WorktreeEffect): string {
  return effect.type === 'evict' ? `${effect.worktreeKey}:evict` : `${effect.worktreeKey}:${effect.leaseId}:${effect.token}:${effect.type}`;
}

/** The effects requested by freshly appended `events`, read from the state after them. */
export function effectsRequestedBy(stateAfter: WorktreeLeaseState, events: readonly WorktreeLeaseEvent[]): WorktreeEffect[] {
  const effects: WorktreeEffect[] = [];
  for (const event of events) {
    switch (event.type) {
      case 'WorktreeLockAcquired':
      case 'WorktreeCreated':
      case 'WorktreeReused':
      case 'WorktreeReleaseRequested': {
        const lease = stateAfter.leases[event.data.leaseId];
        const effect = lease && lease.token === event.data.token ? effectFor(lease) : null;
        if (effect && !effects.some((e) => effectIdentity(e) === effectIdentity(effect))) effects.push(effect);
        break;
      }
      case 'WorktreeEvictionRequested': {
        const effect = evictionEffect(stateAfter);
        if (effect) effects.push(effect);
        break;
      }
      default:
        break;
    }
  }
  return effects;
}

export type WorktreeDeadline =
  | { readonly kind: 'lease_expiry'; readonly leaseId: string; readonly at: string }
  | { readonly kind: 'lock_deadline'; readonly leaseId: string; readonly at: string };

/**
 * The moments at which the stream needs a command from the scheduler: ExpireWorktreeLease at the
 * expiry of a ready lease (one being prepared does not expire), TimeOutLockWaiters at a waiter's
 * deadline. Earliest first.
 */
export function upcomingDeadlines(state: WorktreeLeaseState): WorktreeDeadline[] {
  const deadlines: WorktreeDeadline[] = [];
  for (const lease of Object.values(state.leases)) {
    if (lease.status === 'ready' && lease.expiresAt) {
      deadlines.push({ kind: 'lease_expiry', leaseId: lease.leaseId, at: lease.expiresAt });
    }
  }
  for (const waiter of state.lock.waiters) deadlines.push({ kind: 'lock_deadline', leaseId: waiter.leaseId, at: waiter.deadline });
  return deadlines.sort((a, b) => Date.parse(a.at) - Date.parse(b.at));
}
