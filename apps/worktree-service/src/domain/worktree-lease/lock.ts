/*
 * The lock of one worktree key, as a pure value: at most one holder, and the acquirers that wait
 * for it in arrival order, each with the moment it stops waiting. The lock lives in the service's
 * log (it is folded from the WorktreeLease events), never in a file inside the worktree.
 */

export interface LockWaiter {
  readonly leaseId: string;
  /** ISO time after which this acquirer no longer waits (it gets LOCK_TIMEOUT). */
  readonly deadline: string;
}

export interface WorktreeLock {
  readonly holder: string | null;
  readonly waiters: readonly LockWaiter[];
}

export const freeLock: WorktreeLock = { holder: null, waiters: [] };

/** A deadline that has come is past: a waiter whose deadline equals now no longer waits. */
export function isPast(deadline: string, now: string): boolean {
  return Date.parse(now) >= Date.parse(deadline);
}

export type LockRequestOutcome =
  | { readonly kind: 'granted' }
  | { readonly kind: 'queued'; readonly position: number }
  | { readonly kind: 'timed_out' };

/**
 * What happens to a new acquirer: the lock if it is free, a place in line, or an immediate timeout.
 * `reserved`: nobody holds the lock, but the worktree is not free either (an eviction of it is under
 * way): the acquirer waits in line as behind a holder.
 */
export function requestLock(lock: WorktreeLock, waiter: LockWaiter, now: string, reserved = false): LockRequestOutcome {
  if (!reserved && lock.holder === null && lock.waiters.length === 0) return { kind: 'granted' };
  if (isPast(waiter.deadline, now)) return { kind: 'timed_out' };
  return { kind: 'queued', position: lock.waiters.filter((w) => !isPast(w.deadline, now)).length + 1 };
}

/**
 * Who gets the lock when its holder lets go at `now`: the first waiter still within its deadline.
 * The waiters in front of it whose deadline has passed time out on the way.
 */
export function handOver(lock: WorktreeLock, now: string): { next: LockWaiter | null; timedOut: LockWaiter[] } {
  const timedOut: LockWaiter[] = [];
  for (const waiter of lock.waiters) {
    if (!isPast(waiter.deadline, now)) return { next: waiter, timedOut };
    timedOut.push(waiter);
  }
  return { next: null, timedOut };
}

/** The waiters whose deadline has passed at `now`, in line order. */
export function overdueWaiters(lock: WorktreeLock, now: string): LockWaiter[] {
  return lock.waiters.filter((w) => isPast(w.deadline, now));
}

export function enqueue(lock: WorktreeLock, waiter: LockWaiter): WorktreeLock {
  return { ...lock, waiters: [...lock.waiters, waiter] };
}

export function withoutWaiter(lock: WorktreeLock, leaseId: string): WorktreeLock {
  return { ...lock, waiters: lock.waiters.filter((w) => w.leaseId !== leaseId) };
}

/** The lock goes to `leaseId` (which leaves the line if it was waiting). */
export function grant(lock: WorktreeLock, leaseId: string): WorktreeLock {
  return { holder: leaseId, waiters: lock.waiters.filter((w) => w.leaseId !== leaseId) };
}

export function releaseHolder(lock: WorktreeLock, leaseId: string): WorktreeLock {
  return lock.holder === leaseId ? { ...lock, holder: null } : lock;
}
