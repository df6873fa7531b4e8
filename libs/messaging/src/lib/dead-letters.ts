import type { JetStreamClient } from '@nats-io/jetstream';
import { headers as natsHeaders } from '@nats-io/transport-node';
import type pg from 'pg';
import { withTransaction } from '@gantry/eventstore';

/** The header of an event handed back from the dead letters: the one consumer it is for. */
export const REPLAYED_FOR_HEADER = 'Gantry-Replayed-For';

/** A dead letter as an operator sees it: what failed, where, and why (the payload stays in the table). */
export interface DeadLetter {
  id: number;
  consumer: string;
  subject: string;
  streamSequence: number | null;
  eventId: string | null;
  /** `handler_failed` (the handler failed on its last delivery) or `invalid_payload` (it failed its schema). */
  kind: string;
  error: Record<string, unknown>;
  recordedAt: string;
}

export interface DeadLetterFilter {
  /** Only this consumer's dead letters. */
  consumer?: string;
  /** Only these dead letters. */
  ids?: readonly number[];
}

export interface ReplayOutcome {
  /** Published again to their consumer's stream, and deleted from the table. */
  replayed: number[];
  /** Left in the table: payloads that failed their schema would fail it again. */
  skipped: Array<{ id: number; reason: string }>;
  /** The publish that failed (the ones before it were replayed; the ones after it were not tried). */
  failed: { id: number; error: string } | null;
}

type DeadLetterRow = {
  id: string;
  consumer: string;
  subject: string;
  stream_sequence: string | null;
  event_id: string | null;
  error: Record<string, unknown>;
  recorded_at: Date;
};

const WHERE = `($1::text IS NULL OR consumer = $1) AND ($2::bigint[] IS NULL OR id = ANY($2))`;

/** The dead letters of this service's consumers, oldest first, at most `limit`. */
export async function listDeadLetters(pool: pg.Pool, filter: DeadLetterFilter = {}, limit = 100): Promise<DeadLetter[]> {
  const { rows } = await pool.query<DeadLetterRow>(
    `SELECT id, consumer, subject, stream_sequence, event_id, error, recorded_at FROM dead_letters WHERE ${WHERE} ORDER BY id LIMIT $3`,
    [filter.consumer ?? null, filter.ids ?? null, limit],
  );
  return rows.map((r) => ({
    id: Number(r.id),
    consumer: r.consumer,
    subject: r.subject,
    streamSequence: r.stream_sequence === null ? null : Number(r.stream_sequence),
    eventId: r.event_id,
    kind: String(r.error['kind'] ?? 'unknown'),
    error: r.error,
    recordedAt: r.recorded_at.toISOString(),
  }));
}

/**
 * Hands dead-lettered events back to their consumers (docs/operations.md, "Dead letters"): each is
 * published again on its subject, to the stream it came from, and its row deleted once JetStream has
 * it, in one transaction that holds the rows (a second replay at the same time skips them). The
 * consumer takes it like any delivery: in its inbox transaction, with its retries, and to the dead
 * letters again if it fails again. Every other consumer of the subject acknowledges it without
 * running anything: the message names its consumer (REPLAYED_FOR_HEADER). A crash between the publish and the commit leaves the row: the next replay
 * publishes it again under the same message id, which JetStream drops within its duplicate window,
 * and the consumer's inbox after it.
 *
 * Only events whose handler failed are replayed; a payload that failed its schema is left where it is.
 * So is one dead-lettered longer ago than `receiptWindow` unless `force`: the commands its handler
 * sent on its earlier deliveries went under keys whose receipts may have been pruned since, and
 * sent again they would be done a second time (docs/operations.md, "Dead letters").
 */
export async function replayDeadLetters(
  pool: pg.Pool,
  js: JetStreamClient,
  filter: DeadLetterFilter,
  limit = 500,
  options: { receiptWindow?: { ms: number; setting: string }; force?: boolean } = {},
): Promise<ReplayOutcome> {
  return withTransaction(pool, async (client) => {
    const outcome: ReplayOutcome = { replayed: [], skipped: [], failed: null };
    // The age by the database's clock, the one that stamped recorded_at.
    const { rows } = await client.query<DeadLetterRow & { payload: string; age_ms: number }>(
      `SELECT id, consumer, subject, event_id, payload, error, (extract(epoch FROM now() - recorded_at) * 1000)::float8 AS age_ms
         FROM dead_letters WHERE ${WHERE} ORDER BY id LIMIT $3 FOR UPDATE SKIP LOCKED`,
      [filter.consumer ?? null, filter.ids ?? null, limit],
    );
    const window = options.force ? undefined : options.receiptWindow;
    for (const row of rows) {
      const id = Number(row.id);
      if (row.error['kind'] !== 'handler_failed' || row.event_id === null) {
        outcome.skipped.push({ id, reason: `${String(row.error['kind'] ?? 'unknown')}: it would fail the same way again` });
        continue;
      }
      if (window && row.age_ms >= window.ms) {
        outcome.skipped.push({
          id,
          reason:
            `dead-lettered ${hours(row.age_ms)} ago, longer than the receipt window (${window.setting}: ${hours(window.ms)}): ` +
            `a command its handler sent before may no longer have its receipt and would be done a second time; ` +
            `replay it by id with "force": true once you have checked it was not done`,
        });
        continue;
      }
      try {
        // Named for its consumer: the others of the subject leave it alone (EventConsumer), also once their
        // inbox rows of the event are pruned — dead letters outlive them (docs/operations.md, "Dead letters").
        const headers = natsHeaders();
        headers.set(REPLAYED_FOR_HEADER, row.consumer);
        await js.publish(row.subject, row.payload, { msgID: `${row.event_id}:dead-letter:${row.consumer}:${id}`, headers });
      } catch (error) {
        outcome.failed = { id, error: error instanceof Error ? error.message : String(error) };
        break;
      }
      outcome.replayed.push(id);
    }
    if (outcome.replayed.length > 0) await client.query(`DELETE FROM dead_letters WHERE id = ANY($1::bigint[])`, [outcome.replayed]);
    return outcome;
  });
}

function hours(ms: number): string {
  const h = ms / 3_600_000;
  return h >= 48 ? `${Math.floor(h / 24)} days` : h >= 1 ? `${Math.floor(h)} hours` : `${Math.round(ms / 1000)} s`;
}

export interface DiscardOutcome {
  /** Deleted: their consumers will not be given them. */
  discarded: Array<{ id: number; consumer: string; eventId: string | null; kind: string }>;
  /** Not there (never were, already replayed or discarded, or pruned); a replay holding one is waited for. */
  missing: number[];
}

/**
 * Deletes dead letters an operator has looked at and decided against (docs/operations.md, "Dead
 * letters"): a payload that failed its schema, or an event whose effect is no longer wanted. By id
 * only, so that nothing goes unseen. A replay holding one of them is waited for; what it handed back
 * is then reported missing.
 */
export async function discardDeadLetters(pool: pg.Pool, ids: readonly number[]): Promise<DiscardOutcome> {
  const { rows } = await pool.query<{ id: string; consumer: string; event_id: string | null; kind: string | null }>(
    `DELETE FROM dead_letters WHERE id = ANY($1::bigint[]) RETURNING id, consumer, event_id, error->>'kind' AS kind`,
    [ids],
  );
  const discarded = rows.map((r) => ({ id: Number(r.id), consumer: r.consumer, eventId: r.event_id, kind: r.kind ?? 'unknown' })).sort((a, b) => a.id - b.id);
  const gone = new Set(discarded.map((d) => d.id));
  return { discarded, missing: [...new Set(ids)].filter((id) => !gone.has(id)).sort((a, b) => a - b) };
}
