import { pendingEffects, type WorktreeEffect } from './worktree-lease/effects.js';
import { currentHolder, isIdle, type WorktreeLeaseState } from './worktree-lease/state.js';

/*
 * At startup the service compares its leases (the WorktreeLease streams, replayed) with what is
 * really on disk (`git worktree list` of every shared clone, and the worktrees directory) and plans
 * the actions that make them agree: no orphan directories, no stuck locks, no lease pointing at a
 * missing worktree. Pure: the application runs the actions.
 */

export interface DiskWorktree {
  readonly worktreeKey: string;
  /** Registered by git, but its directory is gone. */
  readonly prunable: boolean;
}

export interface DiskInventory {
  readonly worktrees: readonly DiskWorktree[];
  /** Names of directories under `<root>/worktrees` that no shared clone knows as a worktree. */
  readonly orphanDirectories: readonly string[];
}

export type ReconciliationAction =
  /** A directory git does not know: moved aside (never deleted), so the key can be created again. */
  | { readonly type: 'quarantine_orphan'; readonly directory: string }
  /** git knows a worktree whose directory is gone: `git worktree prune`. */
  | { readonly type: 'prune'; readonly worktreeKey: string }
  /** An effect that was requested and may not have completed: run it again (each is idempotent). */
  | { readonly type: 'run_effect'; readonly effect: WorktreeEffect }
  /** An idle worktree whose directory is gone: complete its record with an eviction (EvictIdleWorktree, reason missing). */
  | { readonly type: 'forget_missing_worktree'; readonly worktreeKey: string }
  /** A ready lease whose worktree is gone: release it as stale (ReleaseWorktreeLease, reason stale_reset). */
  | {
      readonly type: 'release_stale_lease';
      readonly worktreeKey: string;
      readonly leaseId: string;
      readonly token: number;
      readonly removeWorktree: true;
    };

/** The actions, in the order to run them: disk clean-up first, then the effects, then the releases. */
export function planReconciliation(streams: readonly WorktreeLeaseState[], disk: DiskInventory): ReconciliationAction[] {
  const present = new Set(disk.worktrees.filter((w) => !w.prunable).map((w) => w.worktreeKey));
  const actions: ReconciliationAction[] = [];

  for (const directory of [...disk.orphanDirectories].sort()) actions.push({ type: 'quarantine_orphan', directory });
  for (const worktree of disk.worktrees) if (worktree.prunable) actions.push({ type: 'prune', worktreeKey: worktree.worktreeKey });

  const releases: ReconciliationAction[] = [];
  for (const state of streams) {
    for (const effect of pendingEffects(state)) actions.push({ type: 'run_effect', effect });
    const holder = currentHolder(state);
    if (holder && holder.status === 'ready' && !present.has(holder.worktreeKey)) {
      releases.push({ type: 'release_stale_lease', worktreeKey: holder.worktreeKey, leaseId: holder.leaseId, token: holder.token!, removeWorktree: true });
    }
    // Its record says a worktree is there, the disk says it is not (a removal cut short by a crash,
    // or a directory deleted by hand): the record must follow, or the cap counts it for ever.
    if (state.worktreeKey !== null && state.path !== null && isIdle(state) && !present.has(state.worktreeKey)) {
      releases.push({ type: 'forget_missing_worktree', worktreeKey: state.worktreeKey });
    }
  }
  return [...actions, ...releases];
}
