import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import pTimeout from 'p-timeout';
import { dropSchema, eventually, testDatabaseUrl, uniqueName } from '@gantry/testing';
import { createPool } from './database.js';
import { migrate } from './migrations.js';
import { EventStore } from './event-store.js';
import { applyToProjection, stateProjection, type Projection } from './projection.js';
import { rebuildProjections } from './rebuild.js';

const totals: Projection = {
  name: 'account_totals',
  tables: ['account_totals'],
  types: ['Deposited', 'Withdrawn'],
  async apply(sql, event) {
    const amount = (event.data as { amount: number }).amount * (event.type === 'Withdrawn' ? -1 : 1);
    await sql.query(
      `INSERT INTO account_totals (account, total, last_position) VALUES ($1, $2, $3)
       ON CONFLICT (account) DO UPDATE SET total = account_totals.total + EXCLUDED.total, last_position = EXCLUDED.last_position`,
      [event.streamId, amount, event.position],
    );
  },
};

/** The totals projection held at its first event until `open()`: a rebuild stopped part-way (`reached` gives its connection's pid). */
function heldTotals(): { projection: Projection; reached: Promise<number>; open: () => void } {
  let reach!: (pid: number) => void;
  const reached = new Promise<number>((resolve) => (reach = resolve));
  let open!: () => void;
  const gate = new Promise<void>((resolve) => (open = resolve));
  let held = false;
  const projection: Projection = {
    ...totals,
    async apply(sql, event) {
      if (!held) {
        held = true;
        reach((await sql.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid);
        await gate;
      }
      return totals.apply(sql, event);
    },
  };
  return { projection, reached, open };
}

/** A state projection that says how a rebuild writes its rows (copy): it is rebuilt in memory. */
type Ledger = { total: number; memos: string[]; tag: string | null };
const calls = { copied: 0, loaded: 0 };
const ledgers = stateProjection<Ledger>({
  name: 'ledgers',
  tables: ['ledgers'],
  types: ['Booked'],
  fields: [],
  initialState: { total: 0, memos: [], tag: null },
  evolve: (state, event) => {
    const { amount, memo } = event.data as { amount: number; memo: string };
    return { total: state.total + amount, memos: [...state.memos, memo], tag: memo.length % 2 === 0 ? memo : state.tag };
  },
  async load(sql, ids) {
    calls.loaded += ids.length;
    const { rows } = await sql.query<{ id: string; state: Ledger }>('SELECT id, state FROM ledgers WHERE id = ANY($1)', [ids]);
    return new Map(rows.map((r) => [r.id, r.state]));
  },
  async save(sql, rows) {
    await sql.query(
      `INSERT INTO ledgers (id, first_position, total, tag, memos, state)
       SELECT * FROM jsonb_to_recordset($1::jsonb) AS r(id text, first_position bigint, total int, tag text, memos jsonb, state jsonb)
       ON CONFLICT (id) DO UPDATE SET total = EXCLUDED.total, tag = EXCLUDED.tag, memos = EXCLUDED.memos, state = EXCLUDED.state`,
      [JSON.stringify(rows.map((r) => ledgerRow(r.streamId, r.state, r.first)))],
    );
  },
  copy: {
    table: 'ledgers',
    row: (state, first) => {
      calls.copied++;
      return ledgerRow(first.streamId, state, first);
    },
  },
});
const ledgerRow = (id: string, state: Ledger, first: { position: number } | null) => ({
  id,
  first_position: first?.position ?? 0,
  total: state.total,
  tag: state.tag,
  memos: state.memos,
  state,
});

describe('projections', () => {
  const schema = uniqueName('projection');
  let pool: pg.Pool;
  let store: EventStore;

  beforeAll(async () => {
    await migrate({ url: testDatabaseUrl, schema });
    pool = createPool({ url: testDatabaseUrl, schema, max: 12 });
    await pool.query('CREATE TABLE account_totals (account text PRIMARY KEY, total integer NOT NULL, last_position bigint NOT NULL)');
    await pool.query(
      'CREATE TABLE ledgers (id text PRIMARY KEY, first_position bigint NOT NULL, total integer NOT NULL, tag text, memos jsonb NOT NULL, state jsonb NOT NULL)',
    );
    await pool.query('CREATE INDEX ledgers_by_tag ON ledgers (tag)');
    store = new EventStore({ pool, schema, inlineProjections: [totals, ledgers] });
  });
  afterAll(async () => {
    await pool.end();
    await dropSchema(schema);
  });

  const snapshot = async () =>
    (await pool.query('SELECT account, total, last_position FROM account_totals ORDER BY account')).rows;

  it('a rebuild from the log equals the live tables row for row', async () => {
    const accounts = Array.from({ length: 10 }, () => `acct-${randomUUID()}`);
    await Promise.all(
      accounts.map(async (account, a) => {
        for (let v = 0; v < 20; v++) {
          const type = v % 3 === 2 ? 'Withdrawn' : v % 5 === 4 ? 'Noted' : 'Deposited';
          await store.append(account, v, [{ type, data: { amount: a + v } }], { correlationId: 'load' });
        }
      }),
    );
    const live = await snapshot();
    expect(live).toHaveLength(10);
    await pool.query('UPDATE account_totals SET total = -999'); // a damaged read model
    // Batches of 7: the reader is a batch ahead across many batch boundaries.
    const replayed = await rebuildProjections(store, [totals], 7);
    expect(replayed).toBe(170); // the 30 Noted events are not read: no projection takes them
    expect(await snapshot()).toEqual(live);
  });

  it('projections whose tables refer to each other are rebuilt in the log\'s order across them: a child row never comes before its parent', async () => {
    // Two projections applied row by row, the children's table referring to the parents' (and going
    // with them): a parent opened, given a child, closed (its child goes), then another one.
    const parents: Projection = {
      name: 'fk_parents',
      tables: ['fk_parents', 'fk_children'],
      types: ['ParentOpened', 'ParentClosed'],
      async apply(sql, event) {
        if (event.type === 'ParentOpened') await sql.query('INSERT INTO fk_parents (id) VALUES ($1)', [event.streamId]);
        else await sql.query('DELETE FROM fk_parents WHERE id = $1', [event.streamId]);
      },
    };
    const children: Projection = {
      name: 'fk_children',
      tables: [],
      types: ['ChildAdded'],
      async apply(sql, event) {
        await sql.query('INSERT INTO fk_children (id, parent) VALUES ($1, $2)', [(event.data as { child: string }).child, event.streamId]);
      },
    };
    await pool.query('CREATE TABLE fk_parents (id text PRIMARY KEY)');
    await pool.query('CREATE TABLE fk_children (id text PRIMARY KEY, parent text NOT NULL REFERENCES fk_parents (id) ON DELETE CASCADE)');
    const family = new EventStore({ pool, schema, inlineProjections: [parents, children] });
    const [first, second] = [`parent-${randomUUID()}`, `parent-${randomUUID()}`];
    await family.append(first, 0, [{ type: 'ParentOpened', data: {} }], { correlationId: 'fk' });
    await family.append(first, 1, [{ type: 'ChildAdded', data: { child: `${first}/a` } }], { correlationId: 'fk' });
    await family.append(first, 2, [{ type: 'ParentClosed', data: {} }], { correlationId: 'fk' });
    await family.append(second, 0, [{ type: 'ParentOpened', data: {} }, { type: 'ChildAdded', data: { child: `${second}/b` } }], { correlationId: 'fk' });
    const tables = async () => ({
      parents: (await pool.query('SELECT id FROM fk_parents ORDER BY id')).rows,
      children: (await pool.query('SELECT id, parent FROM fk_children ORDER BY id')).rows,
    });
    const live = await tables();
    expect(live).toEqual({ parents: [{ id: second }], children: [{ id: `${second}/b`, parent: second }] });
    expect(await rebuildProjections(family, [parents, children])).toBe(5);
    expect(await tables()).toEqual(live);
  });

  it("a rebuilt table has the live one's shape; a rebuild that cannot drop a table something else depends on fails and changes nothing", async () => {
    const notes: Projection = {
      name: 'shaped_notes',
      tables: ['shaped_notes'],
      types: ['Remarked'],
      async apply(sql, event) {
        const id = `${event.streamId}/${event.streamVersion}`;
        const amount = (event.data as { amount: number }).amount;
        await sql.query('INSERT INTO shaped_notes (id, account, n, body) VALUES ($1, $2, $3, $4)', [id, event.streamId, amount, `remark ${amount} `.repeat(1_000)]);
      },
    };
    // Refers to a table it does not rebuild (the account totals), and has one of every kind of part.
    await pool.query(
      `CREATE TABLE shaped_notes (id text PRIMARY KEY, account text NOT NULL REFERENCES account_totals (account), n integer NOT NULL CHECK (n >= 0),
                                  kind text NOT NULL DEFAULT 'note', body text NOT NULL, UNIQUE (account, id)) WITH (fillfactor = 70, autovacuum_enabled = false)`,
    );
    await pool.query(`CREATE INDEX shaped_notes_by_kind ON shaped_notes (kind) WHERE kind <> 'note'`);
    await pool.query(`COMMENT ON TABLE shaped_notes IS 'one row per remark'`);
    await pool.query('GRANT SELECT ON shaped_notes TO PUBLIC');
    try {
      const noting = new EventStore({ pool, schema, inlineProjections: [totals, notes] });
      const account = `acct-${randomUUID()}`;
      await noting.append(account, 0, [{ type: 'Deposited', data: { amount: 1 } }, { type: 'Remarked', data: { amount: 2 } }, { type: 'Remarked', data: { amount: 3 } }], {
        correlationId: 'shape',
      });
      const shape = async () => ({
        columns: (await pool.query(
          `SELECT column_name, data_type, is_nullable, column_default FROM information_schema.columns
            WHERE table_schema = current_schema() AND table_name = 'shaped_notes' ORDER BY ordinal_position`,
        )).rows,
        constraints: (await pool.query(`SELECT conname, pg_get_constraintdef(oid) AS definition FROM pg_constraint WHERE conrelid = 'shaped_notes'::regclass ORDER BY conname`)).rows,
        indexes: (await pool.query(`SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'shaped_notes' ORDER BY indexname`)).rows,
        table: (await pool.query(`SELECT ARRAY(SELECT unnest(reloptions) ORDER BY 1) AS options, relacl::text[] AS grants, obj_description(oid, 'pg_class') AS comment FROM pg_class WHERE oid = 'shaped_notes'::regclass`)).rows,
        leftovers: (await pool.query(`SELECT nspname FROM pg_namespace WHERE nspname LIKE $1`, [`${schema}_%`])).rows,
      });
      const rows = async () => (await pool.query('SELECT id, account, n, kind FROM shaped_notes ORDER BY id')).rows;
      const [liveShape, liveRows] = [await shape(), await rows()];
      expect(liveRows).toEqual(expect.arrayContaining([{ id: `${account}/3`, account, n: 3, kind: 'note' }]));
      await pool.query('DELETE FROM shaped_notes WHERE account = $1', [account]); // a damaged read model
      await rebuildProjections(noting, [notes]);
      expect(await rows()).toEqual(liveRows);
      expect(await shape()).toEqual(liveShape);
      // Its large values written with the cheaper compression, where the server has it.
      const { rows: [{ lz4 }] } = await pool.query(`SELECT 'lz4' = ANY(enumvals) AS lz4 FROM pg_settings WHERE name = 'default_toast_compression'`);
      const { rows: methods } = await pool.query('SELECT DISTINCT pg_column_compression(body) AS method FROM shaped_notes');
      expect(methods).toEqual([{ method: lz4 ? 'lz4' : 'pglz' }]);

      // The account totals cannot be dropped while the notes refer to them: the rebuild says so and rolls back.
      await pool.query('UPDATE account_totals SET total = -999 WHERE account = $1', [account]);
      const damaged = await snapshot();
      await expect(rebuildProjections(store, [totals])).rejects.toThrow(/depend/);
      expect(await snapshot()).toEqual(damaged);
      expect(await shape()).toEqual(liveShape);
    } finally {
      await pool.query('DROP TABLE shaped_notes');
    }
    // Without the notes, the totals rebuild.
    await rebuildProjections(store, [totals]);
    expect((await snapshot()).every((row) => row.total !== -999)).toBe(true);
  });

  it("what an operator added to a view is on the rebuilt one — column grants, triggers, row-level security, TOAST options, replica identity, a publication — and its triggers do not fire for the rebuild's rows", async () => {
    const publication = uniqueName('rebuilt_pub');
    const reader = uniqueName('rebuilt_reader');
    await pool.query(`CREATE ROLE ${reader} NOLOGIN`);
    await pool.query('CREATE TABLE audited (id bigserial PRIMARY KEY, op text NOT NULL, account text NOT NULL)');
    await pool.query(`CREATE FUNCTION audit_totals() RETURNS trigger LANGUAGE plpgsql AS $$
                        BEGIN INSERT INTO audited (op, account) VALUES (TG_OP, NEW.account); RETURN NEW; END $$`);
    await pool.query('CREATE TRIGGER audit_totals AFTER INSERT OR UPDATE ON account_totals FOR EACH ROW WHEN (NEW.total >= 0) EXECUTE FUNCTION audit_totals()');
    await pool.query('CREATE TRIGGER audit_totals_idle AFTER DELETE ON account_totals FOR EACH ROW EXECUTE FUNCTION audit_totals()');
    await pool.query('ALTER TABLE account_totals DISABLE TRIGGER audit_totals_idle');
    await pool.query(`GRANT SELECT (account, total) ON account_totals TO ${reader}`);
    await pool.query(`GRANT UPDATE (total) ON account_totals TO ${reader} WITH GRANT OPTION`);
    await pool.query('ALTER TABLE account_totals ENABLE ROW LEVEL SECURITY');
    await pool.query(`CREATE POLICY positive_only ON account_totals AS RESTRICTIVE FOR SELECT TO ${reader}, PUBLIC USING (total >= 0)`);
    await pool.query(`CREATE POLICY own_rows ON account_totals FOR UPDATE TO ${reader} USING (account LIKE 'acct-%') WITH CHECK (total < 1000000)`);
    await pool.query('ALTER TABLE account_totals SET (toast.autovacuum_enabled = false)');
    await pool.query('ALTER TABLE account_totals REPLICA IDENTITY USING INDEX account_totals_pkey');
    await pool.query(`CREATE PUBLICATION ${publication} FOR TABLE account_totals (account, total) WHERE (total > 0) WITH (publish = 'insert')`);
    const parts = async () => ({
      grants: (await pool.query(
        `SELECT column_name, grantee, privilege_type, is_grantable FROM information_schema.column_privileges
          WHERE table_schema = current_schema() AND table_name = 'account_totals' AND grantee = $1 ORDER BY 1, 2, 3`,
        [reader],
      )).rows,
      triggers: (await pool.query(
        `SELECT tgname, tgenabled, pg_get_triggerdef(oid) AS definition FROM pg_trigger WHERE tgrelid = 'account_totals'::regclass AND NOT tgisinternal ORDER BY 1`,
      )).rows,
      policies: (await pool.query(`SELECT policyname, permissive, roles::text[], cmd, qual, with_check FROM pg_policies WHERE tablename = 'account_totals' ORDER BY 1`)).rows,
      table: (await pool.query(
        `SELECT c.relrowsecurity, c.relforcerowsecurity, c.relreplident, t.reloptions AS toast FROM pg_class c JOIN pg_class t ON t.oid = c.reltoastrelid
          WHERE c.oid = 'account_totals'::regclass`,
      )).rows,
      published: (await pool.query(`SELECT attnames::text[], rowfilter FROM pg_publication_tables WHERE pubname = $1`, [publication])).rows,
    });
    const audited = async () => Number((await pool.query('SELECT count(*) FROM audited')).rows[0].count);
    try {
      const account = `acct-${randomUUID()}`;
      await store.append(account, 0, [{ type: 'Deposited', data: { amount: 5 } }], { correlationId: 'operator' });
      const before = await parts();
      expect(before.triggers).toHaveLength(2);
      expect(before.policies).toHaveLength(2);
      expect(before.published).toEqual([{ attnames: ['account', 'total'], rowfilter: '(total > 0)' }]);
      const writes = await audited();
      expect(writes).toBeGreaterThan(0);

      await rebuildProjections(store, [totals]);
      expect(await parts()).toEqual(before);
      // The rebuild wrote every account's row again; the trigger fired for none of them.
      expect(await audited()).toBe(writes);
      // It fires for the next write, and the disabled one still does not.
      await store.append(account, 1, [{ type: 'Deposited', data: { amount: 1 } }], { correlationId: 'operator' });
      expect(await audited()).toBe(writes + 1);
      await pool.query('DELETE FROM account_totals WHERE account = $1', [account]);
      expect(await audited()).toBe(writes + 1);
    } finally {
      await pool.query(`DROP PUBLICATION ${publication}`);
      await pool.query('DROP TRIGGER audit_totals ON account_totals; DROP TRIGGER audit_totals_idle ON account_totals; DROP FUNCTION audit_totals(); DROP TABLE audited');
      await pool.query('DROP POLICY positive_only ON account_totals; DROP POLICY own_rows ON account_totals');
      await pool.query('ALTER TABLE account_totals DISABLE ROW LEVEL SECURITY, REPLICA IDENTITY DEFAULT, RESET (toast.autovacuum_enabled)');
      await pool.query(`REVOKE ALL ON account_totals FROM ${reader}; DROP ROLE ${reader}`);
    }
    await rebuildProjections(store, [totals]);
  });

  it('appends go on while a rebuild replays the log, and what they appended meanwhile is in the rebuilt tables', async () => {
    const [older, newer] = [`acct-${randomUUID()}`, `acct-${randomUUID()}`];
    await store.append(older, 0, [{ type: 'Deposited', data: { amount: 10 } }], { correlationId: 'online' });
    const before = await snapshot();
    await pool.query('UPDATE account_totals SET total = -999'); // a damaged read model
    // The rebuild stops at its first event until the appends below are done.
    const { projection: gated, reached, open } = heldTotals();
    const rebuilt = rebuildProjections(store, [gated]);
    rebuilt.catch(() => undefined); // awaited below
    await reached;
    const [[deposited], [opened]] = await pTimeout(
      Promise.all([
        store.append(older, 1, [{ type: 'Deposited', data: { amount: 5 } }], { correlationId: 'online' }),
        store.append(newer, 0, [{ type: 'Deposited', data: { amount: 7 } }], { correlationId: 'online' }),
      ]),
      { milliseconds: 20_000, message: 'an append waited for the rebuild to finish' },
    );
    open();
    await rebuilt;
    const expected = [
      ...before.map((row) => (row.account === older ? { account: older, total: 15, last_position: String(deposited!.position) } : row)),
      { account: newer, total: 7, last_position: String(opened!.position) },
    ].sort((a, b) => (a.account < b.account ? -1 : 1));
    expect(await snapshot()).toEqual(expected);
  });

  it("a rebuild and a command's transaction that holds a view while it appends do not wait for each other", async () => {
    const account = `acct-${randomUUID()}`;
    await store.append(account, 0, [{ type: 'Deposited', data: { amount: 1 } }], { correlationId: 'held' });
    const sql = await pool.connect();
    try {
      // A command that read its row FOR SHARE, then appends: the rebuild, about to swap the view,
      // waits for this transaction, which waits to append while the rebuild holds the log.
      await sql.query('BEGIN');
      await sql.query('SELECT total FROM account_totals WHERE account = $1 FOR SHARE', [account]);
      const rebuilt = rebuildProjections(store, [totals]);
      rebuilt.catch(() => undefined); // awaited below
      await eventually(
        async () => (await pool.query(`SELECT 1 FROM pg_locks WHERE NOT granted AND relation = 'account_totals'::regclass`)).rowCount! > 0,
        { what: 'the rebuild waiting for the view this transaction holds', intervalMs: 5 },
      );
      const executed = await store.executeWithin(sql, { metadata: { correlationId: 'held' } }, (uow) =>
        uow.append(account, 1, [{ type: 'Deposited', data: { amount: 2 } }]),
      );
      await sql.query('COMMIT');
      await rebuilt;
      expect(executed.result).toHaveLength(1);
      const { rows } = await pool.query('SELECT total FROM account_totals WHERE account = $1', [account]);
      expect(rows).toEqual([{ total: 3 }]);
    } finally {
      await sql.query('ROLLBACK').catch(() => undefined);
      sql.release();
    }
  });

  it('a rebuild that cannot hold the views for its catch-up gives up, says why and changes nothing', async () => {
    const account = `acct-${randomUUID()}`;
    await store.append(account, 0, [{ type: 'Deposited', data: { amount: 4 } }], { correlationId: 'kept' });
    await pool.query('UPDATE account_totals SET total = -999 WHERE account = $1', [account]);
    const damaged = await snapshot();
    const holder = await pool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query('SELECT count(*) FROM account_totals'); // holds the view until it ends
      await expect(rebuildProjections(store, [totals], 1_000, 3)).rejects.toThrow('could not hold the log and the views for its catch-up in 3 tries');
      expect((await pool.query('SELECT nspname FROM pg_namespace WHERE nspname = $1', [`${schema}_rebuild`])).rows).toEqual([]);
    } finally {
      await holder.query('ROLLBACK');
      holder.release();
    }
    expect(await snapshot()).toEqual(damaged);
    await store.append(account, 1, [{ type: 'Deposited', data: { amount: 1 } }], { correlationId: 'kept' }); // appends go on
    await rebuildProjections(store, [totals]);
    expect((await pool.query('SELECT total FROM account_totals WHERE account = $1', [account])).rows).toEqual([{ total: 5 }]);
  });

  it('a rebuild whose connection dies part-way leaves the views as they were and nothing of its own; the next one succeeds', async () => {
    const account = `acct-${randomUUID()}`;
    await store.append(account, 0, [{ type: 'Deposited', data: { amount: 3 } }], { correlationId: 'killed' });
    await pool.query('UPDATE account_totals SET total = -999 WHERE account = $1', [account]);
    const damaged = await snapshot();
    // The rebuild's connection is killed while it replays, its copies made and not yet swapped in.
    const { projection: gated, reached, open } = heldTotals();
    const rebuilt = rebuildProjections(store, [gated]);
    rebuilt.catch(() => undefined); // awaited below
    const pid = await reached;
    await pool.query('SELECT pg_terminate_backend($1)', [pid]);
    open();
    await expect(rebuilt).rejects.toThrow();
    expect(await snapshot()).toEqual(damaged);
    expect((await pool.query('SELECT nspname FROM pg_namespace WHERE nspname = $1', [`${schema}_rebuild`])).rows).toEqual([]);
    await rebuildProjections(store, [totals]);
    expect((await pool.query('SELECT total FROM account_totals WHERE account = $1', [account])).rows).toEqual([{ total: 3 }]);
  });

  /** Until a rebuild of the schema waits for the rebuild lock another one holds. */
  const aRebuildWaitsItsTurn = (what: string) =>
    eventually(
      async () =>
        (await pool.query(
          `SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
              AND objid::int8 = (hashtext('gantry.rebuild.' || $1)::int8 & 4294967295)`,
          [schema],
        )).rowCount! > 0,
      { what, intervalMs: 5 },
    );
  it('two rebuilds at once take turns, and both leave the tables as the log has them', async () => {
    const account = `acct-${randomUUID()}`;
    await store.append(account, 0, [{ type: 'Deposited', data: { amount: 6 } }], { correlationId: 'turns' });
    const live = await snapshot();
    await pool.query('UPDATE account_totals SET total = -999 WHERE account = $1', [account]);
    const { projection: gated, reached, open } = heldTotals();
    const first = rebuildProjections(store, [gated]);
    first.catch(() => undefined); // awaited below
    await reached;
    const second = rebuildProjections(store, [totals]);
    second.catch(() => undefined); // awaited below
    // The second waits for the first before it reads the tables the first is about to replace.
    await aRebuildWaitsItsTurn('the second rebuild waiting for its turn');
    await store.append(account, 1, [{ type: 'Deposited', data: { amount: 1 } }], { correlationId: 'turns' });
    open();
    await Promise.all([first, second]);
    expect(await snapshot()).toEqual(live.map((row) => (row.account === account ? { ...row, total: 7, last_position: expect.any(String) } : row)));
  });

  it("a rebuild is not bounded by its pool's query timeout: it waits for its turn, and its statements take as long as they take", async () => {
    const bounded = createPool({ url: testDatabaseUrl, schema, max: 4, timeouts: { queryMs: 300 } });
    const holder = await pool.connect();
    try {
      const account = `acct-${randomUUID()}`;
      await store.append(account, 0, [{ type: 'Deposited', data: { amount: 5 } }], { correlationId: 'bounded' });
      const live = await snapshot();
      // Another rebuild's turn, held well past the bound.
      await holder.query('BEGIN');
      await holder.query(`SELECT pg_advisory_xact_lock(hashtext('gantry.rebuild.' || $1))`, [schema]);
      const rebuilt = rebuildProjections(new EventStore({ pool: bounded, schema, inlineProjections: [totals] }), [totals]);
      rebuilt.catch(() => undefined); // awaited below
      await aRebuildWaitsItsTurn('the rebuild waiting for its turn');
      await new Promise((resolve) => setTimeout(resolve, 900));
      await holder.query('COMMIT');
      await expect(rebuilt).resolves.toBeGreaterThan(0);
      expect(await snapshot()).toEqual(live);
      // The pool's other queries are bounded still.
      await expect(bounded.query('SELECT pg_sleep(1)')).rejects.toThrow('Query read timeout');
    } finally {
      await holder.query('ROLLBACK').catch(() => undefined);
      holder.release();
      await bounded.end();
    }
  });

  it('a rebuild hands projections the events as stored, metadata and time included', async () => {
    const account = `acct-${randomUUID()}`;
    await store.append(account, 0, [{ type: 'Deposited', data: { amount: 5 } }], { correlationId: 'corr-1', causationId: 'cause-1', actor: 'tester' });
    await pool.query('CREATE TABLE IF NOT EXISTS seen (event_id uuid PRIMARY KEY, event jsonb NOT NULL)');
    const seen: Projection = {
      name: 'seen',
      tables: ['seen'],
      types: ['Deposited'],
      async apply(sql, event) {
        await sql.query('INSERT INTO seen (event_id, event) VALUES ($1, $2)', [event.eventId, JSON.stringify(event)]);
      },
    };
    await rebuildProjections(store, [seen], 3);
    const [stored] = await store.readStream(account);
    const { rows } = await pool.query('SELECT event FROM seen WHERE event_id = $1', [stored!.eventId]);
    expect(rows[0].event).toEqual(JSON.parse(JSON.stringify(stored)));
    expect(rows[0].event.metadata).toMatchObject({ correlationId: 'corr-1', causationId: 'cause-1', actor: 'tester' });
  });

  it('a state projection rebuilt in memory equals the live table, streams that come back late in the log included', async () => {
    // Text COPY has to carry: tabs, newlines, backslashes, quotes, the NULL marker's spelling, other scripts.
    const memos = ['plain', 'tab\there', 'line\nbreak\r\n', 'back\\slash', 'say "hi"', '\\N', 'ünïcödé ✓ 𝄞', ''];
    const ids = Array.from({ length: 40 }, () => `ledger-${randomUUID()}`);
    const versions = new Map<string, number>();
    const book = async (id: string, amount: number, memo: string) => {
      const version = versions.get(id) ?? 0;
      await store.append(id, version, [{ type: 'Booked', data: { amount, memo } }, { type: 'Noted', data: {} }], { correlationId: 'ledger' });
      versions.set(id, version + 2);
    };
    // The first stream's early events, then every stream's, then the first stream's again: with
    // batches of 3 a rebuild holds 15 streams, so it has written that stream's row by then.
    for (let i = 0; i < 3; i++) await book(ids[0]!, i, memos[i]!);
    for (const [n, id] of ids.entries()) for (let i = 0; i < 3; i++) await book(id, n + i, memos[(n + i) % memos.length]!);
    for (let i = 0; i < 3; i++) await book(ids[0]!, 100 + i, memos[7 - i]!);
    const snapshot = async () => (await pool.query('SELECT * FROM ledgers WHERE id = ANY($1) ORDER BY id', [ids])).rows;
    const live = await snapshot();
    expect(live).toHaveLength(40);
    expect(live.find((r) => r.id === ids[0])!.memos).toHaveLength(9);
    await pool.query('UPDATE ledgers SET total = -1, memos = $1', [JSON.stringify(['damaged'])]);
    calls.copied = 0;
    calls.loaded = 0;
    await rebuildProjections(store, [ledgers], 3);
    expect(await snapshot()).toEqual(live);
    expect(calls.copied).toBeGreaterThanOrEqual(40); // every row written by COPY once
    expect(calls.loaded).toBeGreaterThanOrEqual(1); // the first stream read back when its events resumed
    const { rows } = await pool.query(`SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'ledgers' AND indexname = 'ledgers_by_tag'`);
    expect(rows).toHaveLength(1);
  });

  it('a rebuild refuses a projection a field of the event it did not name in its fields', async () => {
    const account = `acct-${randomUUID()}`;
    await store.append(account, 0, [{ type: 'Deposited', data: { amount: 1 } }], { correlationId: 'fields' });
    const careless: Projection = { ...totals, name: 'careless', fields: ['occurredAt'], apply: async (_sql, event) => void event.metadata };
    await expect(rebuildProjections(store, [careless])).rejects.toThrow(/metadata/);
    const { rows } = await pool.query('SELECT count(*)::int AS n FROM account_totals');
    expect(rows[0].n).toBeGreaterThan(0); // rolled back: the tables it truncated are as they were
  });

  it('applyToProjection (a projection fed from elsewhere) applies an event at most once and never out of stream order', async () => {
    const account = `acct-${randomUUID()}`;
    const [first, second] = await store.append(account, 0, [
      { type: 'Deposited', data: { amount: 1 } },
      { type: 'Deposited', data: { amount: 2 } },
    ], { correlationId: 't' });
    const client = await pool.connect();
    try {
      const other: Projection = { ...totals, name: 'fresh_totals', apply: async () => undefined };
      expect(await applyToProjection(client, other, second!)).toBe('gap');
      expect(await applyToProjection(client, other, first!)).toBe('applied');
      expect(await applyToProjection(client, other, first!)).toBe('duplicate');
      expect(await applyToProjection(client, other, second!)).toBe('applied');
      expect(await applyToProjection(client, other, second!)).toBe('duplicate');
    } finally {
      client.release();
    }
  });

  it('applyToProjection: two writers of a stream\'s first event at once apply it once (the second waits and finds it applied)', async () => {
    const account = `acct-${randomUUID()}`;
    const [first] = await store.append(account, 0, [{ type: 'Deposited', data: { amount: 1 } }], { correlationId: 't' });
    let applies = 0;
    const counting: Projection = { ...totals, name: 'raced_totals', apply: async () => void applies++ };
    const [one, two] = [await pool.connect(), await pool.connect()];
    try {
      await one.query('BEGIN');
      await two.query('BEGIN');
      expect(await applyToProjection(one, counting, first!)).toBe('applied');
      // The second writer starts while the first has not committed: it must wait for it, not apply again.
      const second = applyToProjection(two, counting, first!);
      await new Promise((resolve) => setTimeout(resolve, 200));
      await one.query('COMMIT');
      expect(await second).toBe('duplicate');
      await two.query('COMMIT');
      expect(applies).toBe(1);
    } finally {
      one.release();
      two.release();
    }
  });
});
