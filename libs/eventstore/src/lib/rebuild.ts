import pg from 'pg';
import { withoutQueryTimeout, withTransaction } from './database.js';
import type { EventStore } from './event-store.js';
import { copyOut, type BinaryRow } from './copy.js';
import { concerns, project, type Projection } from './projection.js';
import type { StoredEvent } from './types.js';

/**
 * Replays the whole log into new copies of the projections' tables and puts them in the live
 * tables' place, in one transaction. Commands go on while the log is replayed: the rebuild reads a
 * snapshot of the log, taken when no append was in flight (a moment's SHARE lock), into tables of
 * the same shape in a schema of its own (`<schema>_rebuild`, see Shadow); then, holding the log in
 * SHARE mode, it replays what was appended since, and swaps the tables in. Appends wait only for
 * that catch-up and the swap, and the rebuilt tables are exactly what the live ones would be.
 * Readers see the old rows until then (and wait for the catch-up and the swap too).
 *
 * Events go to each projection a batch at a time, through its replay if it has one (a state
 * projection with `copy` folds in memory and writes each row once, by COPY), else as `project`
 * would apply them (see Projection.applyMany), in the log's order across those projections. Only
 * the types some projection takes are read; returns how many events that was.
 *
 * The log is read with COPY on a connection of its own, ahead of the batch being applied (the
 * server turning rows into text is as much of the work as applying them), and only the event
 * fields the projections name (Projection.fields).
 *
 * The catch-up takes the log and the tables in `lockTries` tries (see Shadow.holdTheLog), and the
 * rebuild fails, changing nothing, when none succeeds.
 */
export async function rebuildProjections(
  store: EventStore,
  projections: readonly Projection[],
  batchSize = 1_000,
  lockTries = LOCK_TRIES,
): Promise<number> {
  // Only the types some projection takes (all of them when one takes every type).
  const types = projections.some((p) => !p.types) ? null : [...new Set(projections.flatMap((p) => p.types!))];
  // Only the fields some projection reads (see Projection.fields); NULL in place of the others.
  const named = new Set(projections.flatMap((p) => p.fields ?? OPTIONAL_FIELDS));
  const columns = OPTIONAL_FIELDS.map((field) => (named.has(field) ? OPTIONAL_COLUMNS[field] : 'NULL::text'));
  // The reader's COPY of the whole log, and the bulk statements and waits of the rebuild's
  // transaction, may rightly take longer than the services' bound on a query (DatabaseTimeouts).
  // The pool's own kind of connection: it opens within the pool's connect bound (kept by that kind,
  // not among the pool's options).
  const Connection = (store.pool.options as { Client?: typeof pg.Client }).Client ?? pg.Client;
  const reader = new Connection({ ...store.pool.options, query_timeout: undefined });
  reader.on('error', () => undefined); // reported by the read that fails
  await reader.connect();
  try {
    // The log is in position order on disk: never sort it (a sort of the whole log would spill to disk).
    await reader.query('SET enable_sort = off');
    const upTo = await snapshotOfTheLog(store.pool, reader);
    const where = (positions: string) =>
      `WHERE ${positions}${types ? ` AND type IN (${types.map((t) => reader.escapeLiteral(t)).join(', ')})` : ''}`;
    const read = (positions: string) =>
      copyOut(
        reader,
        `SELECT position::int8, stream_id::text, stream_version::int4, type::text, data::text, ${columns.join(', ')} FROM events ${where(positions)} ORDER BY position`,
        batchSize,
        (row) => new ReplayedEvent(row),
      );
    return await withTransaction(store.pool, (sql) => withoutQueryTimeout(sql, async () => {
      // Rebuilds of one schema (a second request, another replica's) take turns: the next reads the
      // live tables' definitions only once the last has put its copies in their place.
      await sql.query(`SELECT pg_advisory_xact_lock(hashtext('gantry.rebuild.' || $1))`, [store.schema]);
      // The rows are written once, in bulk: compressing their large values (a state row's JSON) with
      // pglz was a quarter of the database's work. lz4 is much cheaper (where the server has it).
      await sql.query(`SELECT set_config('default_toast_compression', 'lz4', true)
                        FROM pg_settings WHERE name = 'default_toast_compression' AND 'lz4' = ANY(enumvals)`);
      const shadow = await Shadow.create(sql, store.schema, [...new Set(projections.flatMap((p) => p.tables))]);
      // A projection with a replay of its own (a state projection folding in memory, its rows written
      // at the end) takes each batch whole. The others are fed as the log was: in its order across
      // them. Each taking the whole batch in turn could put a row before the row it refers to — a
      // child before its parent, or after the parent went (inLogOrder).
      const replays = projections.filter((p) => p.replay).map((p) => p.replay!(sql, batchSize));
      const rowByRow = projections.filter((p) => !p.replay);
      const feed = async (batches: AsyncGenerator<StoredEvent[]>) => {
        let fed = 0;
        let next = batches.next();
        for (;;) {
          const batch = await next;
          if (batch.done) return fed;
          next = batches.next();
          next.catch(() => undefined); // awaited on the next turn; a failure there ends the rebuild
          const events = batch.value;
          for (const replay of replays) await replay.apply(events);
          for (const run of inLogOrder(events, rowByRow)) for (const projection of rowByRow) await project(sql, projection, run);
          fed += events.length;
        }
      };
      let replayed = await feed(read(`position <= ${upTo}`));
      await reader.query('COMMIT'); // the snapshot: what follows reads the log as it is now
      await shadow.indexed();
      // What was appended meanwhile, with appends held: once the lock is granted none is in flight.
      await shadow.holdTheLog(lockTries);
      replayed += await feed(read(`position > ${upTo}`));
      for (const replay of replays) await replay.finish();
      await shadow.swap();
      for (const projection of projections) await sql.query(`DELETE FROM projection_positions WHERE projection = $1`, [projection.name]);
      return replayed;
    }));
  } finally {
    await reader.end().catch(() => undefined);
  }
}

/**
 * Leaves `reader` in a transaction whose snapshot holds every event appended so far and no part of
 * an append still in flight, and returns the last position in it. The log is held in SHARE mode
 * only while the snapshot is taken: the lock waits for the appends that had begun, and none begins
 * until it goes. An event appended afterwards has a later position than every event in the snapshot
 * (positions are handed out as events are inserted, and an insert holds the table against the lock).
 */
async function snapshotOfTheLog(pool: pg.Pool, reader: pg.Client): Promise<string> {
  return withTransaction(pool, (sql) => withoutQueryTimeout(sql, async () => {
    await sql.query('LOCK TABLE events IN SHARE MODE');
    await reader.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
    const { rows } = await reader.query<{ last: string }>('SELECT coalesce(max(position), 0)::text AS last FROM events');
    return rows[0]!.last;
  }));
}

/**
 * Empty copies of the projections' tables in a schema of the rebuild's own, where the rebuild's
 * transaction finds them first (its search path), then moved into the service's schema in place of
 * the live tables. A copy has the live table's columns, defaults, checks, keys and foreign keys (its
 * own, between the copies), grants (the table's and its columns'), comment and storage settings (its
 * TOAST part's too), and, once loaded, its indexes, built once from the live ones' definitions rather
 * than kept up row by row. What an operator may have added to a view — triggers (enabled as they
 * were), row-level security and its policies, a replica identity, a place in a publication — is
 * given to the copy at the swap, after the catch-up: the rows the rebuild writes fired the live
 * table's triggers when they were first written, and must not fire them again. A table that keeps
 * room on its pages for its rows' next versions (a fill factor, e.g. the jobs view's) is loaded
 * packed: a rebuilt row is mostly one nobody rewrites again (a finished job), and a packed table is
 * half the pages to write; the room is set for the rows added later. Everything happens in the
 * rebuild's transaction: when it fails, nothing of it is left.
 */
class Shadow {
  private constructor(
    private readonly sql: pg.PoolClient,
    private readonly schema: string,
    private readonly name: string,
    private readonly tables: readonly string[],
    private readonly indexes: readonly string[],
    private readonly fillFactors: ReadonlyArray<{ table: string; option: string }>,
    /** Statements that give the copies, once loaded and caught up, what was added to the live tables. */
    private readonly atSwap: readonly string[],
  ) {}

  static async create(sql: pg.PoolClient, schema: string, tables: readonly string[]): Promise<Shadow> {
    const name = `${schema.slice(0, 63 - REBUILD_SUFFIX.length)}${REBUILD_SUFFIX}`;
    const live = (table: string) => `${schema}.${identifier(table)}`;
    const copy = (table: string) => `${name}.${identifier(table)}`;
    // Read before the search path changes: a definition names a table of the schema without its
    // schema, so it names the copy once the rebuild's schema comes first.
    // Keys first: a foreign key between two copies needs the key it refers to.
    const { rows: constraints } = await sql.query<{ table: string; name: string; definition: string }>(
      `SELECT t.relname AS table, c.conname AS name, pg_get_constraintdef(c.oid) AS definition
         FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid
        WHERE c.conrelid = ANY($1::regclass[]) AND c.contype IN ('p', 'u', 'x', 'f') ORDER BY c.contype = 'f', c.conname`,
      [tables.map(live)],
    );
    // The other indexes (a key's comes with its constraint).
    const { rows: indexes } = await sql.query<{ definition: string; table: string }>(
      `SELECT pg_get_indexdef(i.indexrelid) AS definition, t.relname AS table FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid
        WHERE i.indrelid = ANY($1::regclass[])
          AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid AND c.conrelid = i.indrelid AND c.contype IN ('p', 'u', 'x'))`,
      [tables.map(live)],
    );
    const { rows: settings } = await sql.query<{
      table: string;
      options: string[] | null;
      toastOptions: string[] | null;
      comment: string | null;
      rowSecurity: boolean;
      forceRowSecurity: boolean;
      replicaIdentity: string;
      identityIndex: string | null;
    }>(
      `SELECT c.relname AS table, c.reloptions AS options, (SELECT t.reloptions FROM pg_class t WHERE t.oid = c.reltoastrelid) AS "toastOptions",
              obj_description(c.oid, 'pg_class') AS comment, c.relrowsecurity AS "rowSecurity", c.relforcerowsecurity AS "forceRowSecurity",
              c.relreplident AS "replicaIdentity",
              (SELECT quote_ident(i.relname) FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid WHERE x.indrelid = c.oid AND x.indisreplident) AS "identityIndex"
         FROM pg_class c WHERE c.oid = ANY($1::regclass[])`,
      [tables.map(live)],
    );
    // Grants to other roles (a reporting role reading a view, say), on the table or on some of its
    // columns (`column` is null for the table's); the owner's are the copy's own.
    const { rows: grants } = await sql.query<{ table: string; column: string | null; privilege: string; grantee: string; grantable: boolean }>(
      `WITH acl AS (
         SELECT c.oid, c.relname, c.relowner, NULL::text AS col, c.relacl AS acl FROM pg_class c WHERE c.oid = ANY($1::regclass[])
         UNION ALL
         SELECT c.oid, c.relname, c.relowner, quote_ident(a.attname), a.attacl FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
          WHERE c.oid = ANY($1::regclass[]) AND a.attnum > 0 AND NOT a.attisdropped AND a.attacl IS NOT NULL)
       SELECT acl.relname AS table, acl.col AS column, g.privilege_type AS privilege,
              CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(g.grantee)) END AS grantee, g.is_grantable AS grantable
         FROM acl, aclexplode(acl.acl) g WHERE g.grantee <> acl.relowner`,
      [tables.map(live)],
    );
    // Triggers of the operator's (not those PostgreSQL keeps for foreign keys), with whether and when they fire.
    const { rows: triggers } = await sql.query<{ table: string; name: string; definition: string; enabled: string }>(
      `SELECT t.relname AS table, quote_ident(g.tgname) AS name, pg_get_triggerdef(g.oid) AS definition, g.tgenabled AS enabled
         FROM pg_trigger g JOIN pg_class t ON t.oid = g.tgrelid WHERE g.tgrelid = ANY($1::regclass[]) AND NOT g.tgisinternal ORDER BY g.tgname`,
      [tables.map(live)],
    );
    const { rows: policies } = await sql.query<{ table: string; name: string; permissive: boolean; command: string; roles: string[]; using: string | null; check: string | null }>(
      `SELECT t.relname AS table, quote_ident(p.polname) AS name, p.polpermissive AS permissive, p.polcmd AS command,
              ARRAY(SELECT CASE WHEN r = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(r)) END FROM unnest(p.polroles) r) AS roles,
              pg_get_expr(p.polqual, p.polrelid) AS using, pg_get_expr(p.polwithcheck, p.polrelid) AS check
         FROM pg_policy p JOIN pg_class t ON t.oid = p.polrelid WHERE p.polrelid = ANY($1::regclass[]) ORDER BY p.polname`,
      [tables.map(live)],
    );
    // Publications that name a view's table (one of all tables, or of the schema's, takes the copy by itself).
    const { rows: publications } = await sql.query<{ table: string; publication: string; columns: string[] | null; filter: string | null }>(
      `SELECT t.relname AS table, quote_ident(p.pubname) AS publication, pg_get_expr(r.prqual, r.prrelid) AS filter,
              CASE WHEN r.prattrs IS NULL THEN NULL
                   ELSE ARRAY(SELECT quote_ident(a.attname) FROM pg_attribute a WHERE a.attrelid = r.prrelid AND a.attnum = ANY(r.prattrs::int2[]) ORDER BY a.attnum) END AS columns
         FROM pg_publication_rel r JOIN pg_publication p ON p.oid = r.prpubid JOIN pg_class t ON t.oid = r.prrelid
        WHERE r.prrelid = ANY($1::regclass[]) ORDER BY p.pubname`,
      [tables.map(live)],
    );
    await sql.query(`CREATE SCHEMA ${name}`);
    await sql.query(`SET LOCAL search_path = ${name}, ${schema}, public`);
    const fillFactors: Array<{ table: string; option: string }> = [];
    const atSwap: string[] = [];
    for (const table of tables) {
      await sql.query(`CREATE TABLE ${copy(table)} (LIKE ${live(table)} INCLUDING ALL EXCLUDING INDEXES)`);
      const set = settings.find((s) => s.table === table)!;
      const options = [
        ...(set.options ?? []).filter((option) => !option.startsWith('fillfactor=')),
        ...(set.toastOptions ?? []).map((option) => `toast.${option}`),
      ];
      if (options.length > 0) await sql.query(`ALTER TABLE ${copy(table)} SET (${options.join(', ')})`);
      fillFactors.push(...(set.options ?? []).filter((option) => option.startsWith('fillfactor=')).map((option) => ({ table, option })));
      if (set.comment !== null) await sql.query(`COMMENT ON TABLE ${copy(table)} IS ${pg.escapeLiteral(set.comment)}`);
      for (const grant of grants.filter((g) => g.table === table)) {
        const on = grant.column === null ? '' : ` (${grant.column})`;
        await sql.query(`GRANT ${grant.privilege}${on} ON ${copy(table)} TO ${grant.grantee}${grant.grantable ? ' WITH GRANT OPTION' : ''}`);
      }
      for (const trigger of triggers.filter((t) => t.table === table)) {
        atSwap.push(onTheCopy(trigger.definition, live(table), copy(table)));
        const state = TRIGGER_STATES[trigger.enabled];
        if (state) atSwap.push(`ALTER TABLE ${copy(table)} ${state} TRIGGER ${trigger.name}`);
      }
      for (const policy of policies.filter((p) => p.table === table)) {
        atSwap.push(
          `CREATE POLICY ${policy.name} ON ${copy(table)} AS ${policy.permissive ? 'PERMISSIVE' : 'RESTRICTIVE'} FOR ${POLICY_COMMANDS[policy.command]}` +
            ` TO ${policy.roles.join(', ')}${policy.using === null ? '' : ` USING (${policy.using})`}${policy.check === null ? '' : ` WITH CHECK (${policy.check})`}`,
        );
      }
      if (set.rowSecurity) atSwap.push(`ALTER TABLE ${copy(table)} ENABLE ROW LEVEL SECURITY`);
      if (set.forceRowSecurity) atSwap.push(`ALTER TABLE ${copy(table)} FORCE ROW LEVEL SECURITY`);
      const identity = set.replicaIdentity === 'i' ? `USING INDEX ${set.identityIndex}` : REPLICA_IDENTITIES[set.replicaIdentity];
      if (identity) atSwap.push(`ALTER TABLE ${copy(table)} REPLICA IDENTITY ${identity}`);
      for (const { publication, columns, filter } of publications.filter((p) => p.table === table)) {
        atSwap.push(`ALTER PUBLICATION ${publication} ADD TABLE ${copy(table)}${columns ? ` (${columns.join(', ')})` : ''}${filter === null ? '' : ` WHERE (${filter})`}`);
      }
    }
    for (const constraint of constraints) {
      await sql.query(`ALTER TABLE ${copy(constraint.table)} ADD CONSTRAINT ${pg.escapeIdentifier(constraint.name)} ${constraint.definition}`);
    }
    const onCopy = indexes.map(({ definition, table }) => onTheCopy(definition, live(table), copy(table)));
    return new Shadow(sql, schema, name, tables, onCopy, fillFactors, atSwap);
  }

  /** Builds the indexes on the loaded copies, and gives the planner their statistics. */
  async indexed(): Promise<void> {
    for (const index of this.indexes) await this.sql.query(index);
    for (const table of this.tables) await this.sql.query(`ANALYZE ${this.name}.${identifier(table)}`);
  }

  /**
   * Holds the log in SHARE mode (no append commits until the rebuild does) and the live tables
   * against everyone (they are about to be dropped). Both or neither: a command's transaction may
   * hold a live table (a row it read FOR SHARE) and then wait to append behind the log's lock, while
   * the rebuild, holding the log, waits for that table — each waiting for the other. So each try
   * waits a moment at most for either lock, and lets both go before the next; a real deadlock never
   * forms, and the command goes on.
   */
  async holdTheLog(tries: number): Promise<void> {
    const live = this.tables.map((t) => `${this.schema}.${identifier(t)}`);
    for (let attempt = 1; ; attempt++) {
      await this.sql.query('SAVEPOINT hold_the_log');
      try {
        await this.sql.query(`SET LOCAL lock_timeout = ${LOCK_WAIT_MS}`);
        await this.sql.query('LOCK TABLE events IN SHARE MODE');
        if (live.length > 0) await this.sql.query(`LOCK TABLE ${live.join(', ')} IN ACCESS EXCLUSIVE MODE`);
        await this.sql.query('RELEASE SAVEPOINT hold_the_log');
        await this.sql.query('SET LOCAL lock_timeout = DEFAULT');
        return;
      } catch (error) {
        await this.sql.query('ROLLBACK TO SAVEPOINT hold_the_log');
        if ((error as { code?: string }).code !== LOCK_NOT_AVAILABLE) throw error;
        if (attempt >= tries) {
          throw new Error(`the rebuild could not hold the log and the views for its catch-up in ${tries} tries: other transactions kept them`, { cause: error });
        }
        await new Promise((resolve) => setTimeout(resolve, LOCK_WAIT_MS * Math.random()));
      }
    }
  }

  /** Puts the copies in the live tables' place. */
  async swap(): Promise<void> {
    for (const statement of this.atSwap) await this.sql.query(statement);
    for (const { table, option } of this.fillFactors) await this.sql.query(`ALTER TABLE ${this.name}.${identifier(table)} SET (${option})`);
    if (this.tables.length > 0) await this.sql.query(`DROP TABLE ${this.tables.map((t) => `${this.schema}.${identifier(t)}`).join(', ')}`);
    for (const table of this.tables) await this.sql.query(`ALTER TABLE ${this.name}.${identifier(table)} SET SCHEMA ${this.schema}`);
    await this.sql.query(`DROP SCHEMA ${this.name}`);
    await this.sql.query(`SET LOCAL search_path = ${this.schema}, public`);
  }
}

/**
 * An index's or trigger's definition, on the copy instead of the live table. Both name their table
 * with its schema (pg_get_indexdef and pg_get_triggerdef do, whatever the search path).
 */
function onTheCopy(definition: string, live: string, copy: string): string {
  const on = ` ON ${live} `;
  if (!definition.includes(on)) throw new Error(`a rebuild cannot place ${definition} on its copy`);
  return definition.replace(on, ` ON ${copy} `);
}

/** pg_trigger.tgenabled: how a trigger that is not simply on ('O') is set after it is created. */
const TRIGGER_STATES: Record<string, string | undefined> = { D: 'DISABLE', R: 'ENABLE REPLICA', A: 'ENABLE ALWAYS' };
/** pg_policy.polcmd */
const POLICY_COMMANDS: Record<string, string> = { '*': 'ALL', r: 'SELECT', a: 'INSERT', w: 'UPDATE', d: 'DELETE' };
/** pg_class.relreplident, other than the default ('d') and an index's ('i') */
const REPLICA_IDENTITIES: Record<string, string | undefined> = { f: 'FULL', n: 'NOTHING' };

/** A table name as pg_get_indexdef writes it: bare when it is a plain lower-case name, else quoted. */
function identifier(name: string): string {
  return /^[a-z_][a-z0-9_]*$/.test(name) ? name : pg.escapeIdentifier(name);
}

const REBUILD_SUFFIX = '_rebuild';
/** How long one try at the rebuild's locks waits for either (below PostgreSQL's deadlock_timeout, 1 s), and how many tries it makes. */
const LOCK_WAIT_MS = 200;
const LOCK_TRIES = 100;
const LOCK_NOT_AVAILABLE = '55P03';

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
