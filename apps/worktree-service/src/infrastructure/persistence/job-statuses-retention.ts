import type pg from 'pg';
import { deleteInBatches, noDeadLetterNames } from '@gantry/eventstore';

export interface JobStatusesPrune {
  /** Rows of jobs whose end was recorded before this go. */
  endedBefore: Date;
  /** The jobs stream's consumer: a row whose job one of its dead letters names is kept, for the letter's hand-back. */
  consumer: string;
  batchSize: number;
  /** Per pass; the rest goes at the next pass. */
  maxBatches: number;
}

/**
 * A lease of the job is still live — being acquired, held, released, or waiting for its holder's
 * release (a ready lease with a pending cause): the stale reset and the server-side release judge it
 * by the job's row (claimVerdict).
 */
const LEASE_LIVE = `EXISTS (SELECT 1 FROM worktree_leases l WHERE l.job_id = job_statuses.job_id
  AND l.status NOT IN ('released', 'lock_timeout', 'sync_failed', 'stale_released', 'withdrawn'))`;

/**
 * Deletes what the service learnt of jobs it can no longer hear of (docs/worktrees.md, "Retention of
 * job statuses"). Each batch is one statement: a crash mid-prune leaves whole rows, and two replicas
 * pruning at once delete each row once; a row a dead letter names is kept (noDeadLetterNames).
 */
export async function pruneJobStatuses(pool: pg.Pool, prune: JobStatusesPrune): Promise<number> {
  return deleteInBatches(
    pool,
    'job_statuses',
    `ended_at < $1 AND NOT ${LEASE_LIVE}
      AND ${noDeadLetterNames('$2', ['job_statuses.job_id'])}`,
    [prune.endedBefore, prune.consumer],
    prune.batchSize,
    prune.maxBatches,
  );
}
