import pg from 'pg';
import { DataSource, type MigrationInterface, type QueryRunner } from 'typeorm';
import { assertSchemaName, DEFAULT_DATABASE_TIMEOUTS, ensureSchema, reportingConnectFailure, sideConnectionTimeouts, withoutQueryTimeout, type DatabaseTimeouts } from './database.js';
import { EventLogRepublishRuns1783100000000 } from './republish.js';
import { EventLogRetention1765000000000 } from './retention.js';
import { EventLogStreamHeads1781000000000 } from './stream-heads.js';

export type MigrationClass = new () => MigrationInterface;

/** The tables every service's event log needs; services add their own migrations after it. */
export class EventLogTables1764460800000 implements MigrationInterface {
  name = 'EventLogTables1764460800000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`
      CREATE TABLE events (
        position        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        event_id        uuid NOT NULL UNIQUE,
        stream_id       text NOT NULL,
        stream_version  integer NOT NULL CHECK (stream_version > 0),
        type            text NOT NULL,
        schema_version  integer NOT NULL,
        data            jsonb NOT NULL,
        metadata        jsonb NOT NULL,
        occurred_at     timestamptz NOT NULL,
        recorded_at     timestamptz NOT NULL DEFAULT now(),
        tx_id           xid8 NOT NULL DEFAULT pg_current_xact_id(),
        CONSTRAINT events_stream_version_unique UNIQUE (stream_id, stream_version)
      )`);
    // Rows waiting for the relay; inserted with the events, deleted once JetStream acknowledged them.
    await q.query(`CREATE TABLE outbox (position bigint PRIMARY KEY REFERENCES events(position))`);
    await q.query(`
      CREATE TABLE idempotency_receipts (
        scope         text NOT NULL,
        key           text NOT NULL,
        request_hash  text NOT NULL,
        result        jsonb,
        created_at    timestamptz NOT NULL DEFAULT now(),
        expires_at    timestamptz,
        PRIMARY KEY (scope, key)
      )`);
    await q.query(`
      CREATE TABLE inbox (
        consumer      text NOT NULL,
        event_id      text NOT NULL,
        processed_at  timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (consumer, event_id)
      )`);
    await q.query(`
      CREATE TABLE dead_letters (
        id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        consumer        text NOT NULL,
        subject         text NOT NULL,
        stream_sequence bigint,
        event_id        text,
        payload         text NOT NULL,
        error           jsonb NOT NULL,
        recorded_at     timestamptz NOT NULL DEFAULT now()
      )`);
    // Per projection and stream: the last stream version applied. Makes every apply exactly-once and in order.
    await q.query(`
      CREATE TABLE projection_positions (
        projection      text NOT NULL,
        stream_id       text NOT NULL,
        stream_version  integer NOT NULL,
        position        bigint NOT NULL,
        PRIMARY KEY (projection, stream_id)
      )`);
  }

  async down(q: QueryRunner): Promise<void> {
    for (const table of ['projection_positions', 'dead_letters', 'inbox', 'idempotency_receipts', 'outbox', 'events']) {
      await q.query(`DROP TABLE IF EXISTS ${table}`);
    }
  }
}

/**
 * Sets the compression of JSON columns that hold a whole state and are rewritten by every command
 * on their row (docs/architecture.md, "What a command costs"): `lz4` where the server was built with
 * it, else nothing changes; `pglz` (PostgreSQL's default) to undo. Rows already stored keep their
 * compression until they are next written.
 */
export async function setColumnCompression(q: Pick<QueryRunner, 'query'>, columns: ReadonlyArray<readonly [table: string, column: string]>, method: 'lz4' | 'pglz'): Promise<void> {
  const [{ available }] = (await q.query(`SELECT $1 = ANY(enumvals) AS available FROM pg_settings WHERE name = 'default_toast_compression'`, [method])) as [
    { available: boolean },
  ];
  if (!available) return;
  for (const [table, column] of columns) await q.query(`ALTER TABLE ${table} ALTER COLUMN ${column} SET COMPRESSION ${method}`);
}

/** A migration that adds one nullable column to `table` (rows of before have none), and drops it when reverted. `name` ends in its timestamp, as TypeORM wants. */
export function addColumnMigration(name: string, table: string, column: string, type: string): MigrationClass {
  return class implements MigrationInterface {
    name = name;

    async up(q: QueryRunner): Promise<void> {
      await q.query(`ALTER TABLE ${table} ADD COLUMN IF NOT EXISTS ${column} ${type}`);
    }

    async down(q: QueryRunner): Promise<void> {
      await q.query(`ALTER TABLE ${table} DROP COLUMN IF EXISTS ${column}`);
    }
  };
}

/** A migration that sets `columns` to lz4 (setColumnCompression), and back to pglz when reverted. `name` ends in its timestamp, as TypeORM wants. */
export function lz4ColumnsMigration(name: string, columns: ReadonlyArray<readonly [table: string, column: string]>): MigrationClass {
  return class implements MigrationInterface {
    name = name;

    async up(q: QueryRunner): Promise<void> {
      await setColumnCompression(q, columns, 'lz4');
    }

    async down(q: QueryRunner): Promise<void> {
      await setColumnCompression(q, columns, 'pglz');
    }
  };
}

/**
 * The log's `data` and `metadata` as `json`, the text as written, rather than `jsonb`, a parsed form
 * the server builds on every append and turns back into text on every read: the log is written once
 * and read whole (a stream, the relay's batch, a rebuild), never searched by its JSON in a command's
 * path, and `->`/`->>` work on both types. A rebuild's read of a million events cost the server
 * twice as much CPU as jsonb (docs/architecture.md, "The log's JSON is text"). Rewrites the table,
 * and changes a type that running replicas read through prepared statements: replicas of the
 * version before it are stopped first (docs/operations.md, "Upgrades that change a column's type").
 */
export class EventLogJsonText1782000000000 implements MigrationInterface {
  name = 'EventLogJsonText1782000000000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE events ALTER COLUMN data TYPE json, ALTER COLUMN metadata TYPE json`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE events ALTER COLUMN data TYPE jsonb, ALTER COLUMN metadata TYPE jsonb`);
  }
}

/**
 * JSON columns that are only ever written and read whole (a view's folded state) as `json`, the text
 * itself, instead of `jsonb` (see EventLogJsonText); their compression is set to lz4 again where
 * the server has it (a change of type resets it; see setColumnCompression). Like EventLogJsonText,
 * it rewrites the tables and changes a type read through prepared statements (docs/operations.md,
 * "Upgrades that change a column's type"). `name` ends in its timestamp, as TypeORM wants.
 */
export function jsonTextColumnsMigration(name: string, columns: ReadonlyArray<readonly [table: string, column: string]>): MigrationClass {
  const alter = async (q: QueryRunner, type: 'json' | 'jsonb') => {
    const [{ lz4 }] = (await q.query(`SELECT 'lz4' = ANY(enumvals) AS lz4 FROM pg_settings WHERE name = 'default_toast_compression'`)) as [{ lz4: boolean }];
    // One statement per table: each rewrites the table. The compression is set in the same
    // statement, so that the rows it rewrites are compressed with lz4 already.
    for (const table of new Set(columns.map(([t]) => t))) {
      const changes = columns
        .filter(([t]) => t === table)
        .flatMap(([, column]) => [`ALTER COLUMN ${column} TYPE ${type}`, ...(lz4 ? [`ALTER COLUMN ${column} SET COMPRESSION lz4`] : [])]);
      await q.query(`ALTER TABLE ${table} ${changes.join(', ')}`);
    }
  };
  return class implements MigrationInterface {
    name = name;

    async up(q: QueryRunner): Promise<void> {
      await alter(q, 'json');
    }

    async down(q: QueryRunner): Promise<void> {
      await alter(q, 'jsonb');
    }
  };
}

/**
 * The outbox without its foreign key to the log. Outbox rows are written by the statement that
 * writes their events (one `INSERT … RETURNING` feeding the other) and events are never deleted, so
 * the key could only ever confirm what that statement did — at the price of a look-up and a row
 * lock on each new event, written to the WAL, in every command's commit: about a fifth of the cost of
 * appending a batch of events (docs/architecture.md, "What a command costs"). Restored when reverted.
 */
export class EventLogOutboxUnreferenced1782300000000 implements MigrationInterface {
  name = 'EventLogOutboxUnreferenced1782300000000';

  async up(q: QueryRunner): Promise<void> {
    const keys = (await q.query(`SELECT conname FROM pg_constraint WHERE conrelid = 'outbox'::regclass AND contype = 'f'`)) as Array<{ conname: string }>;
    for (const { conname } of keys) await q.query(`ALTER TABLE outbox DROP CONSTRAINT "${conname.replaceAll('"', '""')}"`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE outbox ADD CONSTRAINT outbox_position_fkey FOREIGN KEY (position) REFERENCES events (position)`);
  }
}

/**
 * A message is dead-lettered once per delivery of its stream message, however often it comes: a
 * consumer that wrote the dead letter and was killed (or lost NATS, or was slow past the ack wait)
 * before its term reached JetStream is sent the message again, and wrote a second dead letter of it
 * (and a third…). The consumer, its stream sequence and its payload name one message; the payload
 * too, since a stream created again numbers its messages from 1 again. The dead letter's write
 * leaves an existing one as it is (EventConsumer). Duplicates already stored are removed, the
 * first kept.
 */
export class EventLogDeadLettersOnce1783200000000 implements MigrationInterface {
  name = 'EventLogDeadLettersOnce1783200000000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`
      DELETE FROM dead_letters later USING dead_letters first
       WHERE later.consumer = first.consumer AND later.stream_sequence = first.stream_sequence
         AND md5(later.payload) = md5(first.payload) AND later.id > first.id`);
    await q.query(`CREATE UNIQUE INDEX dead_letters_once ON dead_letters (consumer, stream_sequence, md5(payload))`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP INDEX IF EXISTS dead_letters_once`);
  }
}

/** A log above this (some 170,000 events) gets its index CONCURRENTLY; a smaller one's takes well under a second. */
const CONCURRENT_INDEX_BYTES = 64 * 1024 * 1024;

/**
 * A BRIN index of the log's `occurred_at`, for `republish` to find where a window of time starts
 * without reading the log from its first event (docs/operations.md, "Putting the lost events back:
 * republish"). BRIN, not a B-tree: the log is appended in roughly the order of `occurred_at` (not
 * exactly: commits interleave, and replicas' clocks differ), so a summary of the times in each range
 * of 128 pages narrows a search to the ranges that may hold the window, for a few pages of index and
 * next to nothing added to an append (a B-tree would take an entry, and its WAL, per event). On a
 * log of more than CONCURRENT_INDEX_BYTES it is built CONCURRENTLY, outside a transaction, so that
 * the log's appends go on while it is built; a build that failed part-way leaves an invalid index,
 * which is dropped and built again. On a smaller one (a new installation, every test's schema) it is
 * built at once, holding appends for the moment that takes: CONCURRENTLY waits for every transaction
 * of the database older than it to end, however unrelated (a backup's, another schema's), and a
 * service's start would wait with it.
 */
export const EventLogOccurredAtIndex1783000000000 = indexWhileWrittenMigration(
  'EventLogOccurredAtIndex1783000000000',
  'events',
  'events_occurred_at',
  'USING brin (occurred_at) WITH (autosummarize = on)',
);

/**
 * A migration that adds one index to a table the service goes on writing while it is built
 * (createIndexWhileWritten: CONCURRENTLY, outside a transaction, on a large table), and drops it on
 * the way down.
 */
export function indexWhileWrittenMigration(name: string, table: string, index: string, definition: string): MigrationClass {
  return class implements MigrationInterface {
    name = name;
    /** CREATE INDEX CONCURRENTLY cannot run in a transaction. */
    transaction = false;

    async up(q: QueryRunner): Promise<void> {
      await createIndexWhileWritten(q, table, index, definition);
    }

    async down(q: QueryRunner): Promise<void> {
      await q.query(`DROP INDEX CONCURRENTLY IF EXISTS ${index}`);
    }
  };
}

/**
 * Creates index `name` on `table` (`definition`: what follows `ON table`) in a migration that runs
 * outside a transaction (`transaction = false`): CONCURRENTLY on a table of more than
 * CONCURRENT_INDEX_BYTES, so that its writes go on while it is built, at once on a smaller one (see
 * EventLogOccurredAtIndex). A build that failed part-way left an invalid index, dropped and built again.
 */
export async function createIndexWhileWritten(q: Pick<QueryRunner, 'query'>, table: string, name: string, definition: string): Promise<void> {
  const [left] = (await q.query(`SELECT i.indisvalid AS valid FROM pg_index i WHERE i.indexrelid = to_regclass($1)`, [name])) as Array<{ valid: boolean }>;
  const [{ bytes }] = (await q.query(`SELECT pg_relation_size($1::regclass) AS bytes`, [table])) as [{ bytes: string }];
  const concurrently = Number(bytes) > CONCURRENT_INDEX_BYTES ? 'CONCURRENTLY' : '';
  if (left && !left.valid) await q.query(`DROP INDEX ${concurrently} ${name}`);
  await q.query(`CREATE INDEX ${concurrently} IF NOT EXISTS ${name} ON ${table} ${definition}`);
}

export interface MigrateOptions {
  url: string;
  schema: string;
  /** The service's own migrations; the event-log tables always come first. */
  migrations?: MigrationClass[];
  /**
   * Bounds on opening and keeping its connections (DatabaseTimeouts; unset ones take the defaults).
   * `queryMs` bounds only the schema's creation, the unlock, and the watch of the lock's connection
   * while the migrations run (watchWhileMigrating): a replica waits on the migrations' lock for as
   * long as another migrates, and a migration's statement may rightly take long.
   */
  timeouts?: Partial<DatabaseTimeouts>;
}

/**
 * Creates the schema and runs the pending TypeORM migrations (synchronize is never used).
 * Replicas starting together serialise on an advisory lock keyed by the schema name.
 */
export async function migrate(options: MigrateOptions): Promise<void> {
  const schema = assertSchemaName(options.schema);
  await reportingConnectFailure(options.url, () => runMigrations(options, schema));
}

async function runMigrations(options: MigrateOptions, schema: string): Promise<void> {
  await ensureSchema(options.url, schema, options.timeouts);
  const bounds = sideConnectionTimeouts(options.timeouts);
  // The lock's connection: its wait for the lock is not bounded (another replica may be migrating),
  // its unlock is, like the pool's statements.
  const lock = new pg.Client({ connectionString: options.url, ...sideConnectionTimeouts(options.timeouts, 'bounded') });
  lock.on('error', () => undefined); // reported by the query that fails
  await lock.connect();
  try {
    await withoutQueryTimeout(lock, () => lock.query(`SELECT pg_advisory_lock(hashtext('gantry.migrate.' || $1))`, [schema]));
    const dataSource = new DataSource({
      type: 'postgres',
      url: options.url,
      schema,
      synchronize: false,
      migrationsRun: false,
      migrationsTableName: 'migrations',
      migrationsTransactionMode: 'each',
      migrations: [
        EventLogTables1764460800000,
        EventLogRetention1765000000000,
        EventLogStreamHeads1781000000000,
        EventLogJsonText1782000000000,
        EventLogOutboxUnreferenced1782300000000,
        EventLogOccurredAtIndex1783000000000,
        EventLogRepublishRuns1783100000000,
        EventLogDeadLettersOnce1783200000000,
        ...(options.migrations ?? []),
      ],
      extra: { ...bounds, options: [`-c search_path=${schema},public`, bounds.options].filter(Boolean).join(' '), max: 1 },
      logging: false,
    });
    const watch = watchWhileMigrating(lock, { ...DEFAULT_DATABASE_TIMEOUTS, ...options.timeouts }.queryMs, () => dropConnections(dataSource));
    try {
      await dataSource.initialize();
      try {
        await dataSource.runMigrations({ transaction: 'each' });
      } finally {
        await dataSource.destroy();
      }
    } catch (error) {
      throw watch.lost ?? error;
    } finally {
      watch.stop();
    }
  } finally {
    // Unanswered within the bound, the connection is closed (end() drops a connection whose query is
    // still out): the lock goes with its session, as the server's keepalive ends it.
    await lock.query(`SELECT pg_advisory_unlock(hashtext('gantry.migrate.' || $1))`, [schema]).catch(() => undefined);
    await lock.end();
  }
}

/**
 * While the migrations run, their lock's connection is asked `SELECT 1` every `queryMs`, within
 * `queryMs`. The migrations' own statements have no bound (a rewrite of a large table may rightly
 * take minutes), so a database that stops answering without closing anything (a partition, a frozen
 * host) would hold them, and the start, for good: the lock's connection, which waits on nothing, tells
 * it instead. Unanswered, the migrations' connections are closed (`onLost`), their statement fails,
 * and the migration fails with `lost` (the database unreachable; docs/operations.md, "When PostgreSQL
 * stops answering"). `queryMs` 0: not watched.
 */
function watchWhileMigrating(lock: pg.Client, queryMs: number, onLost: () => void): { readonly lost: unknown; stop(): void } {
  let lost: unknown = undefined;
  let timer: NodeJS.Timeout | null = null;
  let stopped = false;
  const ask = () => {
    timer = setTimeout(() => {
      lock.query('SELECT 1').then(
        () => {
          if (!stopped) ask();
        },
        (error: unknown) => {
          if (stopped) return;
          lost = error;
          onLost();
        },
      );
    }, queryMs);
    timer.unref();
  };
  if (queryMs > 0) ask();
  return {
    get lost() {
      return lost;
    },
    stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
    },
  };
}

/** Closes the migrations' connections at once (TypeORM's pool of node-postgres clients): their statements fail. */
function dropConnections(dataSource: DataSource): void {
  const pool = (dataSource.driver as unknown as { master?: { _clients?: Array<{ connection?: { stream?: { destroy(): void } } }> } }).master;
  for (const client of pool?._clients ?? []) client.connection?.stream?.destroy();
}
