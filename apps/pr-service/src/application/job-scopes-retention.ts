import { Inject, Injectable, type OnModuleInit } from '@nestjs/common';
import { lateEventMs, RetentionPruner, type RetentionPass } from '@gantry/service-runtime';
import { pruneJobScopes } from '../infrastructure/persistence/job-scopes-retention.js';
import { JOB_FACTS_CONSUMER } from './job-facts.js';
import { EFFECTS_CONSUMER } from './reconciler.js';

/** Rows per DELETE, and DELETEs in one pass of the pruning job. */
const BATCH_SIZE = 1000;
const MAX_BATCHES = 50;

export interface JobScopesRetentionMs {
  /** After a job's end: the latest an event about it, published before, can still reach this service. */
  ended: number;
  /**
   * After its pull request settled: the latest a JobChecksFailed about it can come — a
   * PullRequestChecksFailed published before, reaching the job service by the longest way over the
   * prs stream, and the JobChecksFailed it makes reaching this service by the longest way over the jobs stream.
   */
  settled: number;
}

/**
 * The longest an event can take from its publication to its consumer (lateEventMs): over the jobs
 * stream to this service after the job's end; over the prs stream to the job service (whose consumer
 * of it is taken to have the window this service's own consumer of the prs stream has, and to hand back
 * its dead letters within the same receipt window), then again over the jobs stream, after the pull
 * request settled. Both 0 (nothing pruned) when either stream keeps events without an age limit.
 * See docs/pr-service.md ("Retention of job scopes").
 */
export function jobScopesRetentionMs(pass: Pick<RetentionPass, 'redeliveryWindowMs' | 'receiptTtlMs'>): JobScopesRetentionMs {
  const ended = lateEventMs(pass, JOB_FACTS_CONSUMER);
  const overPrs = lateEventMs(pass, EFFECTS_CONSUMER);
  if (ended === 0 || overPrs === 0) return { ended: 0, settled: 0 };
  return { ended, settled: overPrs + ended };
}

/**
 * Prunes `job_scopes` on the service's pruning job (RetentionPruner): a job's row once its end was
 * learnt more than the retention ago, its branch's pull request (if it has a head) settled long
 * enough ago, and no dead letter names it.
 */
@Injectable()
export class JobScopesRetention implements OnModuleInit {
  constructor(@Inject(RetentionPruner) private readonly pruner: RetentionPruner) {}

  onModuleInit(): void {
    this.pruner.register('pr-service-job-scopes', (pass) => this.prune(pass));
  }

  async prune(pass: RetentionPass): Promise<{ jobScopes: number }> {
    const retention = jobScopesRetentionMs(pass);
    if (retention.ended === 0) return { jobScopes: 0 };
    return {
      jobScopes: await pruneJobScopes(pass.pool, {
        endedBefore: new Date(pass.now.getTime() - retention.ended),
        settledBefore: new Date(pass.now.getTime() - retention.settled),
        consumer: JOB_FACTS_CONSUMER,
        batchSize: BATCH_SIZE,
        maxBatches: MAX_BATCHES,
      }),
    };
  }
}
