import type pg from 'pg';
import type { MigrationInterface, QueryRunner } from 'typeorm';

/** How long a receipt stored without a window of its own answers a repeat of its key. */
export const DEFAULT_RECEIPT_TTL_MS = 7 * 24 * 60 * 60 * 1000;
/** How long a dead letter is kept for someone to look at. */
export const DEFAULT_DEAD_LETTER_RETENTION_MS = 30 * 24 * 60 * 60 * 1000;

/**
 * Indexes the pruning deletes by, and an expiry for receipts stored before receipts always had one
 * (the default receipt window from their creation).
 */
export class EventLogRetention1765000000000 implements MigrationInterface {
  name = 'EventLogRetention1765000000000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`UPDATE idempotency_receipts SET expires_at = created_at + make_interval(secs => $1) WHERE expires_at IS NULL`, [
      DEFAULT_RECEIPT_TTL_MS / 1000,
    ]);
    await q.query(`CREATE INDEX idempotency_receipts_expiry ON idempotency_receipts (expires_at)`);
    await q.query(`CREATE INDEX inbox_age ON inbox (consumer, processed_at)`);
    await q.query(`CREATE INDEX dead_letters_age ON dead_letters (recorded_at)`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP INDEX IF EXISTS dead_letters_age`);
    await q.query(`DROP INDEX IF EXISTS inbox_age`);
    await q.query(`DROP INDEX IF EXISTS idempotency_receipts_expiry`);
  }
}

export interface PruneRequest {
  /** Receipts whose window ended at or before this are deleted. */
  now: Date;
  /** Dead letters recorded before this are deleted; absent keeps them all. */
  deadLettersBefore?: Date;
  /** Per consumer, inbox rows processed before this are deleted (the source stream no longer holds those events). */
  inboxBefore?: ReadonlyArray<{ consumer: string; before: Date }>;
  /** Rows per DELETE: each batch is its own short transaction, so pruning never holds locks for long. */
  batchSize?: number;
}

export interface PruneResult {
  receipts: number;
  inbox: number;
  deadLetters: number;
}

/**
 * Deletes the rows of `table` that `where` (over the table's own columns, `$1`… from `params`)
 * selects, `batchSize` at a time, each batch one statement and so its own short transaction: a
 * crash between batches leaves whole rows, the rest for the next pass. Rows another replica deletes
 * meanwhile are skipped, not counted twice. With `maxBatches`, a pass stops after that many full
 * batches (what is left goes at the next pass), so one pass over a large backlog stays short.
 */
export async function deleteInBatches(
  pool: pg.Pool,
  table: string,
  where: string,
  params: unknown[],
  batchSize: number,
  maxBatches = Number.POSITIVE_INFINITY,
): Promise<number> {
  let total = 0;
  for (let batches = 0; batches < maxBatches; batches++) {
    const { rowCount } = await pool.query(
      `DELETE FROM ${table} WHERE ctid = ANY(ARRAY(SELECT ctid FROM ${table} WHERE ${where} LIMIT ${batchSize}))`,
      params,
    );
    total += rowCount ?? 0;
    if ((rowCount ?? 0) < batchSize) return total;
  }
  return total;
}

/**
 * A `deleteInBatches` condition: no dead letter of the consumer given as `consumerParam` (`$2`, say)
 * names any of `columns` (qualified: `task_jobs.job_id`) — a row such a letter's hand-back may still
 * need is kept. The payload is searched as text (it may not be JSON): a match by chance keeps a row
 * longer, never shorter.
 */
export function noDeadLetterNames(consumerParam: string, columns: readonly string[]): string {
  const named = columns.map((column) => `strpos(d.payload, ${column}) > 0`).join(' OR ');
  return `NOT EXISTS (SELECT 1 FROM dead_letters d WHERE d.consumer = ${consumerParam} AND (${named}))`;
}

/**
 * Deletes what the log no longer needs: receipts whose window has passed (a repeat of such a key
 * would be a new request anyway, see EventStore.execute), inbox rows of events their stream has
 * already dropped (nothing can redeliver them), and old dead letters. Never touches events, the
 * outbox or projections. Safe to run on several replicas at once.
 */
export async function pruneExpired(pool: pg.Pool, request: PruneRequest): Promise<PruneResult> {
  const batch = request.batchSize ?? 1000;
  const receipts = await deleteInBatches(pool, 'idempotency_receipts', 'expires_at <= $1', [request.now], batch);
  let inbox = 0;
  for (const { consumer, before } of request.inboxBefore ?? []) {
    inbox += await deleteInBatches(pool, 'inbox', 'consumer = $1 AND processed_at < $2', [consumer, before], batch);
  }
  const deadLetters = request.deadLettersBefore
    ? await deleteInBatches(pool, 'dead_letters', 'recorded_at < $1', [request.deadLettersBefore], batch)
    : 0;
  return { receipts, inbox, deadLetters };
}
