import { Inject, Injectable, type OnModuleInit } from '@nestjs/common';
import { ENQUEUE_IDEMPOTENCY_WINDOW_MS } from '@gantry/contracts';
import { lateEventMs, RetentionPruner, type RetentionPass } from '@gantry/service-runtime';
import { pruneRunRecords } from '../infrastructure/persistence/run-records-retention.js';
import { JOB_EVENTS_CONSUMER } from './job-events.js';

/** Rows per DELETE, and DELETEs per table in one pass of the pruning job. */
const BATCH_SIZE = 1000;
const MAX_BATCHES = 50;

/**
 * How long after a job ended an event about it may still reach the engine (lateEventMs, over the jobs
 * stream). See docs/workflow-engine.md ("Retention of runs and jobs").
 */
export function runRecordsRetentionMs(pass: Pick<RetentionPass, 'redeliveryWindowMs' | 'receiptTtlMs'>): number {
  return lateEventMs(pass, JOB_EVENTS_CONSUMER);
}

/**
 * Prunes `task_jobs` and `queued_runs` on the service's pruning job (RetentionPruner): a job's rows
 * once no event about it can come any more, a run's once its entry ended too (no dispatch looks it
 * up again); a run that never learnt its job once no enqueue of it or JobEnqueued can come either.
 */
@Injectable()
export class RunRecordsRetention implements OnModuleInit {
  constructor(@Inject(RetentionPruner) private readonly pruner: RetentionPruner) {}

  onModuleInit(): void {
    this.pruner.register('workflow-engine-runs', (pass) => this.prune(pass));
  }

  async prune(pass: RetentionPass): Promise<{ taskJobs: number; queuedRuns: number }> {
    const retentionMs = runRecordsRetentionMs(pass);
    if (retentionMs === 0) return { taskJobs: 0, queuedRuns: 0 };
    const endedBefore = new Date(pass.now.getTime() - retentionMs);
    return pruneRunRecords(pass.pool, {
      endedBefore,
      // An enqueue is tried again within the run queue's window (EngineSettings refuses patience beyond it).
      neverKnownBefore: new Date(endedBefore.getTime() - ENQUEUE_IDEMPOTENCY_WINDOW_MS),
      consumer: JOB_EVENTS_CONSUMER,
      batchSize: BATCH_SIZE,
      maxBatches: MAX_BATCHES,
    });
  }
}
