import type pg from 'pg';
import { deleteInBatches, noDeadLetterNames } from '@gantry/eventstore';

export interface RunRecordsPrune {
  /** `task_jobs` and `queued_runs` rows of jobs that ended before this go. */
  endedBefore: Date;
  /** `queued_runs` rows that never learnt their job (an enqueue refused, or never answered) go once queued before this. */
  neverKnownBefore: Date;
  /** The job events' consumer: a row whose job or run key one of its dead letters names is kept, for the letter's hand-back. */
  consumer: string;
  batchSize: number;
  /** Per table and pass; the rest goes at the next pass. */
  maxBatches: number;
}

/** The entry a run was queued for is still open: its dispatch may look the run up again (entryRunOf, queuedRunByKey). */
const ENTRY_OPEN = `EXISTS (SELECT 1 FROM step_entries e
  WHERE e.task_id = queued_runs.task_id AND e.workflow_id = queued_runs.workflow_id AND e.step_id = queued_runs.step_id
    AND e.entry_seq = queued_runs.entry_seq AND NOT e.terminal)`;

/**
 * Deletes the engine's records of runs and jobs it can no longer be asked about (docs/workflow-engine.md,
 * "Retention of runs and jobs"). Each batch is one statement: a crash mid-prune leaves whole rows, and
 * two replicas pruning at once delete each row once; a row a dead letter names is kept (noDeadLetterNames).
 */
export async function pruneRunRecords(pool: pg.Pool, prune: RunRecordsPrune): Promise<{ taskJobs: number; queuedRuns: number }> {
  const taskJobs = await deleteInBatches(
    pool,
    'task_jobs',
    `ended_at < $1 AND ${noDeadLetterNames('$2', ['task_jobs.job_id'])}`,
    [prune.endedBefore, prune.consumer],
    prune.batchSize,
    prune.maxBatches,
  );
  const queuedRuns = await deleteInBatches(
    pool,
    'queued_runs',
    `(ended_at < $1 OR (job_id IS NULL AND queued_at < $2)) AND NOT ${ENTRY_OPEN}
      AND ${noDeadLetterNames('$3', ['queued_runs.idempotency_key', 'queued_runs.job_id'])}`,
    [prune.endedBefore, prune.neverKnownBefore, prune.consumer],
    prune.batchSize,
    prune.maxBatches,
  );
  return { taskJobs, queuedRuns };
}
