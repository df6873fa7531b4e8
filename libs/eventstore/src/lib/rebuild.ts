import pg from 'pg';
import { withTransaction } from './database.js';
import type { EventStore } from './event-store.js';
import { copyOut, type BinaryRow } from './copy.js';
import { concerns, project, type Projection } from './projection.js';
import type { StoredEvent } from './types.js';

/**
 * Drops the projections' rows and replays the whole log into them, in one transaction. Appends
 * wait for it (SHARE lock on events), so the rebuilt tables are exactly what the live ones would
 * be. Events go to each projection a batch at a time, through its replay if it has one (a state
 * projection with `copy` folds in memory and writes each row once, by COPY), else as `project`
 * would apply them (see Projection.applyMany), in the log's order across those projections. Only
 * the types some projection takes are read;
 * returns how many events that was.
 *
 * The log is read with one COPY on a connection of its own, ahead of the batch being applied (the
 * server turning rows into text is as much of the work as applying them), and only the event
 * fields the projections name (Projection.fields). That read happens outside the rebuild's
 * transaction but after its lock is granted: no append can commit while it is held, so the reader
 * sees exactly the log the rebuild locked.
 */
export async function rebuildProjections(store: EventStore, projections: readonly Projection[], batchSize = 1_000): Promise<number> {
  return withTransaction(store.pool, async (sql) => {
    await sql.query('LOCK TABLE events IN SHARE MODE');
    // The rows are written once, in bulk: compressing their large values (a state row's JSON) with
    // pglz was a quarter of the database's work. lz4 is much cheaper (where the server has it).
    await sql.query(`SELECT set_config('default_toast_compression', 'lz4', true)
                      FROM pg_settings WHERE name = 'default_toast_compression' AND 'lz4' = ANY(enumvals)`);
    const tables = projections.flatMap((p) => p.tables);
    for (const projection of projections) {
      if (projection.tables.length > 0) await sql.query(`TRUNCATE ${projection.tables.join(', ')}`);
      await sql.query(`DELETE FROM projection_positions WHERE projection = $1`, [projection.name]);
    }
    // Secondary indexes are built once at the end rather than kept up row by row (the primary
    // keys stay: the projections upsert on them). Same transaction: nobody sees the tables without them.
    const { rows: indexes } = await sql.query<{ name: string; definition: string }>(
      `SELECT i.indexname AS name, i.indexdef AS definition FROM pg_indexes i
        WHERE i.schemaname = current_schema() AND i.tablename = ANY($1)
          AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conname = i.indexname AND c.connamespace = current_schema()::regnamespace)`,
      [tables],
    );
    for (const index of indexes) await sql.query(`DROP INDEX ${index.name}`);
    // A table that keeps room on its pages for its rows' next versions (a fill factor, e.g. the jobs
    // view's) is loaded packed: a rebuilt row is mostly one nobody rewrites again (a finished job),
    // and a packed table is half the pages to write. The room is set again for the rows added later.
    const { rows: roomy } = await sql.query<{ table: string; fillfactor: string }>(
      `SELECT c.relname AS table, o.option_value AS fillfactor FROM pg_class c, pg_options_to_table(c.reloptions) o
        WHERE c.relnamespace = current_schema()::regnamespace AND c.relname = ANY($1) AND o.option_name = 'fillfactor'`,
      [tables],
    );
    for (const { table } of roomy) await sql.query(`ALTER TABLE ${table} SET (fillfactor = 100)`);
    // Only the types some projection takes (all of them when one takes every type).
    const types = projections.some((p) => !p.types) ? null : [...new Set(projections.flatMap((p) => p.types!))];
    // A projection with a replay of its own (a state projection folding in memory, its rows written
    // at the end) takes each batch whole. The others are fed as the log was: in its order across
    // them. Each taking the whole batch in turn could put a row before the row it refers to — a
    // child before its parent, or after the parent went (inLogOrder).
    const replays = projections.filter((p) => p.replay).map((p) => p.replay!(sql, batchSize));
    const rowByRow = projections.filter((p) => !p.replay);
    const reader = new pg.Client(store.pool.options);
    reader.on('error', () => undefined); // reported by the read that fails
    await reader.connect();
    let replayed = 0;
    try {
      // The log is in position order on disk: never sort it (a sort of the whole log would spill to disk).
      await reader.query('SET enable_sort = off');
      const where = types ? `WHERE type IN (${types.map((t) => reader.escapeLiteral(t)).join(', ')})` : '';
      // Only the fields some projection reads (see Projection.fields); NULL in place of the others.
      const named = new Set(projections.flatMap((p) => p.fields ?? OPTIONAL_FIELDS));
      const columns = OPTIONAL_FIELDS.map((field) => (named.has(field) ? OPTIONAL_COLUMNS[field] : 'NULL::text'));
      const batches = copyOut(
        reader,
        `SELECT position::int8, stream_id::text, stream_version::int4, type::text, data::text, ${columns.join(', ')} FROM events ${where} ORDER BY position`,
        batchSize,
        (row) => new ReplayedEvent(row),
      );
      let next = batches.next();
      for (;;) {
        const batch = await next;
        if (batch.done) break;
        next = batches.next();
        next.catch(() => undefined); // awaited on the next turn; a failure there ends the rebuild
        const events = batch.value;
        for (const replay of replays) await replay.apply(events);
        for (const run of inLogOrder(events, rowByRow)) for (const projection of rowByRow) await project(sql, projection, run);
        replayed += events.length;
      }
      for (const replay of replays) await replay.finish();
    } finally {
      await reader.end().catch(() => undefined);
    }
    for (const index of indexes) await sql.query(index.definition);
    for (const { table, fillfactor } of roomy) await sql.query(`ALTER TABLE ${table} SET (fillfactor = ${Number(fillfactor)})`);
    return replayed;
  });
}

/**
 * The batch in runs of consecutive events that the same projections take, so that projections fed
 * run after run see the events in the log's order across them. One projection (or none) needs no cut.
 */
function inLogOrder(events: StoredEvent[], projections: readonly Projection[]): StoredEvent[][] {
  if (projections.length < 2) return projections.length === 0 ? [] : [events];
  const runs: StoredEvent[][] = [];
  let taken = '';
  for (const event of events) {
    const by = projections.map((p) => (concerns(p, event) ? '1' : '0')).join('');
    if (by !== taken || runs.length === 0) runs.push([]);
    runs[runs.length - 1]!.push(event);
    taken = by;
  }
  return runs;
}

const OPTIONAL_FIELDS = ['eventId', 'schemaVersion', 'metadata', 'occurredAt'] as const;
// As text (the ints too): they are read as they would be from a query.
const OPTIONAL_COLUMNS = { eventId: 'event_id::text', schemaVersion: 'schema_version::text', metadata: 'metadata::text', occurredAt: 'occurred_at::text' } as const;

const parseTimestamp = pg.types.getTypeParser(1184, 'text') as (value: string) => Date;

/**
 * An event from its row (position, stream_id, stream_version, type, data, then the optional
 * fields, NULL when not read; each decoded from the row's bytes on its own, so that a field kept,
 * a stream id in a set, does not keep the whole chunk it came in), made as cheaply as the log allows: `data` parsed (every projection
 * reads it), `metadata` and `occurredAt` parsed on first use (a rebuild's projections rarely look
 * at them, and at a million events their parsing is a good part of the read). A field that was not
 * read throws rather than pass for empty.
 */
class ReplayedEvent implements StoredEvent {
  readonly position: number;
  readonly streamId: string;
  readonly streamVersion: number;
  readonly type: string;
  readonly data: unknown;
  readonly #eventId: string | null;
  readonly #schemaVersion: string | null;
  readonly #rawMetadata: string | null;
  readonly #rawOccurredAt: string | null;
  #metadata: StoredEvent['metadata'] | undefined;
  #occurredAt: string | undefined;

  constructor({ bytes, starts, ends }: BinaryRow) {
    // position bigint, stream_version int, then text (see the query); positions stay below 2^53.
    this.position = bytes.readUInt32BE(starts[0]!) * 2 ** 32 + bytes.readUInt32BE(starts[0]! + 4);
    this.streamId = bytes.toString('utf8', starts[1], ends[1]);
    this.streamVersion = bytes.readInt32BE(starts[2]!);
    this.type = bytes.toString('utf8', starts[3], ends[3]);
    this.data = JSON.parse(bytes.toString('utf8', starts[4], ends[4])) as unknown;
    this.#eventId = text(bytes, starts[5]!, ends[5]!);
    this.#schemaVersion = text(bytes, starts[6]!, ends[6]!);
    this.#rawMetadata = text(bytes, starts[7]!, ends[7]!);
    this.#rawOccurredAt = text(bytes, starts[8]!, ends[8]!);
  }

  get eventId(): string {
    return read(this.#eventId, 'eventId');
  }
  get schemaVersion(): number {
    return Number(read(this.#schemaVersion, 'schemaVersion'));
  }
  get metadata(): StoredEvent['metadata'] {
    return (this.#metadata ??= JSON.parse(read(this.#rawMetadata, 'metadata')) as StoredEvent['metadata']);
  }
  get occurredAt(): string {
    return (this.#occurredAt ??= parseTimestamp(read(this.#rawOccurredAt, 'occurredAt')).toISOString());
  }

  toJSON(): StoredEvent {
    const { position, eventId, streamId, streamVersion, type, schemaVersion, data, metadata, occurredAt } = this;
    return { position, eventId, streamId, streamVersion, type, schemaVersion, data, metadata, occurredAt };
  }
}

function text(bytes: Buffer, start: number, end: number): string | null {
  return start === -1 ? null : bytes.toString('utf8', start, end);
}

function read(value: string | null, field: (typeof OPTIONAL_FIELDS)[number]): string {
  if (value === null) throw new Error(`a rebuild did not read the events' ${field}: the projection must name it in its fields`);
  return value;
}
