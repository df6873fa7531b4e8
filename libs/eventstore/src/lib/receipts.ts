import pg from 'pg';
import { canonicalHash, ErrorCode, ErrorPayloadSchema, GantryError, scrubStrings, type ErrorPayload, type SecretScrubber } from '@gantry/contracts';
import { storableStrings } from './storable-text.js';
import type { IdempotencyOptions } from './types.js';

/** What a command under an idempotency key answered: its result, or the refusal it was given. */
export type Receipt = { ok: true; result: unknown } | { ok: false; error: ErrorPayload };

/**
 * Claims the key for this attempt, in the command's transaction: returns the stored receipt of an
 * earlier attempt (the caller answers with it and writes nothing), or null when this attempt now
 * owns the key. A concurrent attempt with the same key waits on the unique index until the first
 * commits (then reads its receipt) or rolls back (then owns the key). A receipt whose window has
 * passed is taken over as if it were not there; a different request under a live key is
 * IDEMPOTENCY_CONFLICT.
 */
export async function claimReceipt(
  client: pg.PoolClient,
  idempotency: IdempotencyOptions,
  requestHash: string,
  window: { now: () => Date; defaultTtlMs: number },
  options: { begin?: boolean; alongside?: Alongside } = {},
): Promise<Receipt | null> {
  // Every receipt ends: its own window, or the store's default, after which pruning may delete it.
  const expiresAt = new Date(window.now().getTime() + (idempotency.ttlMs ?? window.defaultTtlMs));
  for (let first = true; ; first = false) {
    const inserted =
      first && options.begin
        ? await beginAndInsert(client, idempotency, requestHash, expiresAt, options.alongside)
        : await client.query(
            `INSERT INTO idempotency_receipts (scope, key, request_hash, result, expires_at) VALUES ($1, $2, $3, NULL, $4)
             ON CONFLICT (scope, key) DO NOTHING RETURNING 1`,
            [idempotency.scope, idempotency.key, requestHash, expiresAt],
          );
    if (inserted.rowCount === 1) return null;
    const { rows } = await client.query<{ request_hash: string; result: Receipt | null; expires_at: Date | null }>(
      `SELECT request_hash, result, expires_at FROM idempotency_receipts WHERE scope = $1 AND key = $2`,
      [idempotency.scope, idempotency.key],
    );
    const existing = rows[0];
    if (!existing) continue; // removed between the two statements: try to claim it again
    if (existing.expires_at && existing.expires_at.getTime() <= window.now().getTime()) {
      const taken = await client.query(
        `UPDATE idempotency_receipts SET request_hash = $3, result = NULL, expires_at = $4, created_at = now()
         WHERE scope = $1 AND key = $2 AND expires_at <= $5 RETURNING 1`,
        [idempotency.scope, idempotency.key, requestHash, expiresAt, window.now()],
      );
      if (taken.rowCount === 1) return null;
      continue;
    }
    if (existing.request_hash !== requestHash && !(await answersAsFormer(client, idempotency, existing))) {
      throw new GantryError(ErrorCode.IDEMPOTENCY_CONFLICT, `idempotency key ${idempotency.key} was already used for a different request`, {
        scope: idempotency.scope,
        key: idempotency.key,
      });
    }
    if (existing.result === null) throw new Error('idempotency receipt committed without a result');
    if (!existing.result.ok) ErrorPayloadSchema.parse(existing.result.error);
    return existing.result;
  }
}

/**
 * Whether the key holds the answer to this very request, within its window: a repeat of it is
 * answered from the receipt. Reads only; claims nothing (an attempt still under way is not seen).
 */
export async function answeredUnder(pool: pg.Pool, idempotency: IdempotencyOptions, requestHash: string, now: Date): Promise<boolean> {
  const { rows } = await pool.query<{ request_hash: string; result: Receipt | null }>(
    `SELECT request_hash, result FROM idempotency_receipts
      WHERE scope = $1 AND key = $2 AND result IS NOT NULL AND (expires_at IS NULL OR expires_at > $3)`,
    [idempotency.scope, idempotency.key, now],
  );
  const existing = rows[0];
  return existing !== undefined && (existing.request_hash === requestHash || (await answersAsFormer(pool, idempotency, existing)));
}

/**
 * Whether a receipt stored under another request's hash is the answer to this one all the same: its
 * hash is one an earlier version of the command gave this request (IdempotencyOptions.former), and
 * that former request's `accepts` takes the answer.
 */
async function answersAsFormer(sql: pg.Pool | pg.PoolClient, idempotency: IdempotencyOptions, existing: { request_hash: string; result: Receipt | null }): Promise<boolean> {
  if (existing.result === null) return false;
  for (const former of idempotency.former ?? []) {
    if (canonicalHash(former.request) !== existing.request_hash) continue;
    if (!former.accepts || (await former.accepts(existing.result, sql))) return true;
  }
  return false;
}

/**
 * The result a command under `scope` / `key` answered with, within the receipt's window, whatever its
 * request; null when none was answered (a refusal, or nothing committed under the key).
 */
export async function storedResult(pool: pg.Pool | pg.PoolClient, scope: string, key: string, now: Date): Promise<unknown> {
  const { rows } = await pool.query<{ result: Receipt | null }>(
    `SELECT result FROM idempotency_receipts WHERE scope = $1 AND key = $2 AND (expires_at IS NULL OR expires_at > $3)`,
    [scope, key, now],
  );
  const receipt = rows[0]?.result;
  return receipt && receipt.ok ? receipt.result : null;
}

const literal = (value: string) => pg.escapeLiteral(value);

/*
 * The two statements below go to PostgreSQL as one simple-protocol message with their values
 * written as literals (pg's escapeLiteral): two statements, one round trip. Parameters would need
 * the extended protocol, one statement per round trip, and a command's cost here is round trips.
 */

/** Statements (reads) sent in the same message as BEGIN and the claim; their results are put in `results`. */
export interface Alongside {
  statements: string[];
  results?: pg.QueryResult[];
}

/** Opens the command's transaction and claims the key in one round trip (with the reads alongside, if any). */
async function beginAndInsert(
  client: pg.PoolClient,
  idempotency: IdempotencyOptions,
  requestHash: string,
  expiresAt: Date,
  alongside?: Alongside,
): Promise<{ rowCount: number | null }> {
  const results = (await client.query(
    [
      `BEGIN; INSERT INTO idempotency_receipts (scope, key, request_hash, result, expires_at)
     VALUES (${literal(idempotency.scope)}, ${literal(idempotency.key)}, ${literal(requestHash)}, NULL, ${literal(expiresAt.toISOString())}::timestamptz)
     ON CONFLICT (scope, key) DO NOTHING RETURNING 1`,
      ...(alongside?.statements ?? []),
    ].join(';\n'),
  )) as unknown as pg.QueryResult[];
  if (alongside) alongside.results = results.slice(2);
  return results[1]!;
}

/**
 * A receipt as it is stored and answered, first time and every repeat alike: a refusal's text (its
 * message, details, issues) goes through the secret scrubber (docs/configuration.md, "Secrets in
 * events"); a result is stored as the command returned it.
 */
function asStored<T extends Receipt>(receipt: T, scrub: SecretScrubber): T {
  return receipt.ok ? receipt : { ...receipt, error: scrubStrings(receipt.error, scrub) };
}

/** Stores the command's answer under the key it claimed and commits, in one round trip; returns the answer as stored. */
export async function storeReceiptAndCommit<T extends Receipt>(client: pg.PoolClient, idempotency: IdempotencyOptions, receipt: T, scrub: SecretScrubber): Promise<T> {
  const stored = asStored(receipt, scrub);
  await client.query(
    `UPDATE idempotency_receipts SET result = ${literal(JSON.stringify(stored, storableStrings))}::jsonb
      WHERE scope = ${literal(idempotency.scope)} AND key = ${literal(idempotency.key)}; COMMIT`,
  );
  return stored;
}

/**
 * Stores a refusal after its transaction was rolled back (the refusal wrote nothing else), in a
 * transaction of its own. When another attempt under the key got there first, its receipt is the
 * answer, as for any repeat.
 */
export async function storeRefusal(
  pool: pg.Pool,
  idempotency: IdempotencyOptions,
  requestHash: string,
  refusal: Receipt & { ok: false },
  window: { now: () => Date; defaultTtlMs: number },
  scrub: SecretScrubber,
): Promise<Receipt> {
  const client = await pool.connect();
  try {
    const earlier = await claimReceipt(client, idempotency, requestHash, window, { begin: true });
    if (earlier) {
      await client.query('ROLLBACK');
      return earlier;
    }
    return await storeReceiptAndCommit(client, idempotency, refusal, scrub);
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  } finally {
    client.release();
  }
}

/** Stores what the command answered under the key this attempt claimed; returns the answer as stored. */
export async function storeReceipt<T extends Receipt>(client: pg.PoolClient, idempotency: IdempotencyOptions, receipt: T, scrub: SecretScrubber): Promise<T> {
  const stored = asStored(receipt, scrub);
  await client.query(`UPDATE idempotency_receipts SET result = $3 WHERE scope = $1 AND key = $2`, [
    idempotency.scope,
    idempotency.key,
    JSON.stringify(stored, storableStrings),
  ]);
  return stored;
}
