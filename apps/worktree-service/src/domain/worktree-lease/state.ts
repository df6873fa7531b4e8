import type { WorktreeLeaseStatus, WorktreeReleasePendingCause, WorktreeReleaseReason } from '@gantry/contracts';
import type { WorktreeLeaseEvent } from './events.js';
import { enqueue, freeLock, grant, releaseHolder, withoutWaiter, type WorktreeLock } from './lock.js';

export interface LeaseRecord {
  readonly leaseId: string;
  readonly worktreeKey: string;
  readonly jobId: string;
  readonly jobLeaseToken: number;
  readonly repositoryUrl: string;
  readonly branch: string;
  readonly baseRef: string;
  readonly leaseDurationMs: number;
  readonly lockDeadline: string;
  readonly requestedAt: string;
  readonly status: WorktreeLeaseStatus;
  /** The fencing token, from the moment the lock is granted. */
  readonly token: number | null;
  readonly path: string | null;
  readonly baseSha: string | null;
  readonly expiresAt: string | null;
  readonly releaseReason: WorktreeReleaseReason | null;
  readonly removeWorktree: boolean;
  /** Set while a ready lease waits for its holder's release (its claim ended elsewhere). */
  readonly releasePending: { readonly cause: WorktreeReleasePendingCause; readonly since: string } | null;
}

export interface WorktreeLeaseState {
  readonly worktreeKey: string | null;
  /** Which stream of the key this is: 0, then one more each time the books are closed. */
  readonly epoch: number;
  /** The books of this epoch are closed: the key goes on in the next epoch's stream. */
  readonly closed: boolean;
  /** The repository and branch of the key (every lease of a key has the same), once a lease was asked for. */
  readonly repositoryUrl: string | null;
  readonly branch: string | null;
  /** The token of the latest grant on this key; the next grant gets one more. */
  readonly lastToken: number;
  readonly lock: WorktreeLock;
  readonly leases: Readonly<Record<string, LeaseRecord>>;
  /** Where the worktree of this key was last created or reused. */
  readonly path: string | null;
  /** An eviction (hygiene) that was requested and not yet reported. */
  readonly eviction: { readonly repositoryUrl: string; readonly branch: string; readonly requestedAt: string } | null;
}

/** The state of a worktree key nobody asked for yet (immutable: evolve always returns a new state). */
export const initialState: WorktreeLeaseState = {
  worktreeKey: null,
  epoch: 0,
  closed: false,
  repositoryUrl: null,
  branch: null,
  lastToken: 0,
  lock: freeLock,
  leases: {},
  path: null,
  eviction: null,
};

const HOLDING: readonly WorktreeLeaseStatus[] = ['creating_or_reusing', 'syncing', 'ready'];
const TERMINAL: readonly WorktreeLeaseStatus[] = ['released', 'lock_timeout', 'sync_failed', 'stale_released', 'withdrawn'];

export const isHolding = (lease: LeaseRecord): boolean => HOLDING.includes(lease.status);
export const isTerminal = (lease: LeaseRecord): boolean => TERMINAL.includes(lease.status);

/** Nobody holds, waits for or releases the key's worktree, and no eviction of it is under way. */
export function isIdle(state: WorktreeLeaseState): boolean {
  return (
    state.lock.holder === null &&
    state.lock.waiters.length === 0 &&
    state.eviction === null &&
    !Object.values(state.leases).some((l) => l.status === 'releasing')
  );
}
export function currentHolder(state: WorktreeLeaseState): LeaseRecord | null {
  return state.lock.holder ? (state.leases[state.lock.holder] ?? null) : null;
}

function updateLease(state: WorktreeLeaseState, leaseId: string, change: Partial<LeaseRecord>): WorktreeLeaseState {
  const lease = state.leases[leaseId];
  if (!lease) return state;
  return { ...state, leases: { ...state.leases, [leaseId]: { ...lease, ...change } } };
}

export function evolve(state: WorktreeLeaseState, event: WorktreeLeaseEvent): WorktreeLeaseState {
  switch (event.type) {
    case 'WorktreeLeaseRequested': {
      const d = event.data;
      const lease: LeaseRecord = {
        leaseId: d.leaseId,
        worktreeKey: d.worktreeKey,
        jobId: d.jobId,
        jobLeaseToken: d.jobLeaseToken,
        repositoryUrl: d.repositoryUrl,
        branch: d.branch,
        baseRef: d.baseRef,
        leaseDurationMs: d.leaseDurationMs,
        lockDeadline: d.lockDeadline,
        requestedAt: d.requestedAt,
        status: 'acquiring_lock',
        token: null,
        path: null,
        baseSha: null,
        expiresAt: null,
        releaseReason: null,
        removeWorktree: false,
        releasePending: null,
      };
      return { ...state, worktreeKey: d.worktreeKey, repositoryUrl: d.repositoryUrl, branch: d.branch, leases: { ...state.leases, [d.leaseId]: lease } };
    }
    case 'WorktreeLockQueued':
      return { ...state, lock: enqueue(state.lock, { leaseId: event.data.leaseId, deadline: event.data.lockDeadline }) };
    case 'WorktreeLockAcquired': {
      const d = event.data;
      // Its expiry starts when it is ready: until then the service works on it and nobody can renew it
      // (older logs carry an expiresAt here, which is not obeyed).
      const next = updateLease(state, d.leaseId, { status: 'creating_or_reusing', token: d.token, expiresAt: null });
      return { ...next, lastToken: d.token, lock: grant(state.lock, d.leaseId) };
    }
    case 'WorktreeLockTimedOut':
      return { ...updateLease(state, event.data.leaseId, { status: 'lock_timeout' }), lock: withoutWaiter(state.lock, event.data.leaseId) };
    case 'WorktreeLeaseRequestWithdrawn':
      return { ...updateLease(state, event.data.leaseId, { status: 'withdrawn' }), lock: withoutWaiter(state.lock, event.data.leaseId) };
    case 'WorktreeCreated':
    case 'WorktreeReused':
      return { ...updateLease(state, event.data.leaseId, { status: 'syncing', path: event.data.path }), path: event.data.path };
    case 'WorktreeSynced':
      return updateLease(state, event.data.leaseId, { status: 'ready', baseSha: event.data.baseSha, expiresAt: event.data.expiresAt });
    case 'WorktreeSyncFailed':
      return { ...updateLease(state, event.data.leaseId, { status: 'sync_failed' }), lock: releaseHolder(state.lock, event.data.leaseId) };
    case 'WorktreeLeaseRenewed':
      return updateLease(state, event.data.leaseId, { expiresAt: event.data.expiresAt });
    case 'WorktreeLeaseExpired':
      return state;
    case 'WorktreeReleasePending':
      return updateLease(state, event.data.leaseId, { releasePending: { cause: event.data.cause, since: event.data.pendingSince } });
    case 'WorktreeReleaseRequested':
      return updateLease(state, event.data.leaseId, {
        status: 'releasing',
        releaseReason: event.data.reason,
        removeWorktree: event.data.removeWorktree,
      });
    case 'WorktreeRescued':
      return state;
    case 'WorktreeReleased': {
      const stale = event.data.reason === 'expired' || event.data.reason === 'stale_reset';
      const next = updateLease(state, event.data.leaseId, { status: stale ? 'stale_released' : 'released' });
      return { ...next, lock: releaseHolder(state.lock, event.data.leaseId), path: event.data.removed ? null : state.path };
    }
    case 'WorktreeEvictionRequested': {
      const { repositoryUrl, branch, requestedAt } = event.data;
      return { ...state, eviction: { repositoryUrl, branch, requestedAt } };
    }
    case 'WorktreeEvicted':
      return { ...state, eviction: null, path: event.data.removed ? null : state.path };
    case 'WorktreeBooksClosed':
      return { ...state, closed: true };
    case 'WorktreeBooksOpened': {
      const d = event.data;
      return {
        ...initialState,
        worktreeKey: d.worktreeKey,
        epoch: d.epoch,
        lastToken: d.lastToken,
        path: d.path,
        repositoryUrl: d.repositoryUrl,
        branch: d.branch,
        lock: d.lock ? { holder: d.lock.holder, waiters: d.lock.waiters } : freeLock,
        leases: Object.fromEntries((d.leases ?? []).map((lease) => [lease.leaseId, lease])),
        eviction: d.eviction ?? null,
      };
    }
    default: {
      const unknown: never = event;
      throw new Error(`unknown worktree lease event ${(unknown as { type: string }).type}`);
    }
  }
}
