import { Controller, Inject } from '@nestjs/common';
import {
  acquireWorktree,
  canonicalRepositoryUrl,
  deriveWorktreeKey,
  ErrorCode,
  GantryError,
  releaseWorktree,
  renewWorktreeLease,
  type ReplyOf,
  type RequestOf,
  type WorktreeLeaseEnded,
  type WorktreeLeaseGrant,
  type WorktreeReleaseReason,
  worktreeLeaseEndedError,
} from '@gantry/contracts';
import type { CommandContext } from '@gantry/messaging';
import { CommandHandler, crashHereIfAsked, holdHereIfAsked } from '@gantry/service-runtime';
import { EventStore, isDatabaseUnreachable } from '@gantry/eventstore';
import { claimVerdict, type KnownJob } from '../domain/index.js';
import { jobAfterClaimEnds, jobAsKnown } from '../infrastructure/persistence/claim-ends.js';
import { WORKTREE_CONFIG, type WorktreeConfig } from '../infrastructure/worktree-config.js';
import { idempotencyFor, leaseIdFor, metadataOf } from './command-context.js';
import { LeaseReleases } from './lease-releases.js';
import { findLease, HOLDING_STATUSES, type LeaseRow } from './lease-rows.js';
import { serviceActor, streamIdOf, WorktreeLeaseLog, type DecideOptions } from './lease-log.js';
import { LeaseSweep } from './lease-sweep.js';

const POLL_MS = 250;
const ENDED: readonly string[] = ['released', 'lock_timeout', 'sync_failed', 'stale_released', 'withdrawn'];
/** The ends of a lease an acquire answers with its end (worktreeLeaseEndedError); a lock timeout and a failed preparation have codes of their own. */
const GONE: readonly string[] = ['releasing', 'released', 'stale_released', 'withdrawn'] satisfies WorktreeLeaseEnded['status'][];
const RELEASE_WAIT_MS = 15_000;
/** Between the tries of an acquire's look at its claim once its lease is in, while the database fails it (untilClaimLookedAt). */
const CLAIM_LOOK_RETRY_MS = [500, 1_000, 2_000, 5_000];

/** The refusal of an acquire for a claim that has ended (refuseEndedClaim). */
function claimEndedError(jobId: string, jobLeaseToken: number, job: KnownJob): GantryError {
  if (job.leaseToken !== null && job.leaseToken > jobLeaseToken) {
    return new GantryError(ErrorCode.STALE_FENCE, `claim ${jobLeaseToken} of job ${jobId} was superseded by claim ${job.leaseToken}`, {
      jobId,
      jobLeaseToken,
      currentJobLeaseToken: job.leaseToken,
    });
  }
  return new GantryError(ErrorCode.STALE_FENCE, `claim ${jobLeaseToken} of job ${jobId} has ended (${job.status}): it gets no worktree`, { jobId, jobLeaseToken, status: job.status });
}

/**
 * acquire_worktree, renew_worktree_lease and release_worktree. An acquire appends its request in a
 * short transaction and then waits — holding no transaction and no connection — for its lease row to
 * become ready or end, waking on every change this process commits and polling between them.
 */
@Controller()
export class WorktreeLeaseCommands {
  constructor(
    @Inject(WorktreeLeaseLog) private readonly leases: WorktreeLeaseLog,
    @Inject(EventStore) private readonly store: EventStore,
    @Inject(WORKTREE_CONFIG) private readonly config: WorktreeConfig,
    @Inject(LeaseSweep) private readonly sweep: LeaseSweep,
    @Inject(LeaseReleases) private readonly releases: LeaseReleases,
  ) {}

  @CommandHandler(acquireWorktree)
  async acquire(request: RequestOf<typeof acquireWorktree>, context?: CommandContext): Promise<ReplyOf<typeof acquireWorktree>> {
    if (this.leases.closing) throw new GantryError(ErrorCode.UNAVAILABLE, 'the worktree service is shutting down');
    // A lease this service could not renew while its bus was down is judged as resumed.
    await this.sweep.afterBusLoss();
    const worktreeKey = deriveWorktreeKey(request.repositoryUrl, request.branch);
    const leaseId = leaseIdFor(request.idempotencyKey);
    await this.refuseEndedLease(leaseId, request);
    await this.refuseEndedClaim(request.jobId, request.jobLeaseToken);
    // Test-only (GANTRY_TEST_HOLD_AT): the claim ends between its check and the lease's request.
    await holdHereIfAsked('worktree-acquire:claim-checked');
    if (await this.askedElsewhere(leaseId, worktreeKey, request)) return this.waitForGrant(leaseId);
    await this.waitForLeasesUnderOlderKeys(worktreeKey, request);
    await this.leases.decide(
      worktreeKey,
      {
        type: 'RequestWorktreeLease',
        data: {
          worktreeKey,
          leaseId,
          jobId: request.jobId,
          jobLeaseToken: request.jobLeaseToken,
          repositoryUrl: request.repositoryUrl,
          branch: request.branch,
          baseRef: request.baseRef,
          leaseDurationMs: request.leaseDurationMs,
          lockTimeoutMs: request.lockTimeoutMs ?? this.config.defaultLockTimeoutMs,
          now: this.leases.now(),
        },
      },
      { metadata: metadataOf(request, context), idempotency: idempotencyFor('acquire_worktree', request), reply: () => ({ leaseId }) },
    );
    await this.untilClaimLookedAt(leaseId, request.jobId, request.jobLeaseToken);
    return this.waitForGrant(leaseId);
  }

  @CommandHandler(renewWorktreeLease)
  async renew(request: RequestOf<typeof renewWorktreeLease>, context?: CommandContext): Promise<ReplyOf<typeof renewWorktreeLease>> {
    const lease = await this.liveLeaseOrRefusal(request.leaseId, request.token);
    const { result, replayed } = await this.leases.decide(
      lease.worktree_key,
      { type: 'RenewWorktreeLease', data: { leaseId: request.leaseId, token: request.token, leaseDurationMs: request.leaseDurationMs, now: this.leases.now() } },
      {
        metadata: metadataOf(request, context),
        idempotency: idempotencyFor('renew_worktree_lease', request),
        reply: (decision) => {
          const renewed = decision.decided.find((e) => e.type === 'WorktreeLeaseRenewed');
          if (!renewed || renewed.type !== 'WorktreeLeaseRenewed') throw new Error('a renew that was not refused must emit WorktreeLeaseRenewed');
          return { leaseId: request.leaseId, token: request.token, expiresAt: renewed.data.expiresAt };
        },
      },
    );
    // Test-only (GANTRY_TEST_CRASH_AT): the renewal committed, its reply never sent.
    crashHereIfAsked('worktree-renew:decided');
    // A repeat answered from its receipt gets what is left of the lease as it is now: since decided, it
    // may have been resumed at a start (or, no longer held, have nothing left).
    const expiresAt = replayed ? await this.heldUntil(request.leaseId) : new Date(result.expiresAt);
    return { ...result, expiresInMs: this.leftOf(expiresAt) };
  }

  /** When a lease that is still held runs out; null once it is not. */
  private async heldUntil(leaseId: string): Promise<Date | null> {
    const row = await findLease(this.store.pool, leaseId);
    return row && HOLDING_STATUSES.includes(row.status) ? row.expires_at : null;
  }

  /**
   * What is left of a lease by this service's clock as it answers, reckoned at every answer, a repeat's
   * too (docs/jobs.md, "A runner's clock"): nothing for a lease with no expiry left.
   */
  private leftOf(expiresAt: Date | null): number {
    return expiresAt ? Math.max(0, expiresAt.getTime() - this.store.clock().getTime()) : 0;
  }

  /** Asks for the release, then waits a little for the rescue to finish so the reply says `released` when it can. */
  @CommandHandler(releaseWorktree)
  async release(request: RequestOf<typeof releaseWorktree>, context?: CommandContext): Promise<ReplyOf<typeof releaseWorktree>> {
    const asked = { metadata: metadataOf(request, context), idempotency: idempotencyFor('release_worktree', request) };
    const lease = await this.liveLeaseOrRefusal(request.leaseId, request.token, asked);
    if (!ENDED.includes(lease.status)) {
      await this.leases.decide(
        lease.worktree_key,
        { type: 'ReleaseWorktreeLease', data: { leaseId: request.leaseId, token: request.token, reason: 'released', removeWorktree: false, now: this.leases.now() } },
        { ...asked, reply: () => ({ leaseId: request.leaseId }) },
      );
    }
    const deadline = Date.now() + RELEASE_WAIT_MS;
    let row = await this.leaseOrNotFound(request.leaseId);
    while (row.status === 'releasing' && Date.now() < deadline && !this.leases.closing) {
      await this.leases.waitForChange(POLL_MS);
      row = await this.leaseOrNotFound(request.leaseId);
    }
    return { leaseId: request.leaseId, token: request.token, status: row.status };
  }

  /**
   * The same acquire asked again after its lease ended — released, expired, withdrawn, its answer lost
   * and its caller cut off meanwhile — is told so, and why (worktreeLeaseEndedError), before anything
   * else: never the grant of an ended lease, nor a refusal that names only its claim. Another request
   * under the key is IDEMPOTENCY_CONFLICT, as ever (docs/worktrees.md, "An acquire whose lease ended").
   */
  private async refuseEndedLease(leaseId: string, request: RequestOf<typeof acquireWorktree>): Promise<void> {
    const known = await findLease(this.store.pool, leaseId);
    if (!known || !GONE.includes(known.status)) return;
    await this.assertAskedAlike(known, (await this.leases.load(known.worktree_key)).epoch, request);
    throw await this.leaseEnded(known);
  }

  /** The refusal of an acquire whose lease has ended: how it ended, and whether its claim has (what the service heard of its job). */
  private async leaseEnded(lease: LeaseRow): Promise<GantryError> {
    const job = await jobAsKnown(this.store.pool, lease.job_id);
    return worktreeLeaseEndedError({
      leaseId: lease.lease_id,
      status: lease.status as WorktreeLeaseEnded['status'],
      reason: lease.release_reason as WorktreeReleaseReason | null,
      claimEnded: job !== undefined && claimVerdict(job, lease.job_lease_token, false).kind !== 'keep',
    });
  }

  /**
   * A claim this service already knows has ended (its job is terminal, or requeued or claimed again
   * since: claimVerdict) gets no worktree. What it does not know yet is caught later: the end of the
   * claim releases the lease, or the acquire itself once its lease is asked for (endIfClaimEnded).
   */
  private async refuseEndedClaim(jobId: string, jobLeaseToken: number): Promise<void> {
    const job = await jobAsKnown(this.store.pool, jobId);
    if (job && claimVerdict(job, jobLeaseToken, false).kind !== 'keep') throw claimEndedError(jobId, jobLeaseToken, job);
  }

  /**
   * The claim may have ended between refuseEndedClaim and the lease's request, its end looking for the
   * claim's leases before this one was written: read again, under the job's lock (jobAfterClaimEnds),
   * now that the lease is in the log. An ended claim's lease is then ended here as the end of the claim
   * would have ended it — released, or left to wait for its holder — and the acquire answers with that.
   */
  private async endIfClaimEnded(leaseId: string, jobId: string, jobLeaseToken: number): Promise<void> {
    const verdict = claimVerdict(await jobAfterClaimEnds(this.store.pool, jobId), jobLeaseToken, false);
    if (verdict.kind === 'keep') return;
    const lease = await this.leaseOrNotFound(leaseId);
    if (ENDED.includes(lease.status)) return;
    if (verdict.kind === 'release') await this.releases.end(lease, 'job_terminal');
    else await this.releases.awaitHolder(lease, verdict.cause);
  }

  /**
   * endIfClaimEnded, done again when the database fails it (a connection lost, PostgreSQL restarting):
   * after 0.5 s, 1 s, 2 s, then every 5 s, for as long as the service runs. Given up, the lease of a
   * claim whose end looked for its leases before this one was written would be left until it expired
   * (or, still being prepared, until the next start's stale reset). Once the service stops, that stale
   * reset sees to it.
   */
  private async untilClaimLookedAt(leaseId: string, jobId: string, jobLeaseToken: number): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.endIfClaimEnded(leaseId, jobId, jobLeaseToken);
      } catch (error) {
        if (!isDatabaseUnreachable(error) || this.leases.closing) throw error;
        await new Promise((resolve) => setTimeout(resolve, CLAIM_LOOK_RETRY_MS[Math.min(attempt - 1, CLAIM_LOOK_RETRY_MS.length - 1)]));
      }
    }
  }

  /**
   * The same acquire asked again after its receipt expired, when its lease lies in an epoch whose
   * books are closed (the decider, seeing only the open epoch, would take it for a new one), or under
   * a key from before URLs had a canonical spelling (docs/worktrees.md, "Keys from before"): it is
   * that lease (one that has ended was answered by refuseEndedLease) — or IDEMPOTENCY_CONFLICT when
   * the key now comes with another request.
   */
  private async askedElsewhere(leaseId: string, worktreeKey: string, request: RequestOf<typeof acquireWorktree>): Promise<boolean> {
    const known = await findLease(this.store.pool, leaseId);
    if (!known) return false;
    const open = await this.leases.load(known.worktree_key);
    if (known.worktree_key === worktreeKey && leaseId in open.leases) return false;
    await this.assertAskedAlike(known, open.epoch, request);
    return true;
  }

  /**
   * IDEMPOTENCY_CONFLICT unless `request` is the one lease `known` was asked with: what the decider
   * compares for a lease it sees (decideRequest), the lease duration too, which only the lease's
   * request event holds, in one of the key's epoch streams (up to `openEpoch`).
   */
  private async assertAskedAlike(known: LeaseRow, openEpoch: number, request: RequestOf<typeof acquireWorktree>): Promise<void> {
    const { rows } = await this.store.pool.query<{ lease_duration_ms: string | null }>(
      `SELECT data->>'leaseDurationMs' AS lease_duration_ms FROM events
        WHERE stream_id = ANY($1::text[]) AND type = 'WorktreeLeaseRequested' AND data->>'leaseId' = $2`,
      [Array.from({ length: openEpoch + 1 }, (_, epoch) => streamIdOf(known.worktree_key, epoch)), known.lease_id],
    );
    const same =
      known.job_id === request.jobId &&
      known.job_lease_token === request.jobLeaseToken &&
      known.repository_url === request.repositoryUrl &&
      known.branch === request.branch &&
      known.base_ref === request.baseRef &&
      rows.length === 1 &&
      Number(rows[0]!.lease_duration_ms) === request.leaseDurationMs;
    if (!same) throw new GantryError(ErrorCode.IDEMPOTENCY_CONFLICT, `worktree lease ${known.lease_id} was already requested with different content`, { leaseId: known.lease_id });
  }

  /**
   * Leases of this repository and branch under another key — a key from before URLs had a canonical
   * spelling, of another spelling of the URL (docs/worktrees.md, "Keys from before") — hold the
   * branch as the key's lock does: the request waits, as in line for the lock, until every one of them
   * has ended, and gets LOCK_TIMEOUT when its lock timeout runs out first. No lease is made under
   * such a key any more (every acquire goes to the canonical key), so once none is live, none comes back.
   */
  private async waitForLeasesUnderOlderKeys(worktreeKey: string, request: RequestOf<typeof acquireWorktree>): Promise<void> {
    const deadline = Date.now() + (request.lockTimeoutMs ?? this.config.defaultLockTimeoutMs);
    const repository = canonicalRepositoryUrl(request.repositoryUrl);
    for (;;) {
      // The predicate of the partial index worktree_leases_live: only the live leases are read.
      const { rows } = await this.store.pool.query<{ lease_id: string; worktree_key: string; repository_url: string }>(
        `SELECT lease_id, worktree_key, repository_url FROM worktree_leases
          WHERE status NOT IN ('released', 'lock_timeout', 'sync_failed', 'stale_released', 'withdrawn') AND branch = $1 AND worktree_key <> $2`,
        [request.branch, worktreeKey],
      );
      const holder = rows.find((row) => canonicalRepositoryUrl(row.repository_url) === repository);
      if (!holder) return;
      if (this.leases.closing) throw new GantryError(ErrorCode.UNAVAILABLE, 'the worktree service is shutting down');
      if (Date.now() >= deadline) {
        throw new GantryError(ErrorCode.LOCK_TIMEOUT, `branch ${request.branch} of that repository stayed held under worktree key ${holder.worktree_key}`, {
          worktreeKey: holder.worktree_key,
          leaseId: holder.lease_id,
        });
      }
      await this.leases.waitForChange(POLL_MS);
    }
  }

  /**
   * A lease that has ended is refused here, as the decider would refuse it: its events may lie in an
   * epoch whose books are closed, which no command replays any more. With `asked` (a release), the
   * refusal goes through the command's idempotency key first: the same release asked again after it
   * was done — its reply lost — gets the answer stored under its key, and the ended lease is returned
   * (docs/worktrees.md, "When a lease ends").
   */
  private async liveLeaseOrRefusal(leaseId: string, token: number, asked?: Pick<DecideOptions<unknown>, 'metadata' | 'idempotency'>): Promise<LeaseRow> {
    // A lease this service could not renew while its bus was down is judged as resumed.
    await this.sweep.afterBusLoss();
    const lease = await this.leaseOrNotFound(leaseId);
    if (ENDED.includes(lease.status)) {
      const refused = new GantryError(ErrorCode.STALE_FENCE, `worktree lease ${leaseId} has already ended (${lease.status})`, { leaseId, token, status: lease.status });
      if (!asked?.idempotency) throw refused;
      // Stored under the key when nothing was (a repeat gets the same refusal); an earlier answer is replayed.
      await this.store.execute(asked, () => Promise.reject(refused));
    }
    return lease;
  }

  private async leaseOrNotFound(leaseId: string): Promise<LeaseRow> {
    const lease = await findLease(this.store.pool, leaseId);
    if (!lease) throw new GantryError(ErrorCode.NOT_FOUND, `worktree lease ${leaseId} does not exist`, { leaseId });
    return lease;
  }

  /**
   * Waits for the lease to be ready (the grant) or to end (its typed error). A waiter past its lock
   * deadline asks the decider to time the overdue waiters out, so LOCK_TIMEOUT does not depend on
   * the sweep's timer. Bounded: lock deadline + the time a create and sync may take.
   */
  private async waitForGrant(leaseId: string): Promise<WorktreeLeaseGrant> {
    let row = await this.leaseOrNotFound(leaseId);
    const giveUpAt = row.lock_deadline.getTime() + this.config.prepareTimeoutMs;
    for (;;) {
      switch (row.status) {
        case 'ready':
          return {
            leaseId,
            token: row.token!,
            worktreeKey: row.worktree_key,
            path: row.path!,
            expiresAt: row.expires_at!.toISOString(),
            baseSha: row.base_sha!,
            // A repeat of the acquire gets what is left of a lease that began earlier.
            expiresInMs: this.leftOf(row.expires_at),
          };
        case 'lock_timeout':
          throw new GantryError(ErrorCode.LOCK_TIMEOUT, `worktree ${row.worktree_key} stayed locked until ${row.lock_deadline.toISOString()}`, {
            leaseId,
            worktreeKey: row.worktree_key,
          });
        case 'sync_failed':
          // Whose fault it is decides whether the claim spends an attempt (docs/worktrees.md, "Whose fault a refused lease is").
          throw new GantryError(ErrorCode.PRECONDITION_FAILED, `worktree ${row.worktree_key} could not be prepared: ${row.failure_reason ?? 'unknown'}`, {
            leaseId,
            worktreeKey: row.worktree_key,
            fault: row.failure_fault ?? 'HOST',
          });
        case 'acquiring_lock':
          if (Date.now() >= row.lock_deadline.getTime()) {
            await this.leases.decide(row.worktree_key, { type: 'TimeOutLockWaiters', data: { now: this.leases.now() } }, { metadata: serviceActor('lock-timeout') });
            row = await this.leaseOrNotFound(leaseId);
            if (row.status === 'acquiring_lock') await this.leases.waitForChange(POLL_MS);
            continue;
          }
          break;
        case 'creating_or_reusing':
        case 'syncing':
          break;
        case 'releasing':
        case 'released':
        case 'stale_released':
        case 'withdrawn':
          throw await this.leaseEnded(row);
        default: {
          const unknown: never = row.status;
          throw new Error(`unknown lease status ${String(unknown)}`);
        }
      }
      if (this.leases.closing) throw new GantryError(ErrorCode.UNAVAILABLE, 'the worktree service is shutting down; ask again');
      if (Date.now() > giveUpAt) {
        throw new GantryError(ErrorCode.TIMEOUT, `worktree lease ${leaseId} was not ready in time (still ${row.status})`, { leaseId, status: row.status });
      }
      await this.leases.waitForChange(POLL_MS);
      row = await this.leaseOrNotFound(leaseId);
    }
  }
}
