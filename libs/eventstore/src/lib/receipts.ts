import type pg from 'pg';
import { ErrorCode, ErrorPayloadSchema, GantryError, type ErrorPayload } from '@gantry/contracts';
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
): Promise<Receipt | null> {
  // Every receipt ends: its own window, or the store's default, after which pruning may delete it.
  const expiresAt = new Date(window.now().getTime() + (idempotency.ttlMs ?? window.defaultTtlMs));
  for (;;) {
    const inserted = await client.query(
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
    if (existing.request_hash !== requestHash) {
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

/** Stores what the command answered under the key this attempt claimed. */
export async function storeReceipt(client: pg.PoolClient, idempotency: IdempotencyOptions, receipt: Receipt): Promise<void> {
  await client.query(`UPDATE idempotency_receipts SET result = $3 WHERE scope = $1 AND key = $2`, [
    idempotency.scope,
    idempotency.key,
    JSON.stringify(receipt),
  ]);
}
