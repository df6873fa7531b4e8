import type { DataOf, WorktreeEvictionRequested, WorktreePreparationFault, WorktreeReleasePendingCause, WorktreeReleaseReason } from '@gantry/contracts';

/** Every command carries `now` (ISO): the decider never reads a clock. */
export type WorktreeLeaseCommand =
  | {
      readonly type: 'RequestWorktreeLease';
      readonly data: {
        worktreeKey: string;
        leaseId: string;
        jobId: string;
        jobLeaseToken: number;
        repositoryUrl: string;
        branch: string;
        baseRef: string;
        leaseDurationMs: number;
        lockTimeoutMs: number;
        now: string;
      };
    }
  | {
      readonly type: 'RecordWorktreePrepared';
      readonly data: {
        leaseId: string;
        token: number;
        outcome: 'created' | 'reused';
        path: string;
        /** A reused worktree left dirty (by a crash) was rescued before it was handed out. */
        rescue?: { branch: string; sha: string } | null;
        now: string;
      };
    }
  | {
      readonly type: 'RecordWorktreeSynced';
      readonly data: {
        leaseId: string;
        token: number;
        baseSha: string;
        /** Local commits of an earlier holder that the origin's state lacks, kept on a rescue branch before the branch was reset. */
        rescue?: { branch: string; sha: string } | null;
        now: string;
      };
    }
  | {
      readonly type: 'RecordWorktreeSyncFailed';
      readonly data: { leaseId: string; token: number; stage: 'create_or_reuse' | 'sync'; reason: string; fault: WorktreePreparationFault; now: string };
    }
  | {
      readonly type: 'RenewWorktreeLease';
      readonly data: { leaseId: string; token: number; leaseDurationMs?: number; now: string };
    }
  /**
   * The lease's claim ended by someone other than its holder (a cancel, the job's lease expiring, a
   * newer claim): a lease not handed out yet ends at once; a ready one waits for its holder.
   */
  | { readonly type: 'AwaitHolderRelease'; readonly data: { leaseId: string; cause: WorktreeReleasePendingCause; now: string } }
  | {
      readonly type: 'ReleaseWorktreeLease';
      readonly data: { leaseId: string; token: number; reason: WorktreeReleaseReason; removeWorktree: boolean; now: string };
    }
  | {
      readonly type: 'RecordWorktreeReleased';
      readonly data: {
        leaseId: string;
        token: number;
        rescue: { branch: string; sha: string } | null;
        removed: boolean;
        now: string;
      };
    }
  | { readonly type: 'ExpireWorktreeLease'; readonly data: { leaseId: string; now: string } }
  /**
   * At the service's start, before it sweeps: every lease held on the key runs as long again from now,
   * since no holder could renew it while the service was down (docs/worktrees.md, "When a lease ends").
   */
  /** `after`: what kept the holders from renewing — no worktree service ran (`start`), or this one had lost NATS (`bus_loss`). */
  /**
   * `lastSweptAt`: the latest lease sweep any replica made with its bus up — when serving stopped, as far
   * as the service can tell (null: none recorded). A lease that ran out before it is left to the sweep.
   */
  | { readonly type: 'ResumeWorktreeLeases'; readonly data: { now: string; after?: 'start' | 'bus_loss'; lastSweptAt?: string | null } }
  | { readonly type: 'TimeOutLockWaiters'; readonly data: { now: string } }
  | {
      readonly type: 'WithdrawWorktreeLeaseRequest';
      readonly data: { leaseId: string; reason: WorktreeReleaseReason; now: string };
    }
  /** Hygiene: remove this key's worktree while nobody holds or waits for it (its repository is over its cap, or its directory is gone). */
  | { readonly type: 'EvictIdleWorktree'; readonly data: { worktreeKey: string; reason: EvictionReason; now: string } }
  | {
      readonly type: 'RecordWorktreeEvicted';
      readonly data: { worktreeKey: string; rescue: { branch: string; sha: string } | null; removed: boolean; now: string };
    }
  /** End this epoch's stream; the key goes on in the next epoch's stream (see openingOf). */
  | { readonly type: 'CloseBooks'; readonly data: { worktreeKey: string; now: string } };

export type WorktreeLeaseCommandType = WorktreeLeaseCommand['type'];

export type EvictionReason = DataOf<typeof WorktreeEvictionRequested>['reason'];
