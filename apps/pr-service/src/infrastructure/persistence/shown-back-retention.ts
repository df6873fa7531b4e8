import type pg from 'pg';
import { deleteInBatches } from '@gantry/eventstore';

/**
 * Deletes the `pull_request_shown_back` rows no read can go on from: of a pull request that settled, or last read
 * before `readBefore` (or never: rows from before `last_read` was kept). Each batch is one statement: a crash mid-prune
 * leaves whole rows, and two replicas pruning at once delete each row once.
 */
export async function pruneShownBack(pool: pg.Pool, prune: { readBefore: Date; batchSize: number; maxBatches: number }): Promise<number> {
  return deleteInBatches(
    pool,
    'pull_request_shown_back',
    `last_read IS NULL OR last_read::timestamptz < $1
      OR EXISTS (SELECT 1 FROM pull_requests p WHERE p.pull_request_id = pull_request_shown_back.pull_request_id AND p.settled)`,
    [prune.readBefore],
    prune.batchSize,
    prune.maxBatches,
  );
}
