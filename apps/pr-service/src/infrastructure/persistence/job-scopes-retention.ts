import type pg from 'pg';
import { deleteInBatches, noDeadLetterNames } from '@gantry/eventstore';

export interface JobScopesPrune {
  /** Rows of jobs whose end the service learnt before this go (when their pull request lets them). */
  endedBefore: Date;
  /** The pull request of a job's branch must have settled before this (or never have had a head). */
  settledBefore: Date;
  /** The job events' consumer: a row whose job one of its dead letters names is kept, for the letter's hand-back. */
  consumer: string;
  batchSize: number;
  /** Per pass; the rest goes at the next pass. */
  maxBatches: number;
}

/**
 * The pull request of the job's (repository, branch) may still report red checks on a head the job
 * pushed (the job service turns them into JobChecksFailed about the job): it has a head and is not
 * settled, or settled too recently for its last PullRequestChecksFailed to have come through.
 */
const PULL_REQUEST_LIVE = `EXISTS (SELECT 1 FROM pull_requests p WHERE p.repository = job_scopes.repository AND p.branch = job_scopes.branch
  AND p.phase <> 'none' AND (NOT p.settled OR p.updated_at IS NULL OR p.updated_at >= $2))`;

/**
 * Deletes the scopes of jobs no event can be about any more (docs/pr-service.md, "Retention of job
 * scopes"). Each batch is one statement: a crash mid-prune leaves whole rows, and two replicas
 * pruning at once delete each row once; a row a dead letter names is kept (noDeadLetterNames).
 */
export async function pruneJobScopes(pool: pg.Pool, prune: JobScopesPrune): Promise<number> {
  return deleteInBatches(
    pool,
    'job_scopes',
    `ended_at < $1 AND NOT ${PULL_REQUEST_LIVE}
      AND ${noDeadLetterNames('$3', ['job_scopes.job_id'])}`,
    [prune.endedBefore, prune.settledBefore, prune.consumer],
    prune.batchSize,
    prune.maxBatches,
  );
}
