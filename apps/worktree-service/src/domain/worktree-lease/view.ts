import type { WorktreeLeaseStatus, WorktreeLeaseView } from '@gantry/contracts';
import type { LeaseRecord, WorktreeLeaseState } from './state.js';

/** The worktree key's state (docs/worktrees.md): its holder's status, or idle. */
export function worktreeStatus(state: WorktreeLeaseState): WorktreeLeaseStatus | 'idle' {
  const holder = state.lock.holder ? state.leases[state.lock.holder] : undefined;
  return holder ? holder.status : 'idle';
}

/** A lease as the list_worktree_leases query shows it. */
export function leaseViewOf(lease: LeaseRecord): WorktreeLeaseView {
  return {
    leaseId: lease.leaseId,
    worktreeKey: lease.worktreeKey,
    jobId: lease.jobId,
    jobLeaseToken: lease.jobLeaseToken,
    repositoryUrl: lease.repositoryUrl,
    branch: lease.branch,
    baseRef: lease.baseRef,
    status: lease.status,
    token: lease.token,
    path: lease.path,
    baseSha: lease.baseSha,
    expiresAt: lease.expiresAt,
    requestedAt: lease.requestedAt,
    releasePending: lease.releasePending,
  };
}
