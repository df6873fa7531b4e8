import { Inject, Injectable, type OnModuleInit } from '@nestjs/common';
import { RetentionPruner, type RetentionPass } from '@gantry/service-runtime';
import { pruneJobStatuses } from '../infrastructure/persistence/job-statuses-retention.js';
import { JOBS_CONSUMER } from './job-lifecycle.js';

/** Rows per DELETE, and DELETEs in one pass of the pruning job. */
const BATCH_SIZE = 1000;
const MAX_BATCHES = 50;

/**
 * How long after a job's end was recorded an event about it may still reach this service, by the
 * longest way: redelivered from the jobs stream while it holds the event (its max age); dead-lettered
 * within that, handed back by an operator within the receipt window (an older one is skipped without
 * `force`), and delivered from the stream within its max age again. 0 when the stream keeps events
 * without an age limit: nothing is pruned then. See docs/worktrees.md ("Retention of job statuses").
 */
export function jobStatusesRetentionMs(pass: Pick<RetentionPass, 'redeliveryWindowMs' | 'receiptTtlMs'>): number {
  const windowMs = pass.redeliveryWindowMs(JOBS_CONSUMER);
  return windowMs > 0 ? pass.receiptTtlMs + 2 * windowMs : 0;
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
