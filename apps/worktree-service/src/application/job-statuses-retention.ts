import { Inject, Injectable, type OnModuleInit } from '@nestjs/common';
import { lateEventMs, RetentionPruner, type RetentionPass } from '@gantry/service-runtime';
import { pruneJobStatuses } from '../infrastructure/persistence/job-statuses-retention.js';
import { JOBS_CONSUMER } from './job-lifecycle.js';

/** Rows per DELETE, and DELETEs in one pass of the pruning job. */
const BATCH_SIZE = 1000;
const MAX_BATCHES = 50;

/**
 * How long after a job's end was recorded an event about it may still reach this service (lateEventMs,
 * over the jobs stream). See docs/worktrees.md ("Retention of job statuses").
 */
export function jobStatusesRetentionMs(pass: Pick<RetentionPass, 'redeliveryWindowMs' | 'receiptTtlMs'>): number {
  return lateEventMs(pass, JOBS_CONSUMER);
}

/**
 * Prunes `job_statuses` on the service's pruning job (RetentionPruner): a job's row once its end was
 * recorded more than the retention ago, no lease of the job is live, and no dead letter names it.
 */
@Injectable()
export class JobStatusesRetention implements OnModuleInit {
  constructor(@Inject(RetentionPruner) private readonly pruner: RetentionPruner) {}

  onModuleInit(): void {
    this.pruner.register('worktree-service-job-statuses', (pass) => this.prune(pass));
  }

  async prune(pass: RetentionPass): Promise<{ jobStatuses: number }> {
    const retentionMs = jobStatusesRetentionMs(pass);
    if (retentionMs === 0) return { jobStatuses: 0 };
    const endedBefore = new Date(pass.now.getTime() - retentionMs);
    return { jobStatuses: await pruneJobStatuses(pass.pool, { endedBefore, consumer: JOBS_CONSUMER, batchSize: BATCH_SIZE, maxBatches: MAX_BATCHES }) };
  }
}
