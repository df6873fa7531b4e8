import { Inject, Injectable, type OnModuleInit } from '@nestjs/common';
import type pg from 'pg';
import { streamName, type EventEnvelope } from '@gantry/contracts';
import { Bus } from '@gantry/messaging';
import { Consumers, JsonLogger } from '@gantry/service-runtime';
import { LeaseReleases } from './lease-releases.js';

export const JOBS_CONSUMER = 'worktree-service-jobs';

export interface JobEventProgress {
  undelivered: number;
  unacknowledged: number;
}

export const TERMINAL_JOB_STATUSES = ['DONE', 'FAILED', 'SKIPPED', 'CANCELLED'] as const;

type JobData = { jobId: string; leaseToken?: number; jobStatus?: string; outcome?: 'REQUEUED' | 'FAILED'; revokedLeaseToken?: number | null };

/**
 * What this service knows of jobs, learned only from the jobs stream (ARCHITECTURE §1): each job's
 * latest status and claim token in `job_statuses` (written with the inbox, in the consumer's
 * transaction), and on a job's terminal events — finished with any status, cancelled, or a claim
 * that ended (lease expired / rolled back, requeued or failed) — the release of its leases.
 */
@Injectable()
export class JobLifecycleReactions implements OnModuleInit {
  private readonly log;

  constructor(
    @Inject(Bus) private readonly bus: Bus,
    @Inject(Consumers) private readonly consumers: Consumers,
    @Inject(LeaseReleases) private readonly releases: LeaseReleases,
    @Inject(JsonLogger) logger: JsonLogger,
  ) {
    this.log = logger.forComponent('job-lifecycle');
  }

  async onModuleInit(): Promise<void> {
    // The job service may not have started yet: its stream is created here (idempotently) so our consumer can attach.
    await this.bus.ensureForeignEventStream('jobs');
    this.consumers.add({ name: JOBS_CONSUMER, source: 'jobs', handle: (event, sql) => this.handle(event, sql), logger: this.log });
  }

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
        return this.record(sql, event, 'QUEUED', null);
      case 'JobClaimed':
        return this.record(sql, event, 'CLAIMED', d.leaseToken ?? null);
      case 'JobStarted':
        return this.record(sql, event, 'RUNNING', d.leaseToken ?? null);
      case 'JobFinished':
        await this.record(sql, event, d.jobStatus!, d.leaseToken ?? null);
        return this.releaseJob(event, d.leaseToken ?? null);
      case 'JobCancelled':
        await this.record(sql, event, 'CANCELLED', d.revokedLeaseToken ?? null);
        return this.releaseJob(event, null);
      case 'JobLeaseExpired':
      case 'JobClaimRolledBack':
        await this.record(sql, event, d.outcome === 'REQUEUED' ? 'QUEUED' : 'FAILED', d.leaseToken ?? null);
        return this.releaseJob(event, d.leaseToken ?? null);
      default:
        return;
    }
  }

  /** Only a later event of the job service's log moves a job's status (a redelivered older one does not). */
  private async record(sql: pg.PoolClient, event: EventEnvelope, status: string, leaseToken: number | null): Promise<void> {
    await sql.query(
      `INSERT INTO job_statuses (job_id, status, lease_token, source_position, updated_at) VALUES ($1, $2, $3, $4, $5)
       ON CONFLICT (job_id) DO UPDATE SET status = EXCLUDED.status, lease_token = COALESCE(EXCLUDED.lease_token, job_statuses.lease_token),
         source_position = EXCLUDED.source_position, updated_at = EXCLUDED.updated_at
       WHERE job_statuses.source_position < EXCLUDED.source_position`,
      [(event.data as JobData).jobId, status, leaseToken, event.position, event.occurredAt],
    );
  }

  /**
   * The releases run in their own transactions (each an idempotent decider command), before the
   * event is acknowledged: a crash in between redelivers the event and the release finds nothing left to do.
   */
  private async releaseJob(event: EventEnvelope, upToJobLeaseToken: number | null): Promise<void> {
    const jobId = (event.data as JobData).jobId;
    for (const lease of await this.releases.liveLeasesOfJob(jobId, upToJobLeaseToken)) {
      await this.releases.end(lease, 'job_terminal', { causationId: event.eventId });
    }
  }
}
