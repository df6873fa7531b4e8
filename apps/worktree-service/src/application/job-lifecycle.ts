import { Controller, Inject, Injectable } from '@nestjs/common';
import type pg from 'pg';
import { isTerminalJobStatus, streamName, type EventEnvelope, type JobEvent, type WorktreeReleasePendingCause } from '@gantry/contracts';
import { Bus } from '@gantry/messaging';
import { DurableConsumer, holdHereIfAsked, type ConsumerContext } from '@gantry/service-runtime';
import { noAgentLeft, type ClaimEndedBy } from '../domain/index.js';
import { holdWhileClaimEnds } from '../infrastructure/persistence/claim-ends.js';
import { LeaseReleases } from './lease-releases.js';

export const JOBS_CONSUMER = 'worktree-service-jobs';

/** The job events JobLifecycleReactions acts on; the consumer acknowledges the others without a transaction. */
const JOB_LIFECYCLE_EVENTS = [
  'JobEnqueued',
  'JobClaimed',
  'JobStarted',
  'JobFinished',
  'JobClaimRolledBack',
  'JobRunStopped',
  'JobCancelled',
  'JobLeaseExpired',
] as const satisfies readonly JobEvent['type'][];

export interface JobEventProgress {
  undelivered: number;
  unacknowledged: number;
}

type JobData = {
  jobId: string;
  leaseToken?: number;
  jobStatus?: string;
  outcome?: 'REQUEUED' | 'FAILED';
  revokedLeaseToken?: number | null;
  /** JobLeaseExpired: whether the claim had been started (absent from older job services). */
  started?: boolean;
};

/**
 * What this service knows of jobs, learned only from the jobs stream: each job's latest status,
 * claim token and who ended that claim in `job_statuses` (written with the inbox, in the consumer's
 * transaction), and on the events that end a claim, what becomes of its leases (docs/worktrees.md):
 * - ended by its holder — `JobFinished`, `JobClaimRolledBack`, `JobRunStopped` (the holder of a
 *   cancelled claim confirms its agent is gone): the claim's leases are released at once;
 * - ended by the job service — `JobCancelled`, `JobLeaseExpired`: a ready lease waits for its holder's
 *   release or its own expiry (release pending), since the holder's agent may still be running in it;
 * - except a `JobLeaseExpired` of a claim never started: no agent of it ran, so its leases are released
 *   at once (its acquire's answer lost and its runner dead, the worktree would otherwise stay held).
 * Leases of older claims of the job are superseded: they wait for their holders the same way.
 */
@Injectable()
export class JobLifecycleReactions {
  constructor(
    @Inject(Bus) private readonly bus: Bus,
    @Inject(LeaseReleases) private readonly releases: LeaseReleases,
  ) {}

  /**
   * How far our consumer is through the jobs stream: `undelivered` events no process has been given
   * yet, and `unacknowledged` ones given out and not yet acknowledged — being handled here, or
   * held by a process that died with them (they come back to us when their ack wait runs out).
   */
  async progress(): Promise<JobEventProgress> {
    const info = await this.bus.jsm.consumers.info(streamName(this.bus.naming, 'jobs'), JOBS_CONSUMER);
    return { undelivered: info.num_pending, unacknowledged: info.num_ack_pending };
  }

  async handle(event: EventEnvelope, sql: pg.PoolClient): Promise<void> {
    const d = event.data as JobData;
    switch (event.type) {
      case 'JobEnqueued':
        return this.record(sql, event, 'QUEUED', null, null);
      case 'JobClaimed':
        return this.record(sql, event, 'CLAIMED', d.leaseToken ?? null, null);
      case 'JobStarted':
        return this.record(sql, event, 'RUNNING', d.leaseToken ?? null, null);
      case 'JobFinished':
        await this.record(sql, event, d.jobStatus!, d.leaseToken ?? null, 'holder');
        return this.claimEnded(event, sql, d.leaseToken!, null);
      case 'JobClaimRolledBack':
        await this.record(sql, event, d.outcome === 'REQUEUED' ? 'QUEUED' : 'FAILED', d.leaseToken ?? null, 'holder');
        return this.claimEnded(event, sql, d.leaseToken!, null);
      case 'JobRunStopped':
        await this.record(sql, event, 'CANCELLED', d.leaseToken ?? null, 'holder');
        return this.claimEnded(event, sql, d.leaseToken!, null);
      case 'JobCancelled':
        await this.record(sql, event, 'CANCELLED', d.revokedLeaseToken ?? null, 'service');
        return this.claimEnded(event, sql, null, 'job_cancelled');
      case 'JobLeaseExpired': {
        // Only an explicit `started: false` says no agent ran; an older event's silence may hide one.
        const endedBy: ClaimEndedBy = d.started === false ? 'service_before_start' : 'service';
        await this.record(sql, event, d.outcome === 'REQUEUED' ? 'QUEUED' : 'FAILED', d.leaseToken ?? null, endedBy);
        return this.claimEnded(event, sql, d.leaseToken!, noAgentLeft(endedBy) ? null : 'job_lease_expired');
      }
      default:
        return;
    }
  }

  /**
   * Only a later event of the job service's log moves a job's status (a redelivered older one does not).
   * A terminal status stamps `ended_at` (the database's clock) at each event that records it: the
   * row's retention counts from the last of them (docs/worktrees.md, "Retention of job statuses").
   */
  private async record(sql: pg.PoolClient, event: EventEnvelope, status: string, leaseToken: number | null, endedBy: ClaimEndedBy | null): Promise<void> {
    await sql.query(
      `INSERT INTO job_statuses (job_id, status, lease_token, ended_by, source_position, updated_at, ended_at)
       VALUES ($1, $2, $3, $4, $5, $6, CASE WHEN $7::boolean THEN now() END)
       ON CONFLICT (job_id) DO UPDATE SET status = EXCLUDED.status, lease_token = COALESCE(EXCLUDED.lease_token, job_statuses.lease_token),
         ended_by = EXCLUDED.ended_by, source_position = EXCLUDED.source_position, updated_at = EXCLUDED.updated_at, ended_at = EXCLUDED.ended_at
       WHERE job_statuses.source_position < EXCLUDED.source_position`,
      [(event.data as JobData).jobId, status, leaseToken, endedBy, event.position, event.occurredAt, isTerminalJobStatus(status)],
    );
  }

  /**
   * The claim `token` ended — by its holder (or before it was started) when `byService` is null, else
   * by the job service (a cancel names no token: then every claim). Each lease change runs in its own transaction (an
   * idempotent decider command), before the event is acknowledged: a crash in between redelivers the
   * event and the change finds nothing left to do. The leases are looked for under the job's lock,
   * held until the end is committed: an acquire of the claim whose lease comes after the look reads
   * the job under it again, and ends its lease itself (WorktreeLeaseCommands.acquire).
   */
  private async claimEnded(event: EventEnvelope, sql: pg.PoolClient, token: number | null, byService: WorktreeReleasePendingCause | null): Promise<void> {
    const jobId = (event.data as JobData).jobId;
    const causation = { causationId: event.eventId };
    await holdWhileClaimEnds(sql, jobId);
    const leases = await this.releases.liveLeasesOfJob(jobId, token);
    // Test-only (GANTRY_TEST_HOLD_AT): an acquire of the claim asks for its lease before this end is committed.
    await holdHereIfAsked('worktree-jobs:claim-leases-read');
    for (const lease of leases) {
      const ownClaim = token === null || lease.job_lease_token === token;
      if (ownClaim && byService === null) await this.releases.end(lease, 'job_terminal', causation);
      else await this.releases.awaitHolder(lease, ownClaim ? byService! : 'claim_superseded', causation);
    }
  }
}

/** The durable consumer of the jobs stream that feeds JobLifecycleReactions. */
@Controller()
export class JobLifecycleConsumer {
  constructor(@Inject(JobLifecycleReactions) private readonly reactions: JobLifecycleReactions) {}

  @DurableConsumer({ name: JOBS_CONSUMER, source: 'jobs', types: JOB_LIFECYCLE_EVENTS })
  onJobEvent(event: EventEnvelope, { sql }: ConsumerContext): Promise<void> {
    return this.reactions.handle(event, sql);
  }
}
