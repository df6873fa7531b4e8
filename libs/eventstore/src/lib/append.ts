import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { ErrorCode, GantryError, scrubbingReplacer, type SecretScrubber } from '@gantry/contracts';
import { refuseUnpublishableEvent } from './event-size.js';
import { inlineStatement, type SqlWriter } from './deferred-writes.js';
import { project, type Projection } from './projection.js';
import { storableStrings } from './storable-text.js';
import type { CommandMetadata, ExpectedVersion, NewEvent, StoredEvent } from './types.js';

/** An events row as PostgreSQL returns it. */
export interface EventRow {
  position: string;
  event_id: string;
  stream_id: string;
  stream_version: number;
  type: string;
  schema_version: number;
  data: unknown;
  metadata: StoredEvent['metadata'];
  occurred_at: Date;
}

export const EVENT_COLUMNS = 'position, event_id, stream_id, stream_version, type, schema_version, data, metadata, occurred_at';

export function toStoredEvent(row: EventRow): StoredEvent {
  return {
    position: Number(row.position),
    eventId: row.event_id,
    streamId: row.stream_id,
    streamVersion: row.stream_version,
    type: row.type,
    schemaVersion: row.schema_version,
    data: row.data,
    metadata: row.metadata,
    occurredAt: row.occurred_at.toISOString(),
  };
}

/** Channel a relay listens on: another replica's appends wake it through here (see OutboxRelay.wake). */
export function outboxChannel(schema: string): string {
  return `gantry_outbox_${schema}`.slice(0, 63);
}

const STREAM_QUERY = `SELECT ${EVENT_COLUMNS} FROM events WHERE stream_id = $1 ORDER BY stream_version`;

export async function readStreamEvents(sql: pg.PoolClient | pg.Pool, streamId: string): Promise<StoredEvent[]> {
  // A named statement: each connection parses and plans it once (the most frequent read there is).
  const { rows } = await sql.query<EventRow>({ name: 'gantry_read_stream', text: STREAM_QUERY, values: [streamId] });
  return rows.map(toStoredEvent);
}

const STREAMS_QUERY = `SELECT ${EVENT_COLUMNS} FROM events WHERE stream_id = ANY($1::text[]) ORDER BY stream_id, stream_version`;

/** Several streams in one read: each one's events in order, by stream id (a stream with none is absent). */
export async function readStreamsEvents(sql: pg.PoolClient | pg.Pool, streamIds: readonly string[]): Promise<Map<string, StoredEvent[]>> {
  const { rows } = await sql.query<EventRow>({ name: 'gantry_read_streams', text: STREAMS_QUERY, values: [[...new Set(streamIds)]] });
  const byStream = new Map<string, StoredEvent[]>();
  for (const row of rows) {
    const events = byStream.get(row.stream_id);
    if (events) events.push(toStoredEvent(row));
    else byStream.set(row.stream_id, [toStoredEvent(row)]);
  }
  return byStream;
}

/** The stream read as a statement with its id written in, to travel in a message with others (see inlineStatement). */
export function streamReadStatement(streamId: string): string {
  return inlineStatement(STREAM_QUERY, [streamId]);
}

/** The last `count` events of a stream (oldest first) and the stream's version. */
export async function readStreamTail(sql: pg.PoolClient | pg.Pool, streamId: string, count: number): Promise<{ version: number; events: StoredEvent[] }> {
  const { rows } = await sql.query<EventRow>(`SELECT ${EVENT_COLUMNS} FROM events WHERE stream_id = $1 ORDER BY stream_version DESC LIMIT $2`, [
    streamId,
    count,
  ]);
  const events = rows.map(toStoredEvent).reverse();
  return { version: events.at(-1)?.streamVersion ?? 0, events };
}

export async function streamVersionOf(sql: pg.PoolClient | pg.Pool, streamId: string): Promise<number> {
  const { rows } = await sql.query<{ v: number | null }>(`SELECT max(stream_version) AS v FROM events WHERE stream_id = $1`, [streamId]);
  return rows[0]?.v ?? 0;
}

function isUniqueViolation(error: unknown, constraint?: string): boolean {
  const e = error as { code?: string; constraint?: string };
  return e?.code === '23505' && (constraint === undefined || e.constraint === constraint);
}

/** What an append needs beyond its events: the log's settings. */
export interface AppendContext {
  projections: readonly Projection[];
  now: Date;
  /** Masks secrets in every string of the events' data before they are written (docs/configuration.md, "Secrets in events"). */
  scrub: SecretScrubber;
  /** The largest event the bus carries (EventStoreOptions.maxEventBytes). */
  maxEventBytes?: number;
  /** Told which connection appended, so the store can wake the relay once that connection's transaction is over. */
  appendedOn(sql: pg.PoolClient): void;
  /** The stream's events before this append, when the caller read them in this transaction (for the projections). */
  history?: StoredEvent[];
  /** Where the projections' writes may go instead of `sql` (a command's writes wait for its commit: DeferredWrites). */
  writer?: SqlWriter;
}

/**
 * Appends inside the caller's transaction, in one round trip: the insert only happens when the
 * stream is at the expected version (no gaps, no read-then-write), its outbox rows go in with it.
 * Nothing here notifies: a NOTIFY would make every commit take PostgreSQL's global notify lock;
 * the relay is woken in-process when the connection is released (EventStore.onAppended). A concurrent writer at the same version makes the unique
 * (stream_id, stream_version) constraint fail, which aborts the transaction: a VERSION_CONFLICT
 * must end the transaction it happened in (execute() re-runs the command in a fresh one). The
 * inline projections are applied to the new events before returning (in this transaction, after a
 * successful compare-and-set: once per event, in stream order).
 */
export async function appendEvents(
  sql: pg.PoolClient,
  context: AppendContext,
  streamId: string,
  expectedVersion: ExpectedVersion,
  events: NewEvent[],
  metadata: CommandMetadata & { idempotencyKey: string | null },
): Promise<StoredEvent[]> {
  if (events.length === 0) return [];
  const meta = JSON.stringify(
    {
      correlationId: metadata.correlationId,
      causationId: metadata.causationId ?? null,
      idempotencyKey: metadata.idempotencyKey ?? null,
      actor: metadata.actor ?? null,
    },
    storableStrings,
  );
  const replacer = scrubbingReplacer(context.scrub);
  const ids: string[] = [];
  const types: string[] = [];
  const versions: number[] = [];
  const data: string[] = [];
  for (const event of events) {
    ids.push(event.eventId ?? randomUUID());
    types.push(event.type);
    versions.push(event.schemaVersion ?? 1);
    data.push(JSON.stringify(event.data ?? null, replacer));
    refuseUnpublishableEvent(context.maxEventBytes, event.type, streamId, data[data.length - 1]!, meta);
  }
  let rows: Array<EventRow & { current: number }>;
  try {
    ({ rows } = await sql.query<EventRow & { current: number }>(
      `WITH current AS (
         SELECT coalesce(max(stream_version), 0) AS v FROM events WHERE stream_id = $1
       ), inserted AS (
         INSERT INTO events (event_id, stream_id, stream_version, type, schema_version, data, metadata, occurred_at)
         SELECT n.event_id, $1, current.v + n.ord, n.type, n.schema_version, n.data, $7::json, $8
           FROM current, unnest($3::uuid[], $4::text[], $5::int[], $6::json[]) WITH ORDINALITY
                AS n(event_id, type, schema_version, data, ord)
          WHERE $2::int < 0 OR current.v = $2::int
         RETURNING ${EVENT_COLUMNS}
       ), queued AS (
         INSERT INTO outbox (position) SELECT position FROM inserted
       )
       SELECT inserted.*, current.v AS current FROM inserted, current ORDER BY stream_version`,
      [streamId, expectedVersion === 'any' ? -1 : expectedVersion, ids, types, versions, data, meta, context.now],
    ));
  } catch (error) {
    if (isUniqueViolation(error, 'events_stream_version_unique')) {
      throw new GantryError(ErrorCode.VERSION_CONFLICT, `stream ${streamId} was appended to concurrently`, { streamId, expectedVersion });
    }
    throw error;
  }
  if (rows.length === 0) {
    const actual = await streamVersionOf(sql, streamId);
    throw new GantryError(ErrorCode.VERSION_CONFLICT, `stream ${streamId} is at version ${actual}, expected ${expectedVersion}`, {
      streamId,
      expectedVersion,
      actualVersion: actual,
    });
  }
  context.appendedOn(sql);
  const stored = rows.map(toStoredEvent);
  const history = context.history;
  const before = history ? (id: string) => (id === streamId ? history : undefined) : undefined;
  for (const projection of context.projections) await project(sql, projection, stored, before, context.writer);
  return stored;
}
