import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { ErrorCode } from '@gantry/contracts';
import { dropSchema, testDatabaseUrl, uniqueName } from '@gantry/testing';
import { createPool } from './database.js';
import { migrate } from './migrations.js';
import { EventStore } from './event-store.js';
import { pruneExpired } from './retention.js';

const HOUR = 60 * 60 * 1000;
const meta = { correlationId: 'retention-test' };

describe('retention', () => {
  const schema = uniqueName('retention');
  let pool: pg.Pool;
  let now = new Date('2030-01-01T00:00:00Z');
  let store: EventStore;

  beforeAll(async () => {
    await migrate({ url: testDatabaseUrl, schema });
    pool = createPool({ url: testDatabaseUrl, schema, max: 4 });
    store = new EventStore({ pool, schema, clock: () => now, receiptTtlMs: 2 * HOUR });
  });
  afterAll(async () => {
    await pool.end();
    await dropSchema(schema);
  });

  const count = async (table: string, where = 'true', params: unknown[] = []) =>
    Number((await pool.query(`SELECT count(*) AS n FROM ${table} WHERE ${where}`, params)).rows[0].n);

  /** One command under a key: appends one event to its own stream and answers with that stream. */
  const command = (key: string, request: unknown, ttlMs?: number) =>
    store.execute({ metadata: meta, idempotency: { scope: 'retention', key, request, ttlMs } }, async (uow) => {
      const stream = `s-${randomUUID()}`;
      await uow.append(stream, 0, [{ type: 'Happened', data: { key } }]);
      return { stream };
    });

  it('prunes receipts whose window passed and still refuses a replayed key inside its window, answering with the stored result', async () => {
    const shortKey = randomUUID(); // the store's default window: 2 h
    const longKey = randomUUID(); // its own window: 24 h
    const short = await command(shortKey, { n: 1 });
    const long = await command(longKey, { n: 2 }, 24 * HOUR);

    now = new Date(now.getTime() + 3 * HOUR);
    const pruned = await pruneExpired(pool, { now });
    expect(pruned.receipts).toBe(1);
    expect(await count('idempotency_receipts', 'key = $1', [shortKey])).toBe(0);
    expect(await count('idempotency_receipts', 'key = $1', [longKey])).toBe(1);

    // Inside its window: the stored answer, nothing written.
    const events = await count('events');
    const repeat = await command(longKey, { n: 2 }, 24 * HOUR);
    expect(repeat).toMatchObject({ replayed: true, result: long.result });
    await expect(command(longKey, { n: 3 }, 24 * HOUR)).rejects.toMatchObject({ code: ErrorCode.IDEMPOTENCY_CONFLICT });
    expect(await count('events')).toBe(events);

    // Past its window and pruned: the key is free for a new request.
    const reused = await command(shortKey, { n: 99 });
    expect(reused.replayed).toBe(false);
    expect(reused.result.stream).not.toBe(short.result.stream);
    expect(await count('events')).toBe(events + 1);
  });

  it('prunes in batches (each its own statement) until no expired receipt is left', async () => {
    const keys = Array.from({ length: 7 }, () => randomUUID());
    for (const key of keys) await command(key, { key }, HOUR / 2);
    now = new Date(now.getTime() + HOUR);
    const pruned = await pruneExpired(pool, { now, batchSize: 3 });
    expect(pruned.receipts).toBe(7);
    expect(await count('idempotency_receipts', 'key = ANY($1)', [keys])).toBe(0);
  });

  it('prunes inbox rows per consumer before their cut-off and dead letters before theirs; keeps the rest', async () => {
    await pool.query(
      `INSERT INTO inbox (consumer, event_id, processed_at) VALUES
         ('a', 'old-a', '2030-01-01T00:00:00Z'), ('a', 'new-a', '2030-01-05T00:00:00Z'),
         ('b', 'old-b', '2030-01-01T00:00:00Z'), ('c', 'old-c', '2030-01-01T00:00:00Z')`,
    );
    await pool.query(
      `INSERT INTO dead_letters (consumer, subject, payload, error, recorded_at) VALUES
         ('a', 'x', '{}', '{}', '2029-01-01T00:00:00Z'), ('a', 'y', '{}', '{}', '2030-01-04T00:00:00Z')`,
    );
    const cut = new Date('2030-01-03T00:00:00Z');
    const pruned = await pruneExpired(pool, {
      now,
      inboxBefore: [
        { consumer: 'a', before: cut },
        { consumer: 'b', before: cut },
      ],
      deadLettersBefore: cut,
    });
    expect(pruned).toMatchObject({ inbox: 2, deadLetters: 1 });
    expect((await pool.query(`SELECT event_id FROM inbox ORDER BY event_id`)).rows.map((r) => r.event_id)).toEqual(['new-a', 'old-c']);
    expect((await pool.query(`SELECT subject FROM dead_letters`)).rows.map((r) => r.subject)).toEqual(['y']);
  });
});
