import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { canonicalHash, ErrorCode, GantryError, scrubbingReplacer, type SecretScrubber } from '@gantry/contracts';
import type { CommandBatcher } from './batching.js';
import { fold, type Decider, type Decision, type DomainEvent } from './decider.js';
import type { SqlWriter } from './deferred-writes.js';
import type { Statement } from './prepared.js';
import { project, type Projection } from './projection.js';
import type { CommandMetadata, ExecuteResult, IdempotencyOptions, StoredEvent } from './types.js';
import { isRetryable } from './unit-of-work.js';

/** A decider command on one stream, as handleWithDecider takes it. */
export interface DecisionSpec<Command, State, Event extends DomainEvent, Result> {
  decider: Decider<Command, State, Event>;
  streamId: string;
  command: Command;
  metadata: CommandMetadata;
  idempotency?: IdempotencyOptions;
  reply: (decision: Decision<State, Event>) => Result;
}

/** What the one-message path needs of its event store. */
export interface OneMessageContext {
  now: () => Date;
  receiptTtlMs: number;
  scrub: SecretScrubber;
  projections: readonly Projection[];
  maxAttempts: number;
  /** Stores a refusal under the key, or answers with the receipt an earlier attempt left. */
  refuse<R>(idempotency: IdempotencyOptions, error: GantryError): Promise<ExecuteResult<R>>;
  /** Where the reads and the write messages go, together with those of other commands. */
  batcher: CommandBatcher;
  /** Waits a little before deciding again after a conflict. */
  pause(attempt: number): Promise<void>;
}

/** The full path must take the command; nothing was written. */
export const FULL_PATH = Symbol('full path');

/** Thrown by the stand-in connection when a projection wants a transaction of its own to read in. */
class NeedsTransaction extends Error {}

const noConnection = {
  query: () => {
    throw new NeedsTransaction('this projection reads inside the transaction');
  },
} as unknown as pg.PoolClient;


/**
 * A decider command on a stream that already exists, in two round trips and without holding a
 * transaction open while Node decides: the stream is read (no transaction), the decider decides,
 * and everything the command writes goes to PostgreSQL as one simple-protocol message — the
 * receipt with its answer, the events at the versions after the ones read, their outbox rows, and
 * the inline projections' rows. PostgreSQL runs a message of several statements as one implicit
 * transaction, so they all commit together or not at all, as on the full path.
 *
 * The compare-and-set is the unique (stream_id, stream_version) constraint: the events are written
 * at the versions that follow the read, so a writer that appended in between makes the message
 * fail on it (VERSION_CONFLICT: read and decide again). The receipt is inserted, not claimed
 * first: a key that already has one (a repeat, a concurrent duplicate, an expired receipt) makes
 * the message fail on the receipt's key, and the full path answers it the way it answers every
 * repeat. A refusal is stored the way the full path stores one.
 *
 * Returns FULL_PATH when the command must take the full path instead: the stream does not exist
 * yet (its first events may need their positions, which are known only after the insert), an
 * inline projection reads in the transaction, or the key already has a receipt. The reply is
 * computed before the write (it is stored in the receipt), so it must not use the events'
 * positions: they are filled in once the message has committed.
 */
export async function decideInOneMessage<Command, State, Event extends DomainEvent, Result>(
  context: OneMessageContext,
  spec: DecisionSpec<Command, State, Event, Result>,
): Promise<ExecuteResult<Result> | typeof FULL_PATH> {
  for (let attempt = 1; ; attempt++) {
    const history = await context.batcher.reads.load(spec.streamId);
    if (history.length === 0) return FULL_PATH;
    const now = context.now();
    let result: Result;
    let events: StoredEvent[];
    let json: string[];
    try {
      const before = fold(spec.decider, history);
      const decided = spec.decider.decide(spec.command, before);
      ({ events, json } = pendingEvents(spec, history.length, decided, now, context.scrub));
      const after = decided.reduce((s, e) => spec.decider.evolve(s, e), before);
      result = spec.reply({ before, after, decided, appended: events, version: history.length + decided.length });
    } catch (error) {
      // A refusal is an answer: stored so that a retry gets the same one (or the earlier answer under the key).
      if (!spec.idempotency || !(error instanceof GantryError) || isRetryable(error)) throw error;
      return context.refuse<Result>(spec.idempotency, error);
    }
    const statements: Statement[] = [];
    const writer: SqlWriter = {
      query: async (text, values) => {
        statements.push({ text, values });
      },
    };
    try {
      const before = (id: string) => (id === spec.streamId ? history : undefined);
      for (const projection of context.projections) await project(noConnection, projection, events, before, writer);
    } catch (error) {
      if (error instanceof NeedsTransaction) return FULL_PATH;
      throw error;
    }
    const writes = [
      ...(spec.idempotency ? [receiptInsert(spec.idempotency, result, now, context.receiptTtlMs)] : []),
      ...(events.length > 0 ? [eventsInsert(events, json)] : []),
      ...statements,
    ];
    if (writes.length === 0) return { result, replayed: false, events };
    try {
      const results = await context.batcher.writes.load(writes);
      if (events.length > 0) {
        const inserted = results[spec.idempotency ? 1 : 0]!.rows as Array<{ position: string }>;
        inserted.forEach((row, i) => (events[i]!.position = Number(row.position)));
      }
      return { result, replayed: false, events };
    } catch (error) {
      const { code, constraint } = error as { code?: string; constraint?: string };
      if (code === '23505' && constraint === 'idempotency_receipts_pkey') return FULL_PATH;
      if (code !== '23505' || constraint !== 'events_stream_version_unique') throw error;
      if (attempt >= context.maxAttempts) {
        throw new GantryError(ErrorCode.VERSION_CONFLICT, `stream ${spec.streamId} was appended to concurrently`, {
          streamId: spec.streamId,
          expectedVersion: history.length,
        });
      }
      await context.pause(attempt);
    }
  }
}

/** The decided events as they will be stored (data scrubbed, as the log keeps it); positions come with the commit. */
function pendingEvents<Event extends DomainEvent>(
  spec: { streamId: string; metadata: CommandMetadata; idempotency?: IdempotencyOptions },
  version: number,
  decided: Event[],
  now: Date,
  scrub: SecretScrubber,
): { events: StoredEvent[]; json: string[] } {
  const replacer = scrubbingReplacer(scrub);
  const metadata = {
    correlationId: spec.metadata.correlationId,
    causationId: spec.metadata.causationId ?? null,
    idempotencyKey: spec.idempotency?.key ?? null,
    actor: spec.metadata.actor ?? null,
  };
  const occurredAt = now.toISOString();
  const json = decided.map((event) => JSON.stringify(event.data ?? null, replacer));
  const events = decided.map((event, i) => {
    const schemaVersion = (event as { schemaVersion?: number }).schemaVersion ?? 1;
    return {
      position: 0,
      eventId: (event as { eventId?: string }).eventId ?? randomUUID(),
      streamId: spec.streamId,
      streamVersion: version + i + 1,
      type: event.type,
      schemaVersion,
      data: JSON.parse(json[i]!) as unknown,
      metadata,
      occurredAt,
    };
  });
  return { events, json };
}

const RECEIPT_INSERT = `INSERT INTO idempotency_receipts (scope, key, request_hash, result, expires_at) VALUES ($1, $2, $3, $4::jsonb, $5::timestamptz)`;

function receiptInsert(idempotency: IdempotencyOptions, result: unknown, now: Date, defaultTtlMs: number): Statement {
  const expiresAt = new Date(now.getTime() + (idempotency.ttlMs ?? defaultTtlMs));
  return {
    text: RECEIPT_INSERT,
    values: [idempotency.scope, idempotency.key, canonicalHash(idempotency.request), JSON.stringify({ ok: true, result: result ?? null }), expiresAt.toISOString()],
  };
}

const EVENTS_INSERT = `WITH inserted AS (
      INSERT INTO events (event_id, stream_id, stream_version, type, schema_version, data, metadata, occurred_at)
      SELECT r.event_id, r.stream_id, r.stream_version, r.type, r.schema_version, r.data, r.metadata, r.occurred_at
        FROM jsonb_to_recordset($1::jsonb) AS r(event_id uuid, stream_id text, stream_version int, type text, schema_version int,
                                                data jsonb, metadata jsonb, occurred_at timestamptz)
       ORDER BY r.stream_version
      RETURNING position, stream_version
    ), queued AS (
      INSERT INTO outbox (position) SELECT position FROM inserted
    )
    SELECT position FROM inserted ORDER BY stream_version`;

/** The events at their versions, with their outbox rows; answers their positions in stream order. */
function eventsInsert(events: StoredEvent[], json: string[]): Statement {
  // The rows as one JSON array, each event's data written in as the scrubbed JSON it was stored as.
  const rows = events.map(
    (e, i) =>
      `{"event_id":${JSON.stringify(e.eventId)},"stream_id":${JSON.stringify(e.streamId)},"stream_version":${e.streamVersion},` +
      `"type":${JSON.stringify(e.type)},"schema_version":${e.schemaVersion},"data":${json[i]!},` +
      `"metadata":${JSON.stringify(e.metadata)},"occurred_at":${JSON.stringify(e.occurredAt)}}`,
  );
  return { text: EVENTS_INSERT, values: [`[${rows.join(',')}]`] };
}
