import type pg from 'pg';
import type { Projection, StoredEvent } from '@gantry/eventstore';
import type { WorktreeLeaseEvent } from '../../domain/index.js';

/*
 * The read models, kept in the transaction that appends the WorktreeLease events (inline), so a
 * command that was answered is visible to the next one. One projection owns the tables: the
 * worktrees rows take the repository and branch of the lease that created them; worktree_epochs
 * says which epoch's stream of a key is open (no row: epoch 0).
 */

type Data<T extends WorktreeLeaseEvent['type']> = Extract<WorktreeLeaseEvent, { type: T }>['data'];

async function setLease(sql: pg.PoolClient, leaseId: string, at: string, columns: Record<string, unknown>): Promise<void> {
  const names = Object.keys(columns);
  const assignments = names.map((name, i) => `${name} = $${i + 3}`).join(', ');
  await sql.query(`UPDATE worktree_leases SET updated_at = $2${assignments ? `, ${assignments}` : ''} WHERE lease_id = $1`, [
    leaseId,
    at,
    ...names.map((n) => columns[n]),
  ]);
}

async function apply(sql: pg.PoolClient, event: StoredEvent): Promise<void> {
  const e = { type: event.type, data: event.data } as WorktreeLeaseEvent;
  const at = event.occurredAt;
  switch (e.type) {
    case 'WorktreeLeaseRequested': {
      const d: Data<'WorktreeLeaseRequested'> = e.data;
      await sql.query(
        `INSERT INTO worktree_leases (lease_id, worktree_key, job_id, job_lease_token, repository_url, branch, base_ref, status,
           lock_deadline, requested_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, 'acquiring_lock', $8, $9, $10)`,
        [d.leaseId, d.worktreeKey, d.jobId, d.jobLeaseToken, d.repositoryUrl, d.branch, d.baseRef, d.lockDeadline, d.requestedAt, at],
      );
      return;
    }
    case 'WorktreeLockQueued':
      return;
    case 'WorktreeLockAcquired':
      await setLease(sql, e.data.leaseId, at, { status: 'creating_or_reusing', token: e.data.token, expires_at: null });
      await sql.query(`UPDATE worktrees SET held_by = $2 WHERE worktree_key = $1`, [e.data.worktreeKey, e.data.leaseId]);
      return;
    case 'WorktreeLockTimedOut':
      await setLease(sql, e.data.leaseId, at, { status: 'lock_timeout' });
      return;
    case 'WorktreeLeaseRequestWithdrawn':
      await setLease(sql, e.data.leaseId, at, { status: 'withdrawn', release_reason: e.data.reason });
      return;
    case 'WorktreeCreated':
    case 'WorktreeReused': {
      const used = e.type === 'WorktreeCreated' ? e.data.createdAt : e.data.reusedAt;
      await setLease(sql, e.data.leaseId, at, { status: 'syncing', path: e.data.path });
      await sql.query(
        `INSERT INTO worktrees (worktree_key, repository_url, branch, path, held_by, last_used_at, created_at)
         SELECT worktree_key, repository_url, branch, $2, lease_id, $3, $3 FROM worktree_leases WHERE lease_id = $1
         ON CONFLICT (worktree_key) DO UPDATE SET path = EXCLUDED.path, held_by = EXCLUDED.held_by, last_used_at = EXCLUDED.last_used_at`,
        [e.data.leaseId, e.data.path, used],
      );
      return;
    }
    case 'WorktreeSynced':
      await setLease(sql, e.data.leaseId, at, { status: 'ready', base_sha: e.data.baseSha, expires_at: e.data.expiresAt });
      return;
    case 'WorktreeSyncFailed':
      await setLease(sql, e.data.leaseId, at, { status: 'sync_failed', failure_reason: `${e.data.stage}: ${e.data.reason}`, failure_fault: e.data.fault ?? 'HOST' });
      await sql.query(`UPDATE worktrees SET held_by = NULL WHERE worktree_key = $1 AND held_by = $2`, [e.data.worktreeKey, e.data.leaseId]);
      return;
    case 'WorktreeLeaseRenewed':
      await setLease(sql, e.data.leaseId, at, { expires_at: e.data.expiresAt });
      return;
    case 'WorktreeLeaseExpired':
      return;
    case 'WorktreeReleasePending':
      await setLease(sql, e.data.leaseId, at, { release_pending_cause: e.data.cause, release_pending_since: e.data.pendingSince });
      return;
    case 'WorktreeReleaseRequested':
      await setLease(sql, e.data.leaseId, at, { status: 'releasing', release_reason: e.data.reason });
      return;
    case 'WorktreeRescued':
      await setLease(sql, e.data.leaseId, at, { rescue_branch: e.data.rescueBranch, rescue_sha: e.data.rescueSha });
      return;
    case 'WorktreeReleased': {
      const stale = e.data.reason === 'expired' || e.data.reason === 'stale_reset';
      await setLease(sql, e.data.leaseId, at, { status: stale ? 'stale_released' : 'released' });
      if (e.data.removed) {
        await sql.query(`DELETE FROM worktrees WHERE worktree_key = $1`, [e.data.worktreeKey]);
      } else {
        await sql.query(`UPDATE worktrees SET held_by = NULL, last_used_at = $3 WHERE worktree_key = $1 AND held_by = $2`, [
          e.data.worktreeKey,
          e.data.leaseId,
          e.data.releasedAt,
        ]);
      }
      return;
    }
    case 'WorktreeEvictionRequested':
      return;
    case 'WorktreeEvicted':
      if (e.data.removed) await sql.query(`DELETE FROM worktrees WHERE worktree_key = $1`, [e.data.worktreeKey]);
      return;
    case 'WorktreeBooksClosed':
      return;
    case 'WorktreeBooksOpened':
      await sql.query(
        `INSERT INTO worktree_epochs (worktree_key, epoch) VALUES ($1, $2)
         ON CONFLICT (worktree_key) DO UPDATE SET epoch = GREATEST(worktree_epochs.epoch, EXCLUDED.epoch)`,
        [e.data.worktreeKey, e.data.epoch],
      );
      return;
    default: {
      const unknown: never = e;
      throw new Error(`worktree read models: unknown event ${(unknown as { type: string }).type}`);
    }
  }
}

export const worktreeReadModels: Projection = {
  name: 'worktree_read_models',
  tables: ['worktree_leases', 'worktrees', 'worktree_epochs'],
  apply,
};

export const worktreeServiceProjections: Projection[] = [worktreeReadModels];
