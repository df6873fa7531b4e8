import type pg from 'pg';
import type { WorktreeLeaseStatus, WorktreeLeaseView, WorktreePreparationFault, WorktreeReleasePendingCause } from '@gantry/contracts';

/** A row of the worktree_leases read model. */
export interface LeaseRow {
  lease_id: string;
  worktree_key: string;
  job_id: string;
  job_lease_token: number;
  repository_url: string;
  branch: string;
  base_ref: string;
  status: WorktreeLeaseStatus;
  token: number | null;
  path: string | null;
  base_sha: string | null;
  expires_at: Date | null;
  lock_deadline: Date;
  requested_at: Date;
  release_reason: string | null;
  failure_reason: string | null;
  /** Whose fault a sync_failed lease is (WorktreePreparationFault); null otherwise, and on rows made before it was told. */
  failure_fault: WorktreePreparationFault | null;
  rescue_branch: string | null;
  rescue_sha: string | null;
  release_pending_cause: WorktreeReleasePendingCause | null;
  release_pending_since: Date | null;
}

export const HOLDING_STATUSES: readonly WorktreeLeaseStatus[] = ['creating_or_reusing', 'syncing', 'ready'];

export async function findLease(sql: pg.Pool | pg.PoolClient, leaseId: string): Promise<LeaseRow | null> {
  const { rows } = await sql.query<LeaseRow>(`SELECT * FROM worktree_leases WHERE lease_id = $1`, [leaseId]);
  return rows[0] ?? null;
}

export function viewOf(row: LeaseRow): WorktreeLeaseView {
  return {
    leaseId: row.lease_id,
    worktreeKey: row.worktree_key,
    jobId: row.job_id,
    jobLeaseToken: row.job_lease_token,
    repositoryUrl: row.repository_url,
    branch: row.branch,
    baseRef: row.base_ref,
    status: row.status,
    token: row.token,
    path: row.path,
    baseSha: row.base_sha,
    expiresAt: row.expires_at ? row.expires_at.toISOString() : null,
    requestedAt: row.requested_at.toISOString(),
    releasePending:
      row.release_pending_cause && row.release_pending_since ? { cause: row.release_pending_cause, since: row.release_pending_since.toISOString() } : null,
  };
}
