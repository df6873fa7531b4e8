import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { ErrorCode, GantryError } from '@gantry/contracts';
import { dropSchema, testDatabaseUrl, uniqueName } from '@gantry/testing';
import { createPool } from './database.js';
import { migrate } from './migrations.js';
import { EventStore } from './event-store.js';
import type { StreamWork } from './unit-of-work.js';

const meta = { correlationId: 'test' };

/**
 * A command on a stream another writer keeps appending to (docs/architecture.md, "When a stream
 * stays busy"): every try of the command reads the stream, and before it appends the other writer
 * has taken the next version — until the other writer stops. The command decides again for as long
 * as its patience lasts, not a count of tries.
 */
describe('a command on a stream another writer keeps appending to', () => {
  const schema = uniqueName('conflicts');
  let pool: pg.Pool;
  const stores: EventStore[] = [];

  beforeAll(async () => {
    await migrate({ url: testDatabaseUrl, schema });
    pool = createPool({ url: testDatabaseUrl, schema, max: 2 });
  });
  afterAll(async () => {
    for (const store of stores) await store.pool.end();
    await pool.end();
    await dropSchema(schema);
  });

  /** A store of its own, on a pool of its own (a process's store prepares its statements on its connections). */
  const storeWith = (conflictPatience: { patienceMs: number; maxPauseMs?: number }) => {
    const store = new EventStore({ pool: createPool({ url: testDatabaseUrl, schema, max: 8 }), schema, conflictPatience });
    stores.push(store);
    return store;
  };

  const count = async (sql: string, values: unknown[]) => Number((await pool.query(sql, values)).rows[0].count);

  /**
   * The other writer: appends to the stream (each its own transaction) between the command's read
   * and its append, for the first `losses` tries of the command, then stops.
   */
  function busyStream(store: EventStore, losses: number) {
    const stream = `hot-${randomUUID()}`;
    let tries = 0;
    const command = async (work: StreamWork) => {
      tries += 1;
      const read = await work.readStream(stream);
      if (tries <= losses) await store.append(stream, 'any', [{ type: 'Marked', data: { by: 'the other writer' } }], meta);
      return (await work.append(stream, read.length, [{ type: 'Moved', data: { tries } }]))[0]!.streamVersion;
    };
    return { stream, command, tries: () => tries };
  }

  describe.each([
    ['the full path (execute)', (store: EventStore, options: Parameters<EventStore['execute']>[0], command: (work: StreamWork) => Promise<number>) => store.execute(options, command)],
    ['one message (executeInOneMessage)', (store: EventStore, options: Parameters<EventStore['execute']>[0], command: (work: StreamWork) => Promise<number>) => store.executeInOneMessage(options, command)],
  ])('%s', (_path, run) => {
    it('loses 20 races in a row to the other writer and still lands once it stops, with its receipt', async () => {
      const store = storeWith({ patienceMs: 120_000 });
      const hot = busyStream(store, 20);
      const key = randomUUID();
      const executed = await run(store, { metadata: meta, idempotency: { scope: 'conflicts', key, request: { n: 1 } } }, hot.command);
      expect(executed).toMatchObject({ result: 21, replayed: false });
      expect(hot.tries()).toBe(21);
      expect(await count('SELECT count(*) FROM events WHERE stream_id = $1 AND type = $2', [hot.stream, 'Moved'])).toBe(1);
      expect(await count('SELECT count(*) FROM idempotency_receipts WHERE key = $1', [key])).toBe(1);
    });

    it('answers VERSION_CONFLICT naming the stream once its patience is spent, writes nothing and keeps no receipt: the same request sent again lands', async () => {
      const store = storeWith({ patienceMs: 1_000, maxPauseMs: 20 });
      const hot = busyStream(store, Number.MAX_SAFE_INTEGER);
      const key = randomUUID();
      const options = { metadata: meta, idempotency: { scope: 'conflicts', key, request: { n: 2 } } };
      const refused = await run(store, options, hot.command).catch((error: unknown) => error);
      expect(refused).toBeInstanceOf(GantryError);
      expect(refused).toMatchObject({ code: ErrorCode.VERSION_CONFLICT, details: { streams: [hot.stream], written: false } });
      expect((refused as GantryError).message).toContain(hot.stream);
      // A try made again on a read because it decided on a remembered stream is not counted as one.
      expect((refused as GantryError).details!.attempts).toBeGreaterThanOrEqual(1);
      expect((refused as GantryError).details!.attempts).toBeLessThanOrEqual(hot.tries());
      expect(await count('SELECT count(*) FROM events WHERE stream_id = $1 AND type = $2', [hot.stream, 'Moved'])).toBe(0);
      expect(await count('SELECT count(*) FROM idempotency_receipts WHERE key = $1', [key])).toBe(0);

      const calm = busyStream(store, 0);
      const again = await run(store, options, calm.command);
      expect(again).toMatchObject({ result: 1, replayed: false });
    });
  });
});
