import { runInNewContext } from 'node:vm';
import type pg from 'pg';
import { startCuttableProxy, testDatabaseUrl, uniqueName, type CuttableProxy } from '@gantry/testing';
import { createPool, DatabaseUnreachableError, isDatabaseUnreachable, withoutQueryTimeout, withTransaction } from './database.js';

/**
 * A PostgreSQL that stops answering without closing anything (a partition, a frozen host), here a
 * proxy that forwards nothing: what the pool's bounds make of it (docs/operations.md, "When
 * PostgreSQL stops answering").
 */
describe('a pool in front of a PostgreSQL that stops answering', () => {
  const schema = uniqueName('pg_timeouts');
  let proxy: CuttableProxy;
  const pools: pg.Pool[] = [];
  const poolOf = (max: number, timeouts: { connectMs?: number; queryMs?: number; idleInTransactionMs?: number }) => {
    const pool = createPool({ url: proxy.url, schema, max, timeouts });
    pools.push(pool);
    return pool;
  };

  beforeAll(async () => {
    proxy = await startCuttableProxy(testDatabaseUrl);
  });

  afterEach(() => proxy.restore());

  afterAll(async () => {
    await Promise.all(pools.map((pool) => pool.end().catch(() => undefined)));
    await proxy.close();
  });

  it('fails a query whose answer does not come, as the database being unreachable', async () => {
    const pool = poolOf(1, { queryMs: 300 });
    await pool.query('SELECT 1');
    proxy.blackhole();
    const error = await pool.query('SELECT 1').catch((e: unknown) => e);
    expect(error).toMatchObject({ message: 'Query read timeout' });
    expect(isDatabaseUnreachable(error)).toBe(true);
  });

  it('fails a connection that is accepted and never answered, as the database being unreachable', async () => {
    const pool = poolOf(1, { connectMs: 300 });
    proxy.blackhole();
    const error = await pool.connect().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(Error);
    expect(isDatabaseUnreachable(error)).toBe(true);
  });

  it('does not hand a connection whose query timed out to the next checkout: the next query, once the database answers, gets its answer', async () => {
    const pool = poolOf(1, { queryMs: 300 });
    await pool.query('SELECT 1');
    proxy.blackhole();
    // A checkout's query times out; its ROLLBACK is sent on the same connection, which is handed back.
    const failed = await withTransaction(pool, (sql) => sql.query('SELECT 1')).catch((e: unknown) => e);
    expect(isDatabaseUnreachable(failed)).toBe(true);
    proxy.restore();
    // Kept, the connection would still wait for the lost query's answer, and this one behind it.
    const client = await pool.connect();
    try {
      expect((await client.query<{ answer: number }>('SELECT 42 AS answer')).rows).toEqual([{ answer: 42 }]);
    } finally {
      client.release();
    }
  });

  it('drops a connection handed back at once after its query timed out, before the socket has closed', async () => {
    const pool = poolOf(1, { queryMs: 300 });
    await pool.query('SELECT 1');
    const client = await pool.connect();
    proxy.blackhole();
    await expect(client.query('SELECT 1')).rejects.toThrow('Query read timeout');
    client.release();
    proxy.restore();
    const next = await pool.connect();
    try {
      expect(next).not.toBe(client);
      expect((await next.query<{ answer: number }>('SELECT 42 AS answer')).rows).toEqual([{ answer: 42 }]);
    } finally {
      next.release();
    }
  });

  it('lets work that must wait long do so under withoutQueryTimeout, and bounds the queries after it again', async () => {
    const pool = poolOf(1, { queryMs: 300 });
    const client = await pool.connect();
    try {
      await expect(withoutQueryTimeout(client, () => client.query('SELECT pg_sleep(1)'))).resolves.toBeDefined();
      await expect(client.query('SELECT pg_sleep(1)')).rejects.toThrow('Query read timeout');
    } finally {
      client.release();
    }
  });

  it("sets the server's side of each session: keepalive probes, and the end of a session idle in a transaction", async () => {
    const pool = createPool({ url: testDatabaseUrl, schema, max: 1, timeouts: { keepAliveMs: 7_000, idleInTransactionMs: 90_000 } });
    pools.push(pool);
    const { rows } = await pool.query<{ idle: string; interval: string; count: string; in_transaction: string }>(
      `SELECT current_setting('tcp_keepalives_idle') AS idle, current_setting('tcp_keepalives_interval') AS interval,
              current_setting('tcp_keepalives_count') AS count, current_setting('idle_in_transaction_session_timeout') AS in_transaction`,
    );
    expect(rows).toEqual([{ idle: '7', interval: '1', count: '10', in_transaction: '90s' }]);
  });
});

describe('isDatabaseUnreachable', () => {
  it("tells an unreachable database by the error's shape, whichever realm made the error", () => {
    const foreign = runInNewContext(`Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' })`) as unknown;
    expect(foreign instanceof Error).toBe(false);
    expect(isDatabaseUnreachable(foreign)).toBe(true);
    expect(isDatabaseUnreachable(runInNewContext(`new Error('Connection terminated unexpectedly')`))).toBe(true);
    expect(isDatabaseUnreachable(runInNewContext(`Object.assign(new Error('duplicate key'), { code: '23505' })`))).toBe(false);
  });

  it("counts a start's report of an unreachable database as one, and nothing that is not an error", () => {
    expect(isDatabaseUnreachable(new DatabaseUnreachableError('postgres://u:secret@db.example:5432/gantry', new Error('timeout expired')))).toBe(true);
    for (const value of [null, undefined, 'ECONNREFUSED', 42, { code: 42 }]) expect(isDatabaseUnreachable(value)).toBe(false);
  });
});
