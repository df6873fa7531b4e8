import type pg from 'pg';
import { testDatabaseUrl, uniqueName } from '@gantry/testing';
import { createPool, TransactionAbortedError, withTransaction } from './database.js';

describe('withTransaction, and a transaction a caught error aborted', () => {
  const table = uniqueName('commit_check');
  let pool: pg.Pool;
  const rows = async () => (await pool.query(`SELECT n FROM ${table} ORDER BY n`)).rows.map((r: { n: number }) => r.n);

  beforeAll(async () => {
    pool = createPool({ url: testDatabaseUrl, schema: 'public', max: 2 });
    await pool.query(`CREATE TABLE ${table} (n int PRIMARY KEY)`);
  });
  afterAll(async () => {
    await pool.query(`DROP TABLE IF EXISTS ${table}`);
    await pool.end();
  });

  it('commits what its work wrote and answers its result', async () => {
    await expect(withTransaction(pool, async (sql) => (await sql.query(`INSERT INTO ${table} VALUES (1) RETURNING n`)).rows[0].n)).resolves.toBe(1);
    expect(await rows()).toEqual([1]);
  });

  it('fails with TransactionAbortedError when a statement failed and its error was caught: PostgreSQL answered the COMMIT with a ROLLBACK, nothing was written', async () => {
    const work = withTransaction(pool, async (sql) => {
      await sql.query(`INSERT INTO ${table} VALUES (2)`);
      await sql.query('SELECT 1/0').catch(() => undefined);
      return 'answered as written';
    });
    await expect(work).rejects.toBeInstanceOf(TransactionAbortedError);
    expect(await rows()).toEqual([1]);
    // The connection went back to the pool usable.
    await expect(withTransaction(pool, (sql) => sql.query(`INSERT INTO ${table} VALUES (3)`))).resolves.toBeDefined();
    expect(await rows()).toEqual([1, 3]);
  });
});
