import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { dropSchema, testDatabaseUrl, uniqueName } from '@gantry/testing';
import { createPool } from './database.js';
import { migrate } from './migrations.js';
import { EventStore } from './event-store.js';
import { applyToProjection, type Projection } from './projection.js';
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

describe('projections', () => {
  const schema = uniqueName('projection');
  let pool: pg.Pool;
  let store: EventStore;

  beforeAll(async () => {
    await migrate({ url: testDatabaseUrl, schema });
    pool = createPool({ url: testDatabaseUrl, schema, max: 12 });
    await pool.query('CREATE TABLE account_totals (account text PRIMARY KEY, total integer NOT NULL, last_position bigint NOT NULL)');
    store = new EventStore({ pool, schema, inlineProjections: [totals] });
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
});
