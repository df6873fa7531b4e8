import pg from 'pg';
import { EVENT_COLUMNS } from './append.js';
import { withTransaction } from './database.js';
import type { EventStore } from './event-store.js';
import { project, type Projection } from './projection.js';
import type { StoredEvent } from './types.js';

/**
 * Drops the projections' rows and replays the whole log into them, in one transaction. Appends
 * wait for it (SHARE lock on events), so the rebuilt tables are exactly what the live ones would
 * be. Events go to each projection a batch at a time (see Projection.applyMany): a state projection
 * reads and writes once per batch rather than once per event. Only the types some projection takes
 * are read; returns how many events that was.
 *
 * The log is read on a connection of its own, a batch ahead: while one batch is applied the next
 * is on its way (reading and parsing the rows is as much of the work as applying them). That read
 * happens outside the rebuild's transaction but after its lock is granted: no append can commit
 * while it is held, so the reader sees exactly the log the rebuild locked.
 */
export async function rebuildProjections(store: EventStore, projections: readonly Projection[], batchSize = 10_000): Promise<number> {
  return withTransaction(store.pool, async (sql) => {
    await sql.query('LOCK TABLE events IN SHARE MODE');
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
    // Only the types some projection takes (all of them when one takes every type).
    const types = projections.some((p) => !p.types) ? null : [...new Set(projections.flatMap((p) => p.types!))];
    const reader = new pg.Client(store.pool.options);
    reader.on('error', () => undefined); // reported by the read that fails
    await reader.connect();
    let replayed = 0;
    try {
      let next = readBatch(reader, 0, batchSize, types);
      for (;;) {
        const batch = await next;
        if (batch.length === 0) break;
        next = readBatch(reader, batch[batch.length - 1]!.position, batchSize, types);
        next.catch(() => undefined); // awaited on the next turn; a failure there ends the rebuild
        for (const projection of projections) await project(sql, projection, batch);
        replayed += batch.length;
      }
    } finally {
      await reader.end().catch(() => undefined);
    }
    for (const index of indexes) await sql.query(index.definition);
    return replayed;
  });
}

/** jsonb and timestamptz as PostgreSQL sends them: a row's `data` is parsed at once, the rest when read. */
const RAW = new Set([3802, 1184]);
const rawTypes = { getTypeParser: (oid: number, format?: string) => (RAW.has(oid) ? (value: string) => value : pg.types.getTypeParser(oid, format as 'text')) };
const parseTimestamp = pg.types.getTypeParser(1184, 'text') as (value: string) => Date;

type RawRow = [position: string, eventId: string, streamId: string, streamVersion: number, type: string, schemaVersion: number, data: string, metadata: string, occurredAt: string];

/**
 * The batch's events, made as cheaply as the log allows: rows as arrays, `data` parsed (every
 * projection reads it), `metadata` and `occurredAt` parsed on first use (a rebuild's projections
 * rarely look at them, and at a million events their parsing is a good part of the read).
 */
async function readBatch(reader: pg.Client, after: number, limit: number, types: string[] | null): Promise<StoredEvent[]> {
  const where = types ? 'position > $1 AND type = ANY($3)' : 'position > $1';
  const { rows } = await reader.query<RawRow>({
    text: `SELECT ${EVENT_COLUMNS} FROM events WHERE ${where} ORDER BY position LIMIT $2`,
    values: types ? [after, limit, types] : [after, limit],
    rowMode: 'array',
    types: rawTypes,
  });
  return rows.map(lazyEvent);
}

function lazyEvent(row: RawRow): StoredEvent {
  let metadata: StoredEvent['metadata'] | undefined;
  let occurredAt: string | undefined;
  return {
    position: Number(row[0]),
    eventId: row[1],
    streamId: row[2],
    streamVersion: row[3],
    type: row[4],
    schemaVersion: row[5],
    data: JSON.parse(row[6]) as unknown,
    get metadata() {
      return (metadata ??= JSON.parse(row[7]) as StoredEvent['metadata']);
    },
    get occurredAt() {
      return (occurredAt ??= parseTimestamp(row[8]).toISOString());
    },
  };
}
