import pg from 'pg';
import { DataSource, type MigrationInterface, type QueryRunner } from 'typeorm';
import { assertSchemaName, ensureSchema } from './database.js';
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

export interface MigrateOptions {
  url: string;
  schema: string;
  /** The service's own migrations; the event-log tables always come first. */
  migrations?: MigrationClass[];
}

/**
 * Creates the schema and runs the pending TypeORM migrations (synchronize is never used).
 * Replicas starting together serialise on an advisory lock keyed by the schema name.
 */
export async function migrate(options: MigrateOptions): Promise<void> {
  const schema = assertSchemaName(options.schema);
  await ensureSchema(options.url, schema);
  const lock = new pg.Client({ connectionString: options.url });
  await lock.connect();
  try {
    await lock.query(`SELECT pg_advisory_lock(hashtext('gantry.migrate.' || $1))`, [schema]);
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
        ...(options.migrations ?? []),
      ],
      extra: { options: `-c search_path=${schema},public`, max: 1 },
      logging: false,
    });
    await dataSource.initialize();
    try {
      await dataSource.runMigrations({ transaction: 'each' });
    } finally {
      await dataSource.destroy();
    }
  } finally {
    await lock.query(`SELECT pg_advisory_unlock(hashtext('gantry.migrate.' || $1))`, [schema]).catch(() => undefined);
    await lock.end();
  }
}
