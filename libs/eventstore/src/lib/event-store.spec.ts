import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import type { QueryRunner } from 'typeorm';
import { ErrorCode, GantryError } from '@gantry/contracts';
import { dropSchema, testDatabaseUrl, uniqueName } from '@gantry/testing';
import { createPool } from './database.js';
import { EventLogJsonText1782000000000, EventLogOutboxUnreferenced1782300000000, jsonTextColumnsMigration, migrate } from './migrations.js';
import { EventStore } from './event-store.js';
import type { UnitOfWork } from './unit-of-work.js';
import { handleWithDecider, type Decider } from './decider.js';

type CounterEvent = { type: 'Incremented'; data: { by: number } };
type CounterCommand = { type: 'increment'; by: number; max?: number };
const counter: Decider<CounterCommand, { total: number }, CounterEvent> = {
  initialState: { total: 0 },
  decide: (command, state) => {
    if (command.max !== undefined && state.total + command.by > command.max) {
      throw new GantryError(ErrorCode.INVALID_TRANSITION, `total would exceed ${command.max}`);
    }
    return [{ type: 'Incremented', data: { by: command.by } }];
  },
  evolve: (state, event) => ({ total: state.total + event.data.by }),
};

const meta = { correlationId: 'test' };

describe('event store', () => {
  const schema = uniqueName('eventstore');
  let pool: pg.Pool;
  let store: EventStore;
  let grouped: EventStore;

  beforeAll(async () => {
    await migrate({ url: testDatabaseUrl, schema });
    pool = createPool({ url: testDatabaseUrl, schema, max: 25 });
    store = new EventStore({ pool, schema });
    // Two group transactions at most, so concurrent commands really share transactions.
    grouped = new EventStore({ pool, schema, groupCommit: { maxGroups: 2, maxBatch: 8 } });
  });
  afterAll(async () => {
    await pool.end();
    await dropSchema(schema);
  });

  const countEvents = async (streamId: string) =>
    Number((await pool.query('SELECT count(*) FROM events WHERE stream_id = $1', [streamId])).rows[0].count);

  it('migrations can run twice (a restart) without changing anything', async () => {
    await migrate({ url: testDatabaseUrl, schema });
    const { rows } = await pool.query('SELECT count(*) FROM migrations');
    expect(Number(rows[0].count)).toBe(8);
  });

  it('a message dead-lettered several times before dead letters were unique keeps its first dead letter when the migration runs', async () => {
    await pool.query(`DROP INDEX dead_letters_once`);
    await pool.query(`DELETE FROM migrations WHERE name = 'EventLogDeadLettersOnce1783200000000'`);
    const consumer = `c-${randomUUID()}`;
    const insert = (sequence: number | null, payload: string) =>
      pool.query(`INSERT INTO dead_letters (consumer, subject, stream_sequence, payload, error) VALUES ($1, 's', $2, $3, '{}') RETURNING id`, [consumer, sequence, payload]);
    const first = (await insert(1, 'p')).rows[0].id as string;
    await insert(1, 'p');
    await insert(1, 'p');
    await insert(1, 'another message of a stream created again');
    await migrate({ url: testDatabaseUrl, schema });
    const kept = await pool.query(`SELECT id, payload FROM dead_letters WHERE consumer = $1 ORDER BY id`, [consumer]);
    expect(kept.rows.map((r) => r.payload)).toEqual(['p', 'another message of a stream created again']);
    expect(kept.rows[0].id).toBe(first);
    await expect(insert(1, 'p')).rejects.toThrow(/dead_letters_once/);
  });

  it("keeps each event's data and metadata as the JSON text written; the migration to that reverts to jsonb and applies again, the log unchanged", async () => {
    const stream = `s-${randomUUID()}`;
    // Keys in an order jsonb would change (it puts shorter keys first), and nesting.
    const data = { zebra: 1, a: { yy: [1, 'x', null], b: true }, unicode: 'é\u2028' };
    await store.append(stream, 0, [{ type: 'A', data }], meta);
    // And in one message (the path most commands take), read first so the append is at a known version.
    await store.executeInOneMessage({ metadata: meta }, async (work) => work.append(stream, (await work.readStream(stream)).length, [{ type: 'B', data }]));
    const text = async () =>
      (await pool.query<{ data: string; kind: string }>(`SELECT data::text AS data, pg_typeof(data)::text AS kind FROM events WHERE stream_id = $1 ORDER BY stream_version`, [stream])).rows;
    expect(await text()).toEqual([
      { data: JSON.stringify(data), kind: 'json' },
      { data: JSON.stringify(data), kind: 'json' },
    ]);
    const before = await store.readStream(stream);
    expect(before.map((e) => e.data)).toEqual([data, data]);
    const runner = { query: async (sql: string, params?: unknown[]) => (await pool.query(sql, params)).rows } as unknown as QueryRunner;
    // A running process with one connection, which has prepared its read of a stream: after each
    // change of type that read fails once (PostgreSQL will not run the statement prepared before
    // it), the connection is closed, and the next read, on a fresh one, sees the log unchanged.
    const running = createPool({ url: testDatabaseUrl, schema, max: 1 });
    const reader = new EventStore({ pool: running, schema });
    const pid = async () => (await running.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
    const migration = new EventLogJsonText1782000000000();
    try {
      expect(await reader.readStream(stream)).toEqual(before);
      for (const [step, kind] of [
        [() => migration.down(runner), 'jsonb'],
        [() => migration.up(runner), 'json'],
      ] as const) {
        const connection = await pid();
        await step();
        expect((await text()).map((r) => r.kind)).toEqual([kind, kind]);
        await expect(reader.readStream(stream)).rejects.toMatchObject({ code: '0A000', message: 'cached plan must not change result type' });
        expect(await reader.readStream(stream)).toEqual(before);
        expect(await pid()).not.toBe(connection);
      }
      // A connection checked out (a transaction's) and given back without an error: the pool would
      // hand it out again, still failing; it was closed instead, and the next checkout is a new one.
      const held = await running.connect();
      const heldPid = (await held.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
      const read = { name: 'stale_plan_probe', text: 'SELECT data FROM events WHERE stream_id = $1', values: [stream] };
      await held.query(read);
      await migration.down(runner);
      await expect(held.query(read)).rejects.toMatchObject({ code: '0A000' });
      held.release();
      expect(await pid()).not.toBe(heldPid);
      await migration.up(runner);
    } finally {
      await running.end();
    }
  });

  it('writes each event with its outbox row, the outbox without a foreign key to the log; its migration puts the key back when reverted', async () => {
    const foreignKeys = async () => (await pool.query(`SELECT conname FROM pg_constraint WHERE conrelid = 'outbox'::regclass AND contype = 'f'`)).rowCount;
    const waiting = async (streamId: string) =>
      (await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM outbox o JOIN events e USING (position) WHERE e.stream_id = $1`, [streamId])).rows[0]!.n;
    expect(await foreignKeys()).toBe(0);
    const stream = `o-${randomUUID()}`;
    await store.append(stream, 0, [{ type: 'A', data: {} }], meta);
    await store.executeInOneMessage({ metadata: meta }, async (work) => work.append(stream, (await work.readStream(stream)).length, [{ type: 'B', data: {} }, { type: 'C', data: {} }]));
    expect(await waiting(stream)).toBe(3);
    const runner = { query: async (sql: string, params?: unknown[]) => (await pool.query(sql, params)).rows } as unknown as QueryRunner;
    const migration = new EventLogOutboxUnreferenced1782300000000();
    await migration.down(runner);
    try {
      expect(await foreignKeys()).toBe(1);
      await expect(pool.query(`INSERT INTO outbox (position) VALUES (-1)`)).rejects.toMatchObject({ code: '23503' });
    } finally {
      await migration.up(runner);
    }
    expect(await foreignKeys()).toBe(0);
    expect(await waiting(stream)).toBe(3);
  });

  it("a view's JSON columns become json with one rewrite per table, keep their rows and their lz4 compression, and revert to jsonb", async () => {
    await pool.query(`CREATE TABLE json_views (id text PRIMARY KEY, state jsonb NOT NULL, extra jsonb)`);
    await pool.query(`CREATE TABLE json_other (id text PRIMARY KEY, state jsonb NOT NULL)`);
    const { rows: [{ lz4 }] } = await pool.query<{ lz4: boolean }>(`SELECT 'lz4' = ANY(enumvals) AS lz4 FROM pg_settings WHERE name = 'default_toast_compression'`);
    // Large enough to be compressed, varied enough not to shrink to nothing.
    const state = { steps: Array.from({ length: 300 }, (_, i) => ({ n: i, text: `step ${(i * 7919) % 1013}` })), done: false };
    await pool.query(`INSERT INTO json_views VALUES ('a', $1, NULL), ('b', $1, '{"k": [1, 2]}')`, [JSON.stringify(state)]);
    await pool.query(`INSERT INTO json_other VALUES ('a', '{"x": 1}')`);
    const rows = async () => (await pool.query(`SELECT v.id, v.state, v.extra, o.state AS other FROM json_views v LEFT JOIN json_other o USING (id) ORDER BY v.id`)).rows;
    const types = async () =>
      (
        await pool.query<{ c: string; t: string; m: string }>(
          `SELECT c.relname || '.' || a.attname AS c, format_type(a.atttypid, NULL) AS t, a.attcompression::text AS m FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
            WHERE c.relnamespace = current_schema()::regnamespace AND c.relname IN ('json_views', 'json_other') AND a.attname IN ('state', 'extra') ORDER BY 1`,
        )
      ).rows;
    const before = await rows();
    const migration = new (jsonTextColumnsMigration('JsonViews1782000000001', [['json_views', 'state'], ['json_views', 'extra'], ['json_other', 'state']]))();
    const statements: string[] = [];
    const runner = {
      query: async (sql: string, params?: unknown[]) => {
        statements.push(sql);
        return (await pool.query(sql, params)).rows;
      },
    } as unknown as QueryRunner;
    await migration.up(runner);
    const m = lz4 ? 'l' : '';
    expect(await types()).toEqual([
      { c: 'json_other.state', t: 'json', m },
      { c: 'json_views.extra', t: 'json', m },
      { c: 'json_views.state', t: 'json', m },
    ]);
    const lz4Too = (column: string) => (lz4 ? `, ALTER COLUMN ${column} SET COMPRESSION lz4` : '');
    expect(statements.filter((q) => q.includes('TYPE json'))).toEqual([
      `ALTER TABLE json_views ALTER COLUMN state TYPE json${lz4Too('state')}, ALTER COLUMN extra TYPE json${lz4Too('extra')}`,
      `ALTER TABLE json_other ALTER COLUMN state TYPE json${lz4Too('state')}`,
    ]);
    expect(await rows()).toEqual(before);
    // The rows the migration rewrote are compressed as the column now says.
    if (lz4) expect((await pool.query(`SELECT pg_column_compression(state) AS m FROM json_views WHERE id = 'a'`)).rows[0].m).toBe('lz4');
    await migration.down(runner);
    expect((await types()).map((r) => r.t)).toEqual(['jsonb', 'jsonb', 'jsonb']);
    expect(await rows()).toEqual(before);
  });

  it('appends with versions 1..n and reads the stream back in order', async () => {
    const stream = `s-${randomUUID()}`;
    await store.append(stream, 0, [{ type: 'A', data: { n: 1 } }, { type: 'B', data: { n: 2 } }], meta);
    await store.append(stream, 2, [{ type: 'C', data: { n: 3 } }], meta);
    const events = await store.readStream(stream);
    expect(events.map((e) => [e.type, e.streamVersion])).toEqual([['A', 1], ['B', 2], ['C', 3]]);
    expect(events[0]!.metadata).toEqual({ correlationId: 'test', causationId: null, idempotencyKey: null, actor: null });
    expect(events[0]!.position).toBeLessThan(events[2]!.position);
  });

  it('reads the last n events of a stream, oldest first, with the stream version', async () => {
    const stream = `s-${randomUUID()}`;
    await store.append(stream, 0, [1, 2, 3, 4, 5].map((n) => ({ type: 'N', data: { n } })), meta);
    const tail = await store.readStreamTail(stream, 2);
    expect(tail.version).toBe(5);
    expect(tail.events.map((e) => [e.streamVersion, (e.data as { n: number }).n])).toEqual([[4, 4], [5, 5]]);
    expect(await store.readStreamTail(`s-${randomUUID()}`, 2)).toEqual({ version: 0, events: [] });
  });

  it('refuses an append at a stale expected version and writes nothing', async () => {
    const stream = `s-${randomUUID()}`;
    await store.append(stream, 0, [{ type: 'A', data: {} }], meta);
    await expect(store.append(stream, 0, [{ type: 'B', data: {} }], meta)).rejects.toMatchObject({ code: ErrorCode.VERSION_CONFLICT });
    expect(await countEvents(stream)).toBe(1);
  });

  it('lets exactly one of 20 concurrent appends at the same expected version win', async () => {
    const stream = `s-${randomUUID()}`;
    await store.append(stream, 0, [{ type: 'Created', data: {} }], meta);
    const outcomes = await Promise.allSettled(
      Array.from({ length: 20 }, (_, i) => store.append(stream, 1, [{ type: 'Raced', data: { i } }], meta)),
    );
    const won = outcomes.filter((o) => o.status === 'fulfilled');
    const lost = outcomes.filter((o): o is PromiseRejectedResult => o.status === 'rejected');
    expect(won).toHaveLength(1);
    expect(lost).toHaveLength(19);
    for (const l of lost) expect(l.reason).toMatchObject({ code: ErrorCode.VERSION_CONFLICT });
    expect(await countEvents(stream)).toBe(2);
    expect(Number((await pool.query('SELECT count(*) FROM outbox o JOIN events e USING (position) WHERE e.stream_id = $1', [stream])).rows[0].count)).toBe(2);
  });

  describe.each(['one transaction per command', 'group commit'])('idempotency (%s)', (mode) => {
    const target = () => (mode === 'group commit' ? grouped : store);
    const run = (streamId: string, key: string, by: number, options: { max?: number; ttlMs?: number } = {}) =>
      handleWithDecider(target(), {
        decider: counter,
        streamId,
        command: { type: 'increment', by, max: options.max },
        metadata: meta,
        idempotency: { scope: 'counter', key, request: { streamId, by, max: options.max }, ttlMs: options.ttlMs },
        reply: (d) => ({ total: d.after.total, version: d.version }),
      });

    it('same key and request twice: one event, identical results', async () => {
      const stream = `s-${randomUUID()}`;
      const key = randomUUID();
      const first = await run(stream, key, 2);
      const second = await run(stream, key, 2);
      expect(first.replayed).toBe(false);
      expect(second.replayed).toBe(true);
      expect(second.result).toEqual(first.result);
      expect(await countEvents(stream)).toBe(1);
    });

    it('same key with a different request: IDEMPOTENCY_CONFLICT and nothing written', async () => {
      const stream = `s-${randomUUID()}`;
      const key = randomUUID();
      await run(stream, key, 2);
      await expect(run(stream, key, 3)).rejects.toMatchObject({ code: ErrorCode.IDEMPOTENCY_CONFLICT });
      expect(await countEvents(stream)).toBe(1);
    });

    it('a receipt stored under what an earlier version hashed as the request answers it when that former request accepts the answer; otherwise IDEMPOTENCY_CONFLICT; nothing written', async () => {
      const stream = `s-${randomUUID()}`;
      const key = randomUUID();
      const formerRequest = { streamId: stream, by: 2, max: undefined };
      const first = await run(stream, key, 2);
      const now = (accepts: boolean, seen: unknown[] = []) => ({
        scope: 'counter',
        key,
        request: { ...formerRequest, unit: 'apples' },
        former: [{ request: formerRequest, accepts: async (answer: unknown) => {
          seen.push(answer);
          return accepts;
        } }],
      });
      const repeat = (idempotency: ReturnType<typeof now>) =>
        handleWithDecider(target(), { decider: counter, streamId: stream, command: { type: 'increment', by: 2 }, metadata: meta, idempotency, reply: (d) => ({ total: d.after.total, version: d.version }) });
      const seen: unknown[] = [];
      const again = await repeat(now(true, seen));
      expect(again).toMatchObject({ replayed: true, result: first.result });
      expect(seen).toEqual([{ ok: true, result: first.result }]);
      expect(await target().answered(now(true))).toBe(true);
      await expect(repeat(now(false))).rejects.toMatchObject({ code: ErrorCode.IDEMPOTENCY_CONFLICT });
      expect(await target().answered(now(false))).toBe(false);
      // a former request that is not the one the receipt was stored under is no answer either
      await expect(repeat({ ...now(true), former: [{ request: { ...formerRequest, by: 3 }, accepts: async () => true }] })).rejects.toMatchObject({ code: ErrorCode.IDEMPOTENCY_CONFLICT });
      expect(await countEvents(stream)).toBe(1);
    });

    it('20 concurrent identical requests: one event and 20 identical results', async () => {
      const stream = `s-${randomUUID()}`;
      const key = randomUUID();
      const results = await Promise.all(Array.from({ length: 20 }, () => run(stream, key, 5)));
      expect(new Set(results.map((r) => JSON.stringify(r.result))).size).toBe(1);
      expect(results.filter((r) => !r.replayed)).toHaveLength(1);
      expect(await countEvents(stream)).toBe(1);
    });

    it('a refusal is stored: the retry gets the same refusal even after the state changed', async () => {
      const stream = `s-${randomUUID()}`;
      const key = randomUUID();
      await run(stream, randomUUID(), 5);
      await expect(run(stream, key, 10, { max: 10 })).rejects.toMatchObject({ code: ErrorCode.INVALID_TRANSITION });
      await expect(run(stream, key, 10, { max: 10 })).rejects.toMatchObject({ code: ErrorCode.INVALID_TRANSITION });
      expect(await countEvents(stream)).toBe(1);
    });

    it("a stored refusal has its secrets masked, and the retry gets that masked refusal", async () => {
      const key = randomUUID();
      const token = `ghp_${'A1b2C3d4'.repeat(5)}`;
      const refuse = () =>
        target().execute({ metadata: meta, idempotency: { scope: 'counter', key, request: 1 } }, async () => {
          throw new GantryError(ErrorCode.INVALID_TRANSITION, `cannot clone https://deploy:hunter2-secret@git.example.com/app.git`, { token });
        });
      await expect(refuse()).rejects.toMatchObject({ code: ErrorCode.INVALID_TRANSITION });
      const { rows } = await pool.query(`SELECT result::text AS answer FROM idempotency_receipts WHERE scope = 'counter' AND key = $1`, [key]);
      expect(rows[0].answer).toContain('https://deploy:***@git.example.com/app.git');
      expect(rows[0].answer).not.toContain('hunter2-secret');
      expect(rows[0].answer).not.toContain(token);
      await expect(refuse()).rejects.toMatchObject({ code: ErrorCode.INVALID_TRANSITION, message: 'cannot clone https://deploy:***@git.example.com/app.git', details: { token: '***' } });
    });

    it('a key whose window has passed may be used again', async () => {
      const stream = `s-${randomUUID()}`;
      const key = randomUUID();
      await run(stream, key, 1, { ttlMs: 1 });
      await new Promise((r) => setTimeout(r, 20));
      const again = await run(stream, key, 1, { ttlMs: 60_000 });
      expect(again.replayed).toBe(false);
      expect(again.result).toEqual({ total: 2, version: 2 });
    });

    it('concurrent distinct commands on one stream all land, each decided on fresh state', async () => {
      const stream = `s-${randomUUID()}`;
      const results = await Promise.all(Array.from({ length: 4 }, () => run(stream, randomUUID(), 1)));
      expect(results.map((r) => r.result.total).sort()).toEqual([1, 2, 3, 4]);
      expect(await countEvents(stream)).toBe(4);
    });

    it('a handler that fails unexpectedly leaves no receipt, so the retry runs for real', async () => {
      const stream = `s-${randomUUID()}`;
      const key = randomUUID();
      await expect(
        target().execute({ metadata: meta, idempotency: { scope: 'counter', key, request: 1 } }, async (uow) => {
          await uow.append(stream, 0, [{ type: 'Incremented', data: { by: 1 } }]);
          throw new Error('crash between two steps');
        }),
      ).rejects.toThrow('crash between two steps');
      expect(await countEvents(stream)).toBe(0);
      const retry = await target().execute({ metadata: meta, idempotency: { scope: 'counter', key, request: 1 } }, async (uow) => {
        await uow.append(stream, 0, [{ type: 'Incremented', data: { by: 1 } }]);
        return 'done';
      });
      expect(retry).toMatchObject({ result: 'done', replayed: false });
      expect(await countEvents(stream)).toBe(1);
    });
  });

  describe("commands inside a caller's transaction (executeWithin)", () => {
    const within = async <T>(work: (sql: pg.PoolClient) => Promise<T>, commit = true): Promise<T> => {
      const sql = await pool.connect();
      try {
        await sql.query('BEGIN');
        const result = await work(sql);
        await sql.query(commit ? 'COMMIT' : 'ROLLBACK');
        return result;
      } finally {
        sql.release();
      }
    };
    const increment = (stream: string, by: number, sql: pg.PoolClient, key?: string, max?: number) =>
      handleWithDecider(store, {
        decider: counter,
        streamId: stream,
        command: { type: 'increment', by, max },
        metadata: meta,
        ...(key ? { idempotency: { scope: 'test.within', key, request: { by } } } : {}),
        reply: (d) => d.after.total,
        within: sql,
      });

    it("a refusal undoes only its own command's writes; the caller's transaction goes on and commits", async () => {
      const stream = `w-${randomUUID()}`;
      const key = randomUUID();
      await within(async (sql) => {
        expect((await increment(stream, 2, sql)).result).toBe(2);
        await expect(increment(stream, 5, sql, key, 3)).rejects.toMatchObject({ code: ErrorCode.INVALID_TRANSITION });
        expect((await increment(stream, 1, sql)).result).toBe(3);
      });
      expect(await countEvents(stream)).toBe(2);
      // The refusal was stored under its key with the caller's commit: a repeat gets it again.
      await expect(within((sql) => increment(stream, 5, sql, key, 3))).rejects.toMatchObject({ code: ErrorCode.INVALID_TRANSITION });
    });

    it('a refusal stored inside the caller\'s transaction has its secrets masked', async () => {
      const key = randomUUID();
      const refuse = (sql: pg.PoolClient) =>
        store.executeWithin(sql, { metadata: meta, idempotency: { scope: 'test.within', key, request: 1 } }, async () => {
          throw new GantryError(ErrorCode.INVALID_TRANSITION, 'cannot clone https://deploy:hunter2-secret@git.example.com/app.git');
        });
      await within(async (sql) => {
        await expect(refuse(sql)).rejects.toMatchObject({ code: ErrorCode.INVALID_TRANSITION });
      });
      const { rows } = await pool.query(`SELECT result::text AS answer FROM idempotency_receipts WHERE scope = 'test.within' AND key = $1`, [key]);
      expect(rows[0].answer).toContain('https://deploy:***@git.example.com/app.git');
      expect(rows[0].answer).not.toContain('hunter2-secret');
    });

    it("what it wrote and its receipt roll back with the caller's transaction", async () => {
      const stream = `w-${randomUUID()}`;
      const key = randomUUID();
      await within((sql) => increment(stream, 1, sql, key), false);
      expect(await countEvents(stream)).toBe(0);
      const again = await within((sql) => increment(stream, 1, sql, key));
      expect(again).toMatchObject({ result: 1, replayed: false });
      expect(await within((sql) => increment(stream, 1, sql, key))).toMatchObject({ result: 1, replayed: true });
    });

    it('a conflict with a concurrent writer reruns the command on fresh state inside the same transaction', async () => {
      const stream = `w-${randomUUID()}`;
      await within(async (sql) => {
        let interfered = false;
        const executed = await store.executeWithin(sql, { metadata: meta }, async (uow) => {
          const history = await uow.readStream(stream);
          if (!interfered) {
            interfered = true;
            await store.append(stream, 0, [{ type: 'Incremented', data: { by: 10 } }], meta);
          }
          return (await uow.append(stream, history.length, [{ type: 'Incremented', data: { by: 1 } }]))[0]!.streamVersion;
        });
        expect(executed.result).toBe(2);
      });
      expect(await countEvents(stream)).toBe(2);
    });
  });

  describe('group commit', () => {
    it('members of one group fail alone: a refusal and a crash leave the others committed', async () => {
      const single = new EventStore({ pool, schema, groupCommit: { maxGroups: 1, maxBatch: 16 } });
      const streams = Array.from({ length: 6 }, () => `s-${randomUUID()}`);
      const outcomes = await Promise.allSettled(
        streams.map((stream, i) =>
          single.execute({ metadata: meta, idempotency: { scope: 'group', key: randomUUID(), request: i } }, async (uow) => {
            await uow.append(stream, 0, [{ type: 'Happened', data: { i } }]);
            if (i === 2) throw new GantryError(ErrorCode.INVALID_TRANSITION, 'refused on purpose');
            if (i === 4) throw new Error('crash inside the handler');
            return i;
          }),
        ),
      );
      expect(outcomes.map((o) => o.status)).toEqual(['fulfilled', 'fulfilled', 'rejected', 'fulfilled', 'rejected', 'fulfilled']);
      expect((outcomes[2] as PromiseRejectedResult).reason).toMatchObject({ code: ErrorCode.INVALID_TRANSITION });
      expect(String((outcomes[4] as PromiseRejectedResult).reason)).toMatch(/crash inside the handler/);
      const counts = await Promise.all(streams.map(countEvents));
      expect(counts).toEqual([1, 1, 0, 1, 0, 1]);
    });

    it('commands queued behind a busy group share one transaction', async () => {
      const single = new EventStore({ pool, schema, groupCommit: { maxGroups: 1, maxBatch: 16 } });
      const streams = Array.from({ length: 10 }, () => `s-${randomUUID()}`);
      const appended = await Promise.all(
        streams.map((stream) => single.execute({ metadata: meta }, (uow) => uow.append(stream, 0, [{ type: 'Happened', data: {} }]))),
      );
      const { rows } = await pool.query<{ tx: string }>(
        `SELECT DISTINCT tx_id::text AS tx FROM events WHERE stream_id = ANY($1)`,
        [streams],
      );
      expect(appended.every((a) => a.events.length === 1)).toBe(true);
      expect(rows.length).toBeLessThan(streams.length); // at least two commands shared a commit
    });

    it('a group whose transaction dies loses every member\'s writes and rejects them all', async () => {
      const single = new EventStore({ pool, schema, groupCommit: { maxGroups: 1, maxBatch: 16 } });
      const streams = Array.from({ length: 4 }, () => `s-${randomUUID()}`);
      // The first command holds the only group open until the others have queued behind it.
      let release!: () => void;
      const gate = new Promise<void>((r) => (release = r));
      const first = single.execute({ metadata: meta }, async (uow) => {
        await uow.append(`s-${randomUUID()}`, 0, [{ type: 'Happened', data: {} }]);
        await gate;
      });
      const rest = streams.map((stream, i) =>
        single.execute({ metadata: meta }, async (uow) => {
          await uow.append(stream, 0, [{ type: 'Happened', data: {} }]);
          if (i === 3) await uow.sql.query('SELECT pg_terminate_backend(pg_backend_pid())');
        }),
      );
      release();
      await first;
      const outcomes = await Promise.allSettled(rest);
      expect(outcomes.every((o) => o.status === 'rejected')).toBe(true);
      expect(await Promise.all(streams.map(countEvents))).toEqual([0, 0, 0, 0]);
    });

    it("a repeat of a key in the same group is not answered from the first one's receipt when the group's transaction dies: neither committed", async () => {
      const single = new EventStore({ pool, schema, groupCommit: { maxGroups: 1, maxBatch: 16 } });
      const stream = `s-${randomUUID()}`;
      const idempotency = { scope: 'group', key: randomUUID(), request: { stream } };
      let release!: () => void;
      const gate = new Promise<void>((r) => (release = r));
      const first = single.execute({ metadata: meta }, async () => {
        await gate;
      });
      const appendOnce = (uow: UnitOfWork) => uow.append(stream, 0, [{ type: 'Happened', data: {} }]).then(() => 'appended');
      // The same command twice (a caller and its retry, or two replicas' callers), then one that kills the connection.
      const original = single.execute({ metadata: meta, idempotency }, appendOnce);
      const repeat = single.execute({ metadata: meta, idempotency }, appendOnce);
      const killer = single.execute({ metadata: meta }, async (uow) => {
        await uow.sql.query('SELECT pg_terminate_backend(pg_backend_pid())');
      });
      release();
      await first;
      const outcomes = await Promise.allSettled([original, repeat, killer]);
      expect(await countEvents(stream)).toBe(0);
      const { rows } = await pool.query('SELECT 1 FROM idempotency_receipts WHERE scope = $1 AND key = $2', [idempotency.scope, idempotency.key]);
      expect(rows).toHaveLength(0);
      // Nothing committed, so nobody is told it was done: each is rejected, to be sent again under its key.
      expect(outcomes.map((o) => o.status)).toEqual(['rejected', 'rejected', 'rejected']);
      // Sent again, the command is done once.
      await expect(single.execute({ metadata: meta, idempotency }, appendOnce)).resolves.toMatchObject({ result: 'appended', replayed: false });
      expect(await countEvents(stream)).toBe(1);
    });

    it('a repeat of a key committed before its group is answered from that receipt even when its group dies', async () => {
      const single = new EventStore({ pool, schema, groupCommit: { maxGroups: 1, maxBatch: 16 } });
      const stream = `s-${randomUUID()}`;
      const idempotency = { scope: 'group', key: randomUUID(), request: { stream } };
      const appendOnce = (uow: UnitOfWork) => uow.append(stream, 0, [{ type: 'Happened', data: {} }]).then(() => 'appended');
      await single.execute({ metadata: meta, idempotency }, appendOnce);
      let release!: () => void;
      const gate = new Promise<void>((r) => (release = r));
      const first = single.execute({ metadata: meta }, async () => {
        await gate;
      });
      const repeat = single.execute({ metadata: meta, idempotency }, appendOnce);
      const killer = single.execute({ metadata: meta }, async (uow) => {
        await uow.sql.query('SELECT pg_terminate_backend(pg_backend_pid())');
      });
      release();
      await first;
      const outcomes = await Promise.allSettled([repeat, killer]);
      expect(outcomes[0]).toEqual({ status: 'fulfilled', value: { result: 'appended', replayed: true, events: [] } });
      expect(outcomes[1]!.status).toBe('rejected');
      expect(await countEvents(stream)).toBe(1);
    });
  });
});
