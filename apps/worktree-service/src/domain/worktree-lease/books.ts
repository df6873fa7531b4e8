import { ErrorCode, GantryError, type DataOf, type WorktreeBooksOpened } from '@gantry/contracts';
import type { WorktreeLeaseEvent } from './events.js';
import { isTerminal, type WorktreeLeaseState } from './state.js';

/*
 * A worktree key's log is kept in epochs (docs/worktrees.md): CloseBooks ends the open epoch's
 * stream, and the next epoch's stream opens with what the key's past leaves to its future.
 */

/**
 * The first event of the next epoch's stream, for a state whose books were just closed: what the
 * key's past leaves to its future — the last fencing token (so tokens keep growing across epochs),
 * where the worktree is, the key's repository and branch, and its lock, the leases that have not
 * ended and an eviction under way, unchanged. Ended leases stay behind.
 */
export function openingOf(state: WorktreeLeaseState, now: string): WorktreeLeaseEvent {
  if (!state.closed || state.worktreeKey === null || state.repositoryUrl === null || state.branch === null) {
    throw new GantryError(ErrorCode.INVALID_TRANSITION, 'only a closed stream of a key that had leases opens a next epoch');
  }
  return {
    type: 'WorktreeBooksOpened',
    data: {
      worktreeKey: state.worktreeKey,
      epoch: state.epoch + 1,
      lastToken: state.lastToken,
      path: state.path,
      repositoryUrl: state.repositoryUrl,
      branch: state.branch,
      lock: { holder: state.lock.holder, waiters: [...state.lock.waiters] },
      leases: Object.values(state.leases).filter((lease) => !isTerminal(lease)) as CarriedLease[],
      eviction: state.eviction,
      openedAt: now,
    },
  };
}

type CarriedLease = NonNullable<DataOf<typeof WorktreeBooksOpened>['leases']>[number];
