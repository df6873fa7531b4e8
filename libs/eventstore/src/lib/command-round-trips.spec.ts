import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { ErrorCode, GantryError } from '@gantry/contracts';
import { dropSchema, testDatabaseUrl, uniqueName } from '@gantry/testing';
import { createPool } from './database.js';
import { decideWithin, handleWithDecider, type Decider } from './decider.js';
import { inlineStatement } from './deferred-writes.js';
import { EventStore } from './event-store.js';
import { migrate } from './migrations.js';
import { stateProjection } from './projection.js';

type CounterEvent = { type: 'Incremented'; data: { by: number } };
type CounterCommand = { type: 'increment'; by: number };
const counter: Decider<CounterCommand, { total: number }, CounterEvent> = {
  initialState: { total: 0 },
  decide: (command) => [{ type: 'Incremented', data: { by: command.by } }],
  evolve: (state, event) => ({ total: state.total + event.data.by }),
};

/** A state projection whose table refuses totals of 1000 and more (a write that fails at the commit). */
const counters = stateProjection<{ total: number }>({
  name: 'counters',
  tables: ['counters'],
  types: ['Incremented'],
  initialState: { total: 0 },
  evolve: (state, event) => counter.evolve(state, event as unknown as CounterEvent),
  async load(sql, ids) {
    const { rows } = await sql.query<{ id: string; total: number }>('SELECT id, total FROM counters WHERE id = ANY($1)', [ids]);
    return new Map(rows.map((r) => [r.id, { total: r.total }]));
  },
  async save(sql, rows) {
    await sql.query(
      `INSERT INTO counters (id, total, note) SELECT r.id, r.total, $2 FROM jsonb_to_recordset($1::jsonb) AS r(id text, total int)
       ON CONFLICT (id) DO UPDATE SET total = EXCLUDED.total, note = EXCLUDED.note`,
      [JSON.stringify(rows.map((r) => ({ id: r.streamId, total: r.state.total }))), "it's $1 and $2"],
    );
  },
});

const meta = { correlationId: 'test' };

describe('a command in few round trips', () => {
  const schema = uniqueName('round_trips');
  let pool: pg.Pool;
  let store: EventStore;

  beforeAll(async () => {
    await migrate({ url: testDatabaseUrl, schema });
    // One connection: a connection left in a bad state by one command would fail the next.
    pool = createPool({ url: testDatabaseUrl, schema, max: 1 });
    await pool.query('CREATE TABLE counters (id text PRIMARY KEY, total int NOT NULL CHECK (total < 1000), note text)');
    store = new EventStore({ pool, schema, inlineProjections: [counters] });
  });
  afterAll(async () => {
    await pool.end();
    await dropSchema(schema);
  });

  const increment = (streamId: string, by: number, key = randomUUID()) =>
    handleWithDecider(store, {
      decider: counter,
      streamId,
      command: { type: 'increment', by },
      metadata: meta,
      idempotency: { scope: 'test.increment', key, request: { streamId, by } },
      reply: (d) => d.after.total,
    });

  /** How many messages the connections send while `work` runs. */
  async function roundTrips(work: () => Promise<unknown>): Promise<number> {
    const send = pg.Client.prototype.query;
    let count = 0;
    pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
      count++;
      return (send as (...a: unknown[]) => unknown).apply(this, args);
    } as typeof send;
    try {
      await work();
    } finally {
      pg.Client.prototype.query = send;
    }
    return count;
  }

  it('a decider command with a receipt is three round trips: BEGIN with the claim and the stream read, the append, the view write with the answer and COMMIT', async () => {
    const id = `c-${randomUUID()}`;
    await increment(id, 1);
    expect(await roundTrips(() => increment(id, 2))).toBe(3);
    expect((await pool.query('SELECT total, note FROM counters WHERE id = $1', [id])).rows).toEqual([{ total: 3, note: "it's $1 and $2" }]);
    expect(Number((await pool.query('SELECT count(*) FROM events WHERE stream_id = $1', [id])).rows[0].count)).toBe(2);
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

  it('a stream appended to before it is read is read again, not taken from the read at BEGIN', async () => {
    const id = `c-${randomUUID()}`;
    await increment(id, 1);
    const { result } = await store.execute({ metadata: meta, streams: [id] }, async (uow) => {
      await uow.append(id, 1, [{ type: 'Incremented', data: { by: 10 } }]);
      return (await uow.readStream(id)).length;
    });
    expect(result).toBe(2);
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

  it('refuses a reference to a missing value and an array', () => {
    expect(() => inlineStatement('SELECT $2', ['x'])).toThrow(RangeError);
    expect(() => inlineStatement('SELECT $1', [['x']])).toThrow(TypeError);
  });
});
