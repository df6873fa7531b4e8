import { randomUUID } from 'node:crypto';
import net from 'node:net';
import pg from 'pg';
import { ErrorCode, GantryError } from '@gantry/contracts';
import { dropSchema, mostRowsReadByAStep, testDatabaseUrl, uniqueName, watchingQueries } from '@gantry/testing';
import { READ_STREAMS_AFTER } from './batching.js';
import { createPool, TransactionAbortedError } from './database.js';
import { decideWithin, handleWithDecider, type Decider } from './decider.js';
import type { Projection } from './projection.js';
import { inlineStatement, jsonRows, JsonRows, literalOf, type SqlWriter } from './deferred-writes.js';
import { EventStore, type UnitOfWork } from './event-store.js';
import { migrate } from './migrations.js';
import { stateProjection } from './projection.js';

type CounterEvent = { type: 'Incremented'; data: { by: number } };
type CounterCommand = { type: 'increment'; by: number };
const counter: Decider<CounterCommand, { total: number }, CounterEvent> = {
  initialState: { total: 0 },
  decide: (command) => {
    if (command.by === 0) throw new GantryError(ErrorCode.INVALID_TRANSITION, 'an increment of nothing');
    return [{ type: 'Incremented', data: { by: command.by } }];
  },
  evolve: (state, event) => ({ total: state.total + event.data.by }),
};

/** A state projection of the counters in `table` (which refuses totals of 1000 and more: a write that fails at the commit), written by `save`. */
function counterView(table: string, save: (sql: SqlWriter, rows: Array<{ id: string; total: number }>) => Promise<unknown>) {
  return stateProjection<{ total: number }>({
    name: table,
    tables: [table],
    types: ['Incremented'],
    initialState: { total: 0 },
    evolve: (state, event) => counter.evolve(state, event as unknown as CounterEvent),
    async load(sql, ids) {
      const { rows } = await sql.query<{ id: string; total: number }>(`SELECT id, total FROM ${table} WHERE id = ANY($1)`, [ids]);
      return new Map(rows.map((r) => [r.id, { total: r.total }]));
    },
    async save(sql, rows) {
      await save(sql, rows.map((r) => ({ id: r.streamId, total: r.state.total })));
    },
  });
}

/** Counters written with a second parameter (and `$1` and `$2` inside a string literal): a statement per command. */
const counters = counterView('counters', (sql, rows) =>
  sql.query(
    `INSERT INTO counters (id, total, note) SELECT r.id, r.total, $2 FROM jsonb_to_recordset($1::jsonb) AS r(id text, total int)
     ON CONFLICT (id) DO UPDATE SET total = EXCLUDED.total, note = EXCLUDED.note`,
    [JSON.stringify(rows), "it's $1 and $2"],
  ),
);

/** The same counters taking their rows as the statement's one parameter (JsonRows): commands written together share the statement. */
const tallies = counterView('tallies', (sql, rows) =>
  sql.query(
    `INSERT INTO tallies (id, total) SELECT r.id, r.total FROM jsonb_to_recordset($1::jsonb) AS r(id text, total int)
     ON CONFLICT (id) DO UPDATE SET total = EXCLUDED.total`,
    [jsonRows(rows)],
  ),
);

const meta = { correlationId: 'test' };

/** The messages (their SQL) every connection sends while `work` runs. */
async function messages(work: () => Promise<unknown>): Promise<string[]> {
  const sent: string[] = [];
  await watchingQueries((args) => sent.push(typeof args[0] === 'string' ? args[0] : ((args[0] as { text?: string })?.text ?? '')), work);
  return sent;
}

/** An increment of a counter stream through `on`, under an idempotency key of `scope`; answers the new total. */
const incrementOn =
  (on: () => EventStore, scope: string) =>
  (streamId: string, by: number, key: string = randomUUID()) =>
    handleWithDecider(on(), {
      decider: counter,
      streamId,
      command: { type: 'increment', by },
      metadata: meta,
      idempotency: { scope, key, request: { streamId, by } },
      reply: (d) => d.after.total,
    });

describe('a command in few round trips', () => {
  const schema = uniqueName('round_trips');
  let pool: pg.Pool;
  let store: EventStore;
  /** Another process writing the same log. */
  let elsewhere: EventStore;

  beforeAll(async () => {
    await migrate({ url: testDatabaseUrl, schema });
    // One connection: a connection left in a bad state by one command would fail the next.
    pool = createPool({ url: testDatabaseUrl, schema, max: 1 });
    await pool.query('CREATE TABLE counters (id text PRIMARY KEY, total int NOT NULL CHECK (total < 1000), note text)');
    await pool.query('CREATE TABLE tallies (id text PRIMARY KEY, total int NOT NULL CHECK (total < 1000))');
    store = new EventStore({ pool, schema, inlineProjections: [counters] });
    elsewhere = new EventStore({ pool: createPool({ url: testDatabaseUrl, schema, max: 1 }), schema, inlineProjections: [counters] });
  });
  afterAll(async () => {
    await elsewhere.pool.end();
    await pool.end();
    await dropSchema(schema);
  });

  const increment = incrementOn(() => store, 'test.increment');

  /**
   * Another process on a connection of its own, whose memory of streams is trusted (the cases here
   * leave `store`'s untrusted: another writer moved its streams on), with its connection's statements
   * prepared by a command decided on memory.
   */
  const freshStore = async () => {
    const fresh = new EventStore({ pool: createPool({ url: testDatabaseUrl, schema, max: 1 }), schema, inlineProjections: [counters] });
    const warm = `c-${randomUUID()}`;
    await incrementOn(() => fresh, 'test.increment')(warm, 1);
    await incrementOn(() => fresh, 'test.increment')(warm, 1);
    return fresh;
  };

  /** How many messages the connections send while `work` runs. */
  const roundTrips = async (work: () => Promise<unknown>): Promise<number> => (await messages(work)).length;

  const eventsOf = async (id: string) => Number((await pool.query('SELECT count(*) FROM events WHERE stream_id = $1', [id])).rows[0].count);
  const receiptOf = async (key: string) => (await pool.query('SELECT result FROM idempotency_receipts WHERE key = $1', [key])).rows[0]?.result;
  /** Puts other events in the stream's place in the log, under the processes that remember it (as a log rebuilt would). */
  const rewrite = async (on: EventStore, id: string, amounts: number[]) => {
    await pool.query('DELETE FROM outbox WHERE position IN (SELECT position FROM events WHERE stream_id = $1)', [id]);
    await pool.query('DELETE FROM events WHERE stream_id = $1', [id]);
    await on.append(id, 0, amounts.map((by) => ({ type: 'Incremented', data: { by } })), meta);
  };

  it('a decider command with a receipt on a stream this process does not know is two round trips: the stream read, then the receipt, events, outbox rows and view write in one message', async () => {
    const id = `c-${randomUUID()}`;
    await incrementOn(() => elsewhere, 'test.increment')(id, 1);
    await incrementOn(() => elsewhere, 'test.increment')(id, 1);
    await increment(`c-${randomUUID()}`, 1); // the connection prepares the statements it meets the first time (below)
    const key = randomUUID();
    expect(await roundTrips(() => increment(id, 2, key))).toBe(2);
    expect((await pool.query('SELECT total, note FROM counters WHERE id = $1', [id])).rows).toEqual([{ total: 4, note: "it's $1 and $2" }]);
    expect(await eventsOf(id)).toBe(3);
    expect(await receiptOf(key)).toEqual({ ok: true, result: 4 });
    const { rows } = await pool.query('SELECT e.stream_version, o.position IS NOT NULL AS queued FROM events e LEFT JOIN outbox o USING (position) WHERE stream_id = $1 ORDER BY 1', [id]);
    expect(rows).toEqual([
      { stream_version: 1, queued: true },
      { stream_version: 2, queued: true },
      { stream_version: 3, queued: true },
    ]);
  });

  it('a command on a stream this process wrote last is one round trip: it decides on the stream as it wrote it, and its message checks that the stream still ends there', async () => {
    const id = `c-${randomUUID()}`;
    await increment(id, 1);
    await increment(id, 1); // the connection prepares the statements it meets the first time (below)
    const key = randomUUID();
    const sent = await messages(() => increment(id, 2, key));
    expect(sent).toHaveLength(1);
    expect(sent[0]).toContain('EXECUTE gantry_');
    expect((await pool.query('SELECT total FROM counters WHERE id = $1', [id])).rows[0].total).toBe(4);
    expect(await receiptOf(key)).toEqual({ ok: true, result: 4 });
    expect((await pool.query('SELECT stream_version FROM events WHERE stream_id = $1 ORDER BY 1', [id])).rows.map((r) => r.stream_version)).toEqual([1, 2, 3]);
  });

  it('a decision on a remembered stream that appends nothing to it is made again on a read: another writer may have moved the stream on', async () => {
    const id = `c-${randomUUID()}`;
    await increment(id, 1);
    await increment(id, 1);
    await incrementOn(() => elsewhere, 'test.increment')(id, 100);
    // An answer from the stream alone (as a refusal or a no-op would be) writes nothing that could confirm it.
    const read = await store.executeInOneMessage({ metadata: meta }, async (work) => (await work.readStream(id)).map((e) => (e.data as { by: number }).by));
    expect(read.result).toEqual([1, 1, 100]);
  });

  it('a decider that decides nothing on a remembered stream another writer moved on is made again on a read', async () => {
    const id = `c-${randomUUID()}`;
    await increment(id, 1);
    await increment(id, 1);
    await incrementOn(() => elsewhere, 'test.increment')(id, 100);
    // Takes a counter back once it passed 100: on the remembered total (2) there is nothing to do, on the log's (102) there is.
    const resetting: Decider<{ type: 'reset' }, { total: number }, CounterEvent> = {
      ...counter,
      decide: (_command, state) => (state.total >= 100 ? [{ type: 'Incremented', data: { by: -state.total } }] : []),
    };
    const reset = await handleWithDecider(store, { decider: resetting, streamId: id, command: { type: 'reset' }, metadata: meta, reply: (d) => d.decided.length });
    expect(reset.result).toBe(1);
    expect(await eventsOf(id)).toBe(4);
  });

  it('a refusal decided on a remembered stream is made again on a read before it is stored', async () => {
    const id = `c-${randomUUID()}`;
    await increment(id, 1);
    await increment(id, 1);
    const key = randomUUID();
    const sent = await messages(() => expect(increment(id, 0, key)).rejects.toMatchObject({ code: ErrorCode.INVALID_TRANSITION }));
    expect(sent.filter((m) => m.includes('unnest($1::text[], $2::int[])'))).toHaveLength(1);
    expect(await receiptOf(key)).toMatchObject({ ok: false });
    expect(await eventsOf(id)).toBe(2);
  });

  it('a decision on a remembered stream that another writer moved on is made again on a read, as a fresh attempt', async () => {
    const id = `c-${randomUUID()}`;
    await increment(id, 1);
    await increment(id, 1);
    await incrementOn(() => elsewhere, 'test.increment')(id, 100);
    await expect(increment(id, 1)).resolves.toMatchObject({ result: 103 });
    expect((await pool.query('SELECT stream_version FROM events WHERE stream_id = $1 ORDER BY 1', [id])).rows.map((r) => r.stream_version)).toEqual([1, 2, 3, 4]);
  });

  it('where another writer keeps moving its streams on, commands read them rather than decide on memory; once the streams stay put, memory is trusted again', async () => {
    const mine = new EventStore({ pool: createPool({ url: testDatabaseUrl, schema, max: 1 }), schema, inlineProjections: [counters] });
    try {
      const add = incrementOn(() => mine, 'test.turns');
      const theirs = incrementOn(() => elsewhere, 'test.turns');
      /** The messages of one command of mine, but the PREPAREs a connection sends the first time it meets a statement. */
      const sentBy = async (work: () => Promise<unknown>) => (await messages(work)).filter((m) => !m.startsWith('PREPARE')).length;
      const id = `c-${randomUUID()}`;
      await add(id, 1);
      await add(id, 1);
      // Taking turns (as two replicas serving one job would): the first of mine decides on memory and
      // its write fails (a message sent for nothing, and in a batch all its members sent again).
      await theirs(id, 1);
      expect(await sentBy(() => add(id, 1))).toBe(3); // the write that failed, the read, the write
      // Its read found the stream moved on: from then on it reads first.
      for (let turn = 0; turn < 3; turn++) {
        await theirs(id, 1);
        expect(await sentBy(() => add(id, 1))).toBe(2);
      }
      // The other writer stops; the reads find the streams where they were left, and memory is trusted again.
      let commands = 0;
      while ((await sentBy(() => add(id, 1))) === 2) if (++commands > 2_000) throw new Error('memory was never trusted again');
      expect(await sentBy(() => add(id, 1))).toBe(1);
      expect((await pool.query('SELECT max(stream_version)::int AS v, count(*)::int AS n FROM events WHERE stream_id = $1', [id])).rows[0]).toEqual({ v: commands + 12, n: commands + 12 });
    } finally {
      await mine.pool.end();
    }
  });

  it('a connection prepares each statement of the one-message write once, in a message of its own', async () => {
    const fresh = new EventStore({ pool: createPool({ url: testDatabaseUrl, schema, max: 1 }), schema, inlineProjections: [counters] });
    const sent: string[] = [];
    const send = pg.Client.prototype.query;
    pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
      if (typeof args[0] === 'string') sent.push(args[0]);
      return (send as (...a: unknown[]) => unknown).apply(this, args);
    } as typeof send;
    try {
      const id = `c-${randomUUID()}`;
      const once = (by: number) =>
        handleWithDecider(fresh, { decider: counter, streamId: id, command: { type: 'increment', by }, metadata: meta, idempotency: { scope: 'test.prepared', key: randomUUID(), request: { by } }, reply: (d) => d.after.total });
      await once(1);
      await once(2);
      await once(3);
      await expect(once(4)).resolves.toMatchObject({ result: 10 });
    } finally {
      pg.Client.prototype.query = send;
      await fresh.pool.end();
    }
    const prepares = sent.filter((m) => m.startsWith('PREPARE'));
    expect(prepares).toHaveLength(4); // the receipt, the check of the stream's last event, the events with their outbox rows, the view row
    expect(sent.filter((m) => m.includes('EXECUTE gantry_'))).toHaveLength(4);
    expect(sent.every((m) => !m.startsWith('PREPARE') || !m.includes(';'))).toBe(true);
  });

  it('the first command on a stream is two round trips as well; its events get their positions with the commit', async () => {
    const id = `c-${randomUUID()}`;
    const key = randomUUID();
    let done: Awaited<ReturnType<typeof increment>> | undefined;
    // The pool closes a connection idle for 10 s (at CI's load the case before can take that long), and
    // a new connection prepares the statements it meets the first time, each in a message of its own.
    await increment(`c-${randomUUID()}`, 1);
    expect(await roundTrips(async () => (done = await increment(id, 2, key)))).toBe(2);
    expect(await eventsOf(id)).toBe(1);
    const { rows } = await pool.query<{ position: string }>('SELECT position FROM events WHERE stream_id = $1', [id]);
    expect(done!.events.map((e) => e.position)).toEqual([Number(rows[0]!.position)]);
    expect(await receiptOf(key)).toEqual({ ok: true, result: 2 });
  });

  it('a command that appends at any version takes the full path', async () => {
    const id = `c-${randomUUID()}`;
    const done = await store.executeInOneMessage({ metadata: meta }, async (work) => {
      await work.append(id, 'any', [{ type: 'Incremented', data: { by: 4 } }]);
      return 'appended';
    });
    expect(done).toMatchObject({ result: 'appended', replayed: false });
    expect(await eventsOf(id)).toBe(1);
    expect((await pool.query('SELECT total FROM counters WHERE id = $1', [id])).rows[0].total).toBe(4);
  });

  it('a repeat of a key is answered from its receipt and writes nothing, on a stream that exists', async () => {
    const id = `c-${randomUUID()}`;
    await increment(id, 1);
    const key = randomUUID();
    await expect(increment(id, 2, key)).resolves.toMatchObject({ result: 3, replayed: false });
    await expect(increment(id, 2, key)).resolves.toMatchObject({ result: 3, replayed: true });
    expect(await eventsOf(id)).toBe(2);
  });

  it('concurrent commands on one stream all land once each, at dense versions (the losers of the compare-and-set decide again)', async () => {
    const id = `c-${randomUUID()}`;
    await increment(id, 1);
    const big = new EventStore({ pool: createPool({ url: testDatabaseUrl, schema, max: 8 }), schema, inlineProjections: [counters] });
    try {
      const keys = Array.from({ length: 8 }, () => randomUUID());
      const once = (key: string) => incrementOn(() => big, 'test.increment')(id, 1, key);
      const results = await Promise.all([...keys, ...keys].map(once));
      // Each key answered the same both times, and every key counted once.
      for (let i = 0; i < keys.length; i++) expect(results[i]!.result).toBe(results[i + keys.length]!.result);
      expect(new Set(results.slice(0, keys.length).map((r) => r.result))).toEqual(new Set([2, 3, 4, 5, 6, 7, 8, 9]));
      const { rows } = await pool.query<{ stream_version: number }>('SELECT stream_version FROM events WHERE stream_id = $1 ORDER BY 1', [id]);
      expect(rows.map((r) => r.stream_version)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9]);
      expect((await pool.query('SELECT total FROM counters WHERE id = $1', [id])).rows[0].total).toBe(9);
    } finally {
      await big.pool.end();
    }
  });

  it('a refusal on a stream that exists is stored: a repeat gets the same refusal, and nothing else is written', async () => {
    const id = `c-${randomUUID()}`;
    await increment(id, 1);
    const key = randomUUID();
    await expect(increment(id, 0, key)).rejects.toMatchObject({ code: ErrorCode.INVALID_TRANSITION, message: 'an increment of nothing' });
    await expect(increment(id, 0, key)).rejects.toMatchObject({ code: ErrorCode.INVALID_TRANSITION, message: 'an increment of nothing' });
    expect(await receiptOf(key)).toMatchObject({ ok: false, error: { code: ErrorCode.INVALID_TRANSITION } });
    expect(await eventsOf(id)).toBe(1);
  });

  it('a repeat whose first attempt succeeded is answered with that success even when the state now refuses it', async () => {
    // The counter refuses nothing but 0; a decider that refuses a second start is the real case.
    const once: Decider<{ type: 'start' }, { started: boolean }, { type: 'Started'; data: Record<string, never> }> = {
      initialState: { started: false },
      decide: (_command, state) => {
        if (state.started) throw new GantryError(ErrorCode.INVALID_TRANSITION, 'already started');
        return [{ type: 'Started', data: {} }];
      },
      evolve: (state, event) => (event.type === 'Started' ? { started: true } : state),
    };
    const id = `s-${randomUUID()}`;
    await increment(id, 1); // the stream exists
    const key = randomUUID();
    const start = () =>
      handleWithDecider(store, { decider: once, streamId: id, command: { type: 'start' }, metadata: meta, idempotency: { scope: 'test.start', key, request: { id } }, reply: () => 'started' });
    await expect(start()).resolves.toMatchObject({ result: 'started', replayed: false });
    await expect(start()).resolves.toMatchObject({ result: 'started', replayed: true });
    expect(await eventsOf(id)).toBe(2);
  });

  it('a view write that fails fails the one-message command whole: no event, no receipt, no outbox row', async () => {
    const id = `c-${randomUUID()}`;
    await increment(id, 1);
    const key = randomUUID();
    await expect(increment(id, 5000, key)).rejects.toMatchObject({ constraint: 'counters_total_check' });
    expect(await eventsOf(id)).toBe(1);
    expect(await receiptOf(key)).toBeUndefined();
    await expect(increment(id, 5)).resolves.toMatchObject({ result: 6, replayed: false });
  });

  describe.each([
    ['a view written by a statement per command', counters],
    ['a view that takes its rows as one JSON array', tallies],
  ])('commands that arrive together, with %s', (_, view) => {
    let shared: EventStore;
    beforeAll(() => {
      shared = new EventStore({ pool: createPool({ url: testDatabaseUrl, schema, max: 4 }), schema, inlineProjections: [view] });
    });
    afterAll(() => shared.pool.end());

    const add = incrementOn(() => shared, 'test.together');
    const totalOf = async (id: string) => (await pool.query(`SELECT total FROM ${view.name} WHERE id = $1`, [id])).rows[0].total as number;

    it('are read in one statement and written in one message; once known, they are not read', async () => {
      const ids = Array.from({ length: 6 }, () => `t-${randomUUID()}`);
      const other = new EventStore({ pool: createPool({ url: testDatabaseUrl, schema, max: 1 }), schema, inlineProjections: [view] });
      try {
        await Promise.all(ids.map((id) => incrementOn(() => other, 'test.together')(id, 1)));
      } finally {
        await other.pool.end();
      }
      await Promise.all(Array.from({ length: 6 }, () => add(`t-${randomUUID()}`, 1))); // the connections have prepared what they send
      const sent = await messages(() => Promise.all(ids.map((id) => add(id, 1))));
      expect(sent.filter((m) => m.includes('unnest($1::text[], $2::int[])'))).toHaveLength(1);
      expect(sent.filter((m) => m.includes('EXECUTE gantry_'))).toHaveLength(1);
      const again = await messages(() => Promise.all(ids.map((id) => add(id, 1))));
      expect(again.filter((m) => m.includes('unnest($1::text[], $2::int[])'))).toHaveLength(0);
      expect(again.filter((m) => m.includes('EXECUTE gantry_'))).toHaveLength(1);
      expect(await Promise.all(ids.map(totalOf))).toEqual([3, 3, 3, 3, 3, 3]);
    });

    it('one refused write fails only its own command: the others commit, it gets its own error and leaves nothing', async () => {
      const ids = Array.from({ length: 4 }, () => `t-${randomUUID()}`);
      await Promise.all(ids.map((id) => add(id, 1)));
      const badKey = randomUUID();
      const outcomes = await Promise.allSettled(ids.map((id, i) => (i === 2 ? add(id, 5000, badKey) : add(id, 2))));
      expect(outcomes.map((o) => o.status)).toEqual(['fulfilled', 'fulfilled', 'rejected', 'fulfilled']);
      expect((outcomes[2] as PromiseRejectedResult).reason).toMatchObject({ constraint: `${view.name}_total_check` });
      expect(await Promise.all(ids.map(eventsOf))).toEqual([2, 2, 1, 2]);
      expect(await receiptOf(badKey)).toBeUndefined();
    });

    it('two commands on one stream in one batch both land, one after the other', async () => {
      const id = `t-${randomUUID()}`;
      await add(id, 1);
      const [a, b] = await Promise.all([add(id, 10), add(id, 100)]);
      const [first, second] = [a.result, b.result].sort((x, y) => x - y);
      expect([11, 101]).toContain(first); // whichever went first
      expect(second).toBe(111);
      expect(await eventsOf(id)).toBe(3);
      expect(await totalOf(id)).toBe(111);
    });

    it('a duplicate of a key in the same batch is answered from the receipt the other one wrote', async () => {
      const id = `t-${randomUUID()}`;
      await add(id, 1);
      const key = randomUUID();
      const [a, b] = await Promise.all([add(id, 5, key), add(id, 5, key)]);
      expect(a.result).toBe(6);
      expect(b.result).toBe(6);
      expect([a.replayed, b.replayed].sort()).toEqual([false, true]);
      expect(await eventsOf(id)).toBe(2);
    });
  });

  describe('commands of one kind that arrive together, each taking its rows as one JSON array', () => {
    let joined: EventStore;
    beforeAll(() => {
      joined = new EventStore({ pool: createPool({ url: testDatabaseUrl, schema, max: 4 }), schema, inlineProjections: [tallies] });
    });
    afterAll(() => joined.pool.end());

    const add = incrementOn(() => joined, 'test.joined');
    const addUnkeyed = (streamId: string, by: number) =>
      handleWithDecider(joined, { decider: counter, streamId, command: { type: 'increment', by }, metadata: meta, reply: (d) => d.after.total });
    const executes = (sent: string[]) => sent.flatMap((m) => m.match(/EXECUTE gantry_/g) ?? []).length;

    it('are written by one statement per kind: the receipts, the events and the view rows of all of them, their events in the order they came', async () => {
      const ids = Array.from({ length: 6 }, () => `j-${randomUUID()}`);
      await Promise.all(ids.map((id) => add(id, 1)));
      const sent = await messages(() => Promise.all(ids.map((id) => add(id, 2))));
      expect(executes(sent)).toBe(4); // the receipts, the checks of the streams' last events, the events, the view rows
      const { rows } = await pool.query<{ id: string; total: number }>('SELECT id, total FROM tallies WHERE id = ANY($1)', [ids]);
      expect(rows.map((r) => r.total)).toEqual([3, 3, 3, 3, 3, 3]);
      const { rows: order } = await pool.query<{ stream_id: string }>(
        'SELECT stream_id FROM events WHERE stream_id = ANY($1) AND stream_version = 2 ORDER BY position',
        [ids],
      );
      expect(order.map((r) => r.stream_id)).toEqual(ids);
      const { rows: receipts } = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM idempotency_receipts WHERE scope = 'test.joined'`);
      expect(receipts[0]!.n).toBe(12);
    });

    it('commands of two shapes in one batch are written as two groups, each of its own statements', async () => {
      const keyed = Array.from({ length: 3 }, () => `j-${randomUUID()}`);
      const unkeyed = Array.from({ length: 3 }, () => `j-${randomUUID()}`);
      await Promise.all([...keyed, ...unkeyed].map((id) => addUnkeyed(id, 1)));
      const sent = await messages(() => Promise.all([...keyed.map((id) => add(id, 1)), ...unkeyed.map((id) => addUnkeyed(id, 1))]));
      expect(executes(sent)).toBe(4 + 3); // receipts, last events, events, rows; last events, events, rows
      expect(await Promise.all([...keyed, ...unkeyed].map(eventsOf))).toEqual([2, 2, 2, 2, 2, 2]);
    });

    it('the positions each command gets are those of its own events', async () => {
      const ids = Array.from({ length: 5 }, () => `j-${randomUUID()}`);
      const results = await Promise.all(
        ids.map((streamId) =>
          joined.executeInOneMessage({ metadata: meta, streams: [streamId] }, async (uow) => {
            const events = await uow.append(streamId, 0, [{ type: 'Incremented', data: { by: 1 } }, { type: 'Incremented', data: { by: 2 } }]);
            return events.map((e) => e.eventId);
          }),
        ),
      );
      for (const [i, executed] of results.entries()) {
        const { rows } = await pool.query<{ event_id: string; position: string }>('SELECT event_id, position FROM events WHERE stream_id = $1 ORDER BY stream_version', [ids[i]]);
        expect(executed.events.map((e) => [e.eventId, e.position])).toEqual(rows.map((r) => [r.event_id, Number(r.position)]));
        expect(executed.result).toEqual(rows.map((r) => r.event_id));
      }
    });
  });

  it.each([
    ['a statement per command', counters],
    ['statements joined per kind', tallies],
  ])('a batch whose reply is lost after its commit (%s): each caller gets an error, each retry under its key the first answer, and nothing is written twice', async (_, view) => {
    const proxy = new ReplyLosingProxy(new URL(testDatabaseUrl));
    const url = new URL(testDatabaseUrl);
    url.host = `127.0.0.1:${await proxy.listen()}`;
    const lossy = new EventStore({ pool: createPool({ url: url.toString(), schema, max: 1 }), schema, inlineProjections: [view] });
    try {
      const add = incrementOn(() => lossy, 'test.lost');
      const ids = Array.from({ length: 3 }, () => `lost-${randomUUID()}`);
      const keys = ids.map(() => randomUUID());
      await add(`lost-${randomUUID()}`, 1, randomUUID()); // the connection has prepared what it sends

      proxy.loseTheReplyTo('EXECUTE gantry_');
      const first = await Promise.allSettled(ids.map((id, i) => add(id, i + 1, keys[i]!)));
      expect(first.map((o) => o.status)).toEqual(['rejected', 'rejected', 'rejected']);
      expect(proxy.lost).toBe(1);
      // The message had committed, all three in one transaction: the reply alone was lost.
      const { rows } = await pool.query<{ events: number; commits: number }>(
        'SELECT count(*)::int AS events, count(DISTINCT tx_id::text)::int AS commits FROM events WHERE stream_id = ANY($1)',
        [ids],
      );
      expect(rows[0]).toEqual({ events: 3, commits: 1 });

      const again = await Promise.all(ids.map((id, i) => add(id, i + 1, keys[i]!)));
      expect(again.map((a) => [a.result, a.replayed])).toEqual([
        [1, true],
        [2, true],
        [3, true],
      ]);
      expect(await Promise.all(ids.map(eventsOf))).toEqual([1, 1, 1]);
      const totals = await pool.query<{ id: string; total: number }>(`SELECT id, total FROM ${view.name} WHERE id = ANY($1)`, [ids]);
      expect(new Map(totals.rows.map((r) => [r.id, r.total]))).toEqual(new Map(ids.map((id, i) => [id, i + 1])));
    } finally {
      await lossy.pool.end();
      await proxy.close();
    }
  });

  it('a projection that reads in the transaction makes the command take the full path', async () => {
    const reads: string[] = [];
    const reading: Projection = {
      name: 'reading',
      tables: [],
      types: ['Incremented'],
      async apply(sql, event) {
        reads.push(event.streamId);
        await sql.query('SELECT 1');
      },
    };
    const other = new EventStore({ pool, schema, inlineProjections: [counters, reading] });
    const id = `c-${randomUUID()}`;
    await increment(id, 1);
    const done = await handleWithDecider(other, { decider: counter, streamId: id, command: { type: 'increment', by: 2 }, metadata: meta, reply: (d) => d.after.total });
    expect(done).toMatchObject({ result: 3, replayed: false });
    expect(reads).toEqual([id, id]); // met once by the one-message path (which gave way), once in the full path's transaction
    expect(await eventsOf(id)).toBe(2);
  });

  it('a read after an append sees the held view write (the transaction reads its own writes)', async () => {
    const id = `c-${randomUUID()}`;
    const { result } = await store.execute({ metadata: meta, idempotency: { scope: 'test.read', key: randomUUID(), request: { id } }, streams: [id] }, async (uow) => {
      await decideWithin(uow, counter, id, { type: 'increment', by: 7 });
      const { rows } = await uow.sql.query<{ total: number }>('SELECT total FROM counters WHERE id = $1', [id]);
      return rows[0]?.total ?? null;
    });
    expect(result).toBe(7);
  });

  it('a view write that fails at the commit fails the command: no event, no receipt, and the connection is fine for the next command', async () => {
    const id = `c-${randomUUID()}`;
    const key = randomUUID();
    await expect(increment(id, 5000, key)).rejects.toMatchObject({ constraint: 'counters_total_check' });
    expect(Number((await pool.query('SELECT count(*) FROM events WHERE stream_id = $1', [id])).rows[0].count)).toBe(0);
    expect((await pool.query('SELECT 1 FROM idempotency_receipts WHERE key = $1', [key])).rowCount).toBe(0);
    await expect(increment(id, 5)).resolves.toMatchObject({ result: 5, replayed: false });
  });

  it('a refusal after an append drops the held view write: the refusal is stored and nothing else', async () => {
    const id = `c-${randomUUID()}`;
    const key = randomUUID();
    const refuse = () =>
      store.execute({ metadata: meta, idempotency: { scope: 'test.refuse', key, request: { id } }, streams: [id] }, async (uow) => {
        await decideWithin(uow, counter, id, { type: 'increment', by: 1 });
        throw new GantryError(ErrorCode.INVALID_TRANSITION, 'changed my mind');
      });
    await expect(refuse()).rejects.toMatchObject({ code: ErrorCode.INVALID_TRANSITION });
    await expect(refuse()).rejects.toMatchObject({ code: ErrorCode.INVALID_TRANSITION });
    expect((await pool.query('SELECT 1 FROM counters WHERE id = $1', [id])).rowCount).toBe(0);
    expect(Number((await pool.query('SELECT count(*) FROM events WHERE stream_id = $1', [id])).rows[0].count)).toBe(0);
    await expect(increment(id, 2)).resolves.toMatchObject({ result: 2 });
  });

  it('a command on a stream a full-path command of this process wrote last is one round trip: that command remembered the stream once it committed', async () => {
    const fresh = await freshStore();
    try {
      const increment = incrementOn(() => fresh, 'test.increment');
      for (const idempotency of [undefined, { scope: 'test.full', key: randomUUID(), request: {} }]) {
        const id = `c-${randomUUID()}`;
        await fresh.execute({ metadata: meta, idempotency, streams: [id] }, (uow) => decideWithin(uow, counter, id, { type: 'increment', by: 3 }));
        const sent = await messages(() => increment(id, 2));
        expect(sent).toHaveLength(1); // its write message, no read
        expect((await pool.query('SELECT total FROM counters WHERE id = $1', [id])).rows[0].total).toBe(5);
        expect(await eventsOf(id)).toBe(2);
      }
    } finally {
      await fresh.pool.end();
    }
  });

  it('a full-path command that does not commit leaves its stream as this process knew it: the next command decides on what is committed', async () => {
    const fresh = await freshStore();
    try {
      const increment = incrementOn(() => fresh, 'test.increment');
      const id = `c-${randomUUID()}`;
      await increment(id, 1);
      await increment(id, 1);
      const appendThen = (after: (uow: UnitOfWork) => Promise<unknown>, by = 7) =>
        fresh.execute({ metadata: meta, streams: [id] }, async (uow) => {
          await decideWithin(uow, counter, id, { type: 'increment', by });
          await after(uow);
        });
      // Its view write refused at the commit.
      await expect(appendThen(async () => undefined, 5000)).rejects.toMatchObject({ constraint: 'counters_total_check' });
      // A refusal after the append.
      await expect(appendThen(() => Promise.reject(new GantryError(ErrorCode.INVALID_TRANSITION, 'changed my mind')))).rejects.toMatchObject({ code: ErrorCode.INVALID_TRANSITION });
      // A statement that failed after the append, its error swallowed: PostgreSQL answers the COMMIT with
      // a ROLLBACK, and the command fails rather than being answered as written.
      await expect(appendThen((uow) => uow.sql.query('SELECT 1/0').catch(() => undefined))).rejects.toBeInstanceOf(TransactionAbortedError);
      expect(await eventsOf(id)).toBe(2);
      // Decided on the stream as the one-message commands left it, confirmed by its write: nothing of
      // the three was remembered (an event remembered that never committed would fail that write, and
      // the command would read the stream and write again).
      const sent = await messages(() => increment(id, 2));
      expect(sent).toHaveLength(1);
      expect((await pool.query('SELECT total FROM counters WHERE id = $1', [id])).rows[0].total).toBe(4);
      expect(await eventsOf(id)).toBe(3);
    } finally {
      await fresh.pool.end();
    }
  });

  it('a stream appended to before it is read is read again, not taken from the read at BEGIN', async () => {
    const id = `c-${randomUUID()}`;
    await increment(id, 1);
    const { result } = await store.execute({ metadata: meta, streams: [id] }, async (uow) => {
      await uow.append(id, 1, [{ type: 'Incremented', data: { by: 10 } }]);
      return (await uow.readStream(id)).length;
    });
    expect(result).toBe(2);
  });

  it('a read asked by several commands of a batch runs once, and each command gets rows of its own', async () => {
    const id = `c-${randomUUID()}`;
    await increment(id, 1);
    const total = inlineStatement('SELECT total FROM counters WHERE id = $1', [id]);
    const count = inlineStatement('SELECT count(*)::int AS n FROM events WHERE stream_id = $1', [id]);
    let answers: unknown[] = [];
    const sent = await messages(async () => {
      answers = await Promise.all(
        [total, total, count, total].map(async (statement) => {
          const { result } = await store.executeInOneMessage({ metadata: meta, reads: [statement] }, async (work) => {
            const { rows } = await work.read(0);
            rows.push({ mine: true }); // a command that changes what it read changes only its own rows
            return rows;
          });
          return result;
        }),
      );
    });
    expect(sent.filter((m) => m.includes('FROM counters'))).toEqual([`${total};\n${count}`]);
    expect(answers).toEqual([
      [{ total: 1 }, { mine: true }],
      [{ total: 1 }, { mine: true }],
      [{ n: 1 }, { mine: true }],
      [{ total: 1 }, { mine: true }],
    ]);
  });

  describe('streams read again', () => {
    /** The rows the batched stream read returned while `work` ran: per row, its stream version and whether it carried its payload. */
    async function streamRowsSent(work: () => Promise<unknown>): Promise<Array<{ version: number; payload: boolean }>> {
      const rows: Array<{ version: number; payload: boolean }> = [];
      await watchingQueries((args) => {
        const done = args[args.length - 1];
        if ((args[0] as { name?: string })?.name !== 'gantry_read_streams_after' || typeof done !== 'function') return;
        // The pool asks with a callback: the rows are taken on their way to it.
        args[args.length - 1] = (error: unknown, result: pg.QueryResult) => {
          if (result) rows.push(...result.rows.map((row) => ({ version: row.stream_version as number, payload: row.data !== null })));
          return (done as (e: unknown, r: pg.QueryResult) => unknown)(error, result);
        };
      }, work);
      return rows;
    }

    it('a stream read before comes back from its last known event on: the later events with their payloads, the known one without', async () => {
      const id = `c-${randomUUID()}`;
      for (let i = 0; i < 5; i++) await increment(id, 1);
      await incrementOn(() => elsewhere, 'test.increment')(id, 100);
      // This process knew versions 1-5; the decision on them fails on the compare-and-set, and the read
      // made then returns the fifth (to compare) and the sixth.
      expect(await streamRowsSent(() => increment(id, 1))).toEqual([
        { version: 5, payload: false },
        { version: 6, payload: true },
      ]);
      expect((await pool.query('SELECT total FROM counters WHERE id = $1', [id])).rows[0].total).toBe(106);
    });

    it('events another writer appended in between are read and decided on', async () => {
      const id = `c-${randomUUID()}`;
      await increment(id, 1);
      await increment(id, 1);
      await store.append(id, 2, [{ type: 'Incremented', data: { by: 100 } }], meta); // not through the batched path
      await expect(increment(id, 1)).resolves.toMatchObject({ result: 103 });
      expect(await eventsOf(id)).toBe(4);
    });

    it('the read probes each stream by its index, whatever the statistics say: it reads no more rows than it answers', async () => {
      const probe = uniqueName('stream_reads');
      await migrate({ url: testDatabaseUrl, schema: probe });
      const sql = createPool({ url: testDatabaseUrl, schema: probe, max: 1 });
      try {
        const insert = (streams: number, from: number) =>
          sql.query(
            `INSERT INTO events (event_id, stream_id, stream_version, type, schema_version, data, metadata, occurred_at)
             SELECT gen_random_uuid(), 's-' || s, v, 'Incremented', 1, '{"by": 1}', '{}', now() FROM generate_series($2::int, $2 + $1 - 1) s, generate_series(1, 10) v`,
            [streams, from],
          );
        // Statistics taken while the log was small, then the log grew: a join of the ids to the
        // events was planned as a walk through all of them.
        await insert(5, 0);
        await sql.query('ANALYZE events');
        await insert(2000, 5);
        const ids = Array.from({ length: 16 }, (_, i) => `s-${100 + i * 7}`);
        const afters = ids.map(() => 8);
        expect(await mostRowsReadByAStep(sql, READ_STREAMS_AFTER, [ids, afters])).toBe(16 * 3);
        const { rows } = await sql.query(READ_STREAMS_AFTER, [ids, afters]);
        expect(rows.map((r) => [r.stream_id, r.stream_version, r.data === null])).toEqual(ids.flatMap((id) => [[id, 8, true], [id, 9, false], [id, 10, false]]));
      } finally {
        await sql.end();
        await dropSchema(probe);
      }
    });

    it('a stream that no longer starts as remembered (the log rebuilt under the process) is read whole', async () => {
      const id = `c-${randomUUID()}`;
      await increment(id, 1);
      await increment(id, 1);
      await increment(id, 1);
      await rewrite(store, id, [10, 20, 30]);
      await expect(increment(id, 1)).resolves.toMatchObject({ result: 61 });
      expect(await eventsOf(id)).toBe(4);
    });

    it('a stream that became shorter than remembered (the log rebuilt under the process) is read whole, and gets no gap', async () => {
      const id = `c-${randomUUID()}`;
      for (let i = 0; i < 3; i++) await increment(id, 1);
      await rewrite(store, id, [10, 20]);
      // Decided on the three remembered events, the append would be version 4, which nothing holds: the
      // compare-and-set alone would let it in after version 2. The check of the last event refuses it.
      await expect(increment(id, 1)).resolves.toMatchObject({ result: 31 });
      expect((await pool.query('SELECT stream_version FROM events WHERE stream_id = $1 ORDER BY 1', [id])).rows.map((r) => r.stream_version)).toEqual([1, 2, 3]);
    });
  });

  describe('folds of a stream this process wrote', () => {
    /** Events folded by the decider and by the view since the counts were last reset. */
    const evolved = { decider: 0, view: 0 };
    const counting: Decider<CounterCommand, { total: number }, CounterEvent> = {
      ...counter,
      evolve: (state, event) => {
        evolved.decider++;
        return counter.evolve(state, event);
      },
    };
    const counted = stateProjection<{ total: number }>({
      name: 'counted',
      tables: ['counted'],
      types: ['Incremented'],
      initialState: { total: 0 },
      evolve: (state, event) => {
        evolved.view++;
        return counter.evolve(state, event as unknown as CounterEvent);
      },
      async load(sql, ids) {
        const { rows } = await sql.query<{ id: string; total: number }>(`SELECT id, total FROM counted WHERE id = ANY($1)`, [ids]);
        return new Map(rows.map((r) => [r.id, { total: r.total }]));
      },
      async save(sql, rows) {
        await sql.query(
          `INSERT INTO counted (id, total) SELECT r.id, r.total FROM jsonb_to_recordset($1::jsonb) AS r(id text, total int)
           ON CONFLICT (id) DO UPDATE SET total = EXCLUDED.total`,
          [jsonRows(rows.map((r) => ({ id: r.streamId, total: r.state.total })))],
        );
      },
    });
    let here: EventStore;
    let there: EventStore;
    const add = (on: () => EventStore) => (streamId: string, by: number) =>
      handleWithDecider(on(), { decider: counting, streamId, command: { type: 'increment', by }, metadata: meta, reply: (d) => d.after.total });
    const addHere = add(() => here);
    const totalOf = async (id: string) => (await pool.query('SELECT total FROM counted WHERE id = $1', [id])).rows[0]?.total;

    beforeAll(async () => {
      await pool.query('CREATE TABLE counted (id text PRIMARY KEY, total int NOT NULL)');
      here = new EventStore({ pool: createPool({ url: testDatabaseUrl, schema, max: 1 }), schema, inlineProjections: [counted] });
      there = new EventStore({ pool: createPool({ url: testDatabaseUrl, schema, max: 1 }), schema, inlineProjections: [counted] });
    });
    afterAll(async () => {
      await here.pool.end();
      await there.pool.end();
    });

    it("a command folds only the stream's events since the last command's fold, however long the stream: in the decision and in the view", async () => {
      const id = `c-${randomUUID()}`;
      for (let i = 0; i < 40; i++) await addHere(id, 1);
      evolved.decider = evolved.view = 0;
      await expect(addHere(id, 2)).resolves.toMatchObject({ result: 42 });
      // The decider: the event the last command appended, then the new one (its state after). The
      // view: the new one (it keeps its state at the last command's event). A whole fold: 41 each.
      expect(evolved).toEqual({ decider: 2, view: 1 });
      expect(await totalOf(id)).toBe(42);
    });

    it('events another process appended are folded onto what this one folded: the decision and the view are the whole stream', async () => {
      const id = `c-${randomUUID()}`;
      for (let i = 0; i < 10; i++) await addHere(id, 1);
      for (let i = 0; i < 3; i++) await add(() => there)(id, 100);
      evolved.decider = evolved.view = 0;
      // Decided first on the stream as this process left it, refused by the write, decided again on
      // the stream read from there on.
      await expect(addHere(id, 1)).resolves.toMatchObject({ result: 311 });
      expect(await totalOf(id)).toBe(311);
      // Each attempt folds from the last state this process had (a whole fold: 13 events an attempt):
      // the decider 1 + 1 then 3 + 1, the view 0 + 1 then 3 + 1.
      expect(evolved.decider).toBeLessThanOrEqual(6);
      expect(evolved.view).toBeLessThanOrEqual(5);
      await expect(addHere(id, 1)).resolves.toMatchObject({ result: 312 });
      expect(await totalOf(id)).toBe(312);
    });

    it('a stream rewritten under the process (new events where it remembered others) is folded from its first event', async () => {
      const id = `c-${randomUUID()}`;
      for (let i = 0; i < 5; i++) await addHere(id, 1);
      await pool.query('DELETE FROM counted WHERE id = $1', [id]);
      await rewrite(here, id, [10, 20, 30, 40, 50, 60]);
      await expect(addHere(id, 1)).resolves.toMatchObject({ result: 211 });
      expect(await totalOf(id)).toBe(211);
    });
  });
});

describe('inlineStatement', () => {
  it('writes values in as quoted literals, $10 apart from $1', () => {
    const values = ['a', 2, 3, 4, 5, 6, 7, 8, 9, "it's"];
    expect(inlineStatement('SELECT $1, $10', values)).toBe(`SELECT 'a', 'it''s'`);
    expect(inlineStatement('SELECT $1, $2, $3', [null, new Date('2026-01-02T03:04:05.000Z'), { a: 1 }])).toBe(
      `SELECT NULL, '2026-01-02T03:04:05.000Z', '{"a":1}'`,
    );
  });

  it("a literal is what pg's escapeLiteral writes, and reads back as the very string: quotes, backslashes and all", async () => {
    const texts = ["it's", 'back\\slash', "both \\' and ''", '\\\\', 'ünïcødé ✓', '{"a":"b\\"c\\\\d"}', ''];
    for (const text of texts) expect(literalOf(text)).toBe(pg.escapeLiteral(text));
    const client = new pg.Client({ connectionString: testDatabaseUrl });
    await client.connect();
    try {
      const { rows } = await client.query<Record<string, string>>(`SELECT ${texts.map((text, i) => `${literalOf(text)} AS v${i}`).join(', ')}`);
      expect(texts.map((_, i) => rows[0]![`v${i}`])).toEqual(texts);
    } finally {
      await client.end();
    }
  });

  it('refuses a reference to a missing value and an array', () => {
    expect(() => inlineStatement('SELECT $2', ['x'])).toThrow(RangeError);
    expect(() => inlineStatement('SELECT $1', [['x']])).toThrow(TypeError);
  });

  it('rows taken as one parameter (JsonRows) are their JSON, written in as a literal or sent by a connection; anything but an array is refused', async () => {
    const rows = jsonRows([{ id: "it's", n: 1 }, { id: 'b\\c', n: 2 }]);
    expect(literalOf(rows)).toBe(pg.escapeLiteral(rows.json));
    const statement = 'SELECT r.id, r.n FROM jsonb_to_recordset($1::jsonb) AS r(id text, n int) ORDER BY r.n';
    const client = new pg.Client({ connectionString: testDatabaseUrl });
    await client.connect();
    try {
      const inlined = await client.query(inlineStatement(statement, [rows]));
      const sent = await client.query(statement, [rows]);
      expect(inlined.rows).toEqual([{ id: "it's", n: 1 }, { id: 'b\\c', n: 2 }]);
      expect(sent.rows).toEqual(inlined.rows);
    } finally {
      await client.end();
    }
    expect(() => new JsonRows('{"a":1}')).toThrow(TypeError);
  });
});

/**
 * A TCP proxy in front of PostgreSQL that can lose one answer: once a client message carrying the
 * marker has gone through, the server's reply is swallowed up to its ReadyForQuery — the message has
 * been run, and committed if it commits — and then the connection is cut, as by a network that failed
 * at that moment. PostgreSQL's replies are typed messages (a type byte, then a length that counts
 * itself), so the end of the answer can be found in the stream.
 */
class ReplyLosingProxy {
  private readonly server = net.createServer((client) => this.connect(client));
  private readonly sockets = new Set<net.Socket>();
  private marker: string | null = null;
  lost = 0;

  constructor(private readonly target: URL) {}

  listen(): Promise<number> {
    return new Promise((resolve) => this.server.listen(0, '127.0.0.1', () => resolve((this.server.address() as net.AddressInfo).port)));
  }

  loseTheReplyTo(marker: string): void {
    this.marker = marker;
  }

  close(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }

  private connect(client: net.Socket): void {
    const server = net.connect(Number(this.target.port || 5432), this.target.hostname);
    for (const socket of [client, server]) {
      this.sockets.add(socket);
      socket.on('error', () => undefined);
      socket.on('close', () => {
        this.sockets.delete(socket);
        client.destroy();
        server.destroy();
      });
    }
    let swallowing = false;
    let answer = Buffer.alloc(0);
    client.on('data', (chunk: Buffer) => {
      if (this.marker !== null && chunk.toString('latin1').includes(this.marker)) {
        this.marker = null;
        swallowing = true;
      }
      server.write(chunk);
    });
    server.on('data', (chunk: Buffer) => {
      if (!swallowing) {
        client.write(chunk);
        return;
      }
      answer = Buffer.concat([answer, chunk]);
      for (let at = 0; at + 5 <= answer.length; at += 1 + answer.readInt32BE(at + 1)) {
        if (answer[at] === 'Z'.charCodeAt(0)) {
          this.lost++;
          client.destroy();
          server.destroy();
          return;
        }
      }
    });
  }
}
