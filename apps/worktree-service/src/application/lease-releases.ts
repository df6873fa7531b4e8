import { Inject, Injectable } from '@nestjs/common';
import { InjectPinoLogger, PinoLogger } from 'nestjs-pino';
import { GantryError, type WorktreeReleasePendingCause, type WorktreeReleaseReason } from '@gantry/contracts';
import { EventStore } from '@gantry/eventstore';
import type { LeaseRow } from './lease-rows.js';
import { serviceActor, WorktreeLeaseLog } from './lease-log.js';

/** The refusals that mean "this lease already ended or moved on": a server-side release then has nothing to do. */
const ALREADY_DONE = new Set(['STALE_FENCE', 'INVALID_TRANSITION', 'NOT_FOUND']);

const LIVE = ['acquiring_lock', 'creating_or_reusing', 'syncing', 'ready'];

/**
 * Releases by the server (docs/worktrees.md): when a claim's holder ended it, at a stale reset, at
 * shutdown — and, when a claim ended elsewhere, the wait for its holder (awaitHolder). A lease still
 * waiting for the lock is withdrawn; a holder is released with its own token (its worktree is rescued
 * if dirty by the release effect). Each is idempotent.
 */
@Injectable()
export class LeaseReleases {

  constructor(
    @Inject(WorktreeLeaseLog) private readonly leases: WorktreeLeaseLog,
    @Inject(EventStore) private readonly store: EventStore,
    @InjectPinoLogger('lease-release') private readonly log: PinoLogger,
  ) {}

  /** The live leases of a job's claims up to `upToJobLeaseToken` (every claim when null). */
  async liveLeasesOfJob(jobId: string, upToJobLeaseToken: number | null): Promise<LeaseRow[]> {
    const { rows } = await this.store.pool.query<LeaseRow>(
      `SELECT * FROM worktree_leases WHERE job_id = $1 AND status = ANY($2::text[]) AND ($3::int IS NULL OR job_lease_token <= $3)`,
      [jobId, LIVE, upToJobLeaseToken],
    );
    return rows;
  }

  async liveLeases(): Promise<LeaseRow[]> {
    const { rows } = await this.store.pool.query<LeaseRow>(`SELECT * FROM worktree_leases WHERE status = ANY($1::text[]) ORDER BY requested_at`, [LIVE]);
    return rows;
  }

  /**
   * The lease's claim ended by someone other than its holder: a lease not handed out yet ends now, a
   * ready one waits for its holder's release or its expiry (AwaitHolderRelease). Idempotent.
   */
  async awaitHolder(lease: LeaseRow, cause: WorktreeReleasePendingCause, options: { causationId?: string } = {}): Promise<void> {
    const metadata = { ...serviceActor(`await-holder:${cause}`), causationId: options.causationId ?? null };
    try {
      await this.leases.decide(lease.worktree_key, { type: 'AwaitHolderRelease', data: { leaseId: lease.lease_id, cause, now: this.leases.now() } }, { metadata });
      this.log.info({ leaseId: lease.lease_id, worktreeKey: lease.worktree_key, jobId: lease.job_id, cause }, 'worktree lease waits for its holder');
    } catch (error) {
      if (error instanceof GantryError && ALREADY_DONE.has(error.code)) return;
      throw error;
    }
  }

  /** Returns true when this call ended the lease (false when it had already ended). */
  async end(lease: LeaseRow, reason: WorktreeReleaseReason, options: { removeWorktree?: boolean; causationId?: string } = {}): Promise<boolean> {
    const now = this.leases.now();
    const metadata = { ...serviceActor(`release:${reason}`), causationId: options.causationId ?? null };
    try {
      if (lease.status === 'acquiring_lock') {
        await this.leases.decide(lease.worktree_key, { type: 'WithdrawWorktreeLeaseRequest', data: { leaseId: lease.lease_id, reason, now } }, { metadata });
      } else {
        await this.leases.decide(
          lease.worktree_key,
          { type: 'ReleaseWorktreeLease', data: { leaseId: lease.lease_id, token: lease.token!, reason, removeWorktree: options.removeWorktree ?? false, now } },
          { metadata },
        );
      }
      this.log.info({ leaseId: lease.lease_id, worktreeKey: lease.worktree_key, jobId: lease.job_id, reason }, 'worktree lease released by the service');
      return true;
    } catch (error) {
      if (error instanceof GantryError && ALREADY_DONE.has(error.code)) {
        // Between our read and the decision it was granted (withdraw refused) or ended: read again once.
        if (lease.status === 'acquiring_lock' && error.code === 'INVALID_TRANSITION') {
          const { rows } = await this.store.pool.query<LeaseRow>(`SELECT * FROM worktree_leases WHERE lease_id = $1`, [lease.lease_id]);
          if (rows[0] && rows[0].status !== 'acquiring_lock' && LIVE.includes(rows[0].status)) return this.end(rows[0], reason, options);
        }
        return false;
      }
      throw error;
    }
  }
}
