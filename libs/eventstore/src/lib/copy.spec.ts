import type pg from 'pg';
import { dropSchema, testDatabaseUrl, uniqueName } from '@gantry/testing';
import { copyIn, copyOut } from './copy.js';
import { createPool } from './database.js';

/** COPY in text format and out in binary, as a rebuild uses them, against a real PostgreSQL. */
describe('copyIn and copyOut', () => {
  const schema = uniqueName('copy');
  let pool: pg.Pool;
  let client: pg.PoolClient;

  beforeAll(async () => {
    pool = createPool({ url: testDatabaseUrl, schema, max: 2 });
    client = await pool.connect();
    await client.query(`CREATE SCHEMA ${schema}`);
    await client.query(`SET search_path TO ${schema}`);
    await client.query(`CREATE TABLE rows_in (id int PRIMARY KEY, note text, doc jsonb, flag boolean, at timestamptz)`);
  });

  afterAll(async () => {
    client?.release();
    await pool?.end();
    await dropSchema(schema);
  });

  it('writes many chunks of rows, with escapes, wide characters, NULLs and a row larger than a chunk, as they were', async () => {
    const huge = 'é€😀\\\t\n'.repeat(20_000); // about 140,000 UTF-16 units: several chunks on its own
    const rows = Array.from({ length: 3_000 }, (_, i) => ({
      id: i,
      note: i === 1_500 ? huge : i % 7 === 0 ? null : `row ${i}\twith a tab, a\nnewline, a \\ backslash and ${'ü'.repeat(i % 50)}`,
      doc: { i, text: `"quoted" \\ ${i}\n`, list: [i, null, true] },
      flag: i % 2 === 0,
      at: new Date(Date.UTC(2026, 0, 1, 0, 0, i)),
    }));
    await copyIn(client, 'rows_in', ['id', 'note', 'doc', 'flag', 'at'], rows);

    const { rows: stored } = await client.query<{ id: number; note: string | null; doc: unknown; flag: boolean; at: Date }>(
      'SELECT id, note, doc, flag, at FROM rows_in ORDER BY id',
    );
    expect(stored).toEqual(rows);
  });

  it('reads rows back in binary, in batches, each field where the row says', async () => {
    const batches: Array<Array<{ id: number; note: string | null }>> = [];
    for await (const batch of copyOut(client, 'SELECT id, note FROM rows_in ORDER BY id', 1_000, ({ bytes, starts, ends }) => ({
      id: bytes.readInt32BE(starts[0]!),
      note: starts[1] === -1 ? null : bytes.toString('utf8', starts[1], ends[1]),
    }))) {
      batches.push(batch);
    }
    expect(batches.map((b) => b.length)).toEqual([1_000, 1_000, 1_000]);
    const { rows: expected } = await client.query<{ id: number; note: string | null }>('SELECT id, note FROM rows_in ORDER BY id');
    expect(batches.flat()).toEqual(expected);
  });

  it('refuses a write whose rows do not fit the table, and writes none of them', async () => {
    await client.query('CREATE TABLE strict (id int PRIMARY KEY, n int NOT NULL)');
    await expect(copyIn(client, 'strict', ['id', 'n'], [{ id: 1, n: 1 }, { id: 2, n: null }])).rejects.toThrow(/null value/);
    expect((await client.query('SELECT count(*)::int AS n FROM strict')).rows[0].n).toBe(0);
  });
});
