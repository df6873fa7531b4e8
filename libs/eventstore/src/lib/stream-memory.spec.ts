import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { ErrorCode, GantryError } from '@gantry/contracts';
import { dropSchema, testDatabaseUrl, uniqueName } from '@gantry/testing';
import { createPool } from './database.js';
import { migrate } from './migrations.js';
import { EventStore } from './event-store.js';
import { decideWithin, foldStream, type Decider } from './decider.js';

/*
 * Commands of the full path (store.execute, a consumer's transaction) read a stream from where this
 * process knew it and fold it from where the last fold ended (docs/architecture.md, "A stream read
 * from where this process knew it, in a transaction too"): what they decide on must still be exactly
 * the committed log.
 */
type Added = { type: 'Added'; data: { n: number } };
type Tally = { count: number; seen: number[] };
let evolved = 0;
const tally: Decider<{ n: number }, Tally, Added> = {
  initialState: { count: 0, seen: [] },
  decide: (command) => [{ type: 'Added', data: { n: command.n } }],
  evolve: (state, event) => {
    evolved++;
    return { count: state.count + 1, seen: [...state.seen, event.data.n] };
  },
};

const meta = { correlationId: 'test' };

describe('a stream read from where the process knew it', () => {
  const schema = uniqueName('stream_memory');
  let pool: pg.Pool;
  let otherPool: pg.Pool;

  beforeAll(async () => {
    await migrate({ url: testDatabaseUrl, schema });
    pool = createPool({ url: testDatabaseUrl, schema, max: 6 });
    otherPool = createPool({ url: testDatabaseUrl, schema, max: 6 });
  });
  afterAll(async () => {
    await pool.end();
    await otherPool.end();
    await dropSchema(schema);
  });

  const committed = async (streamId: string) =>
    (await pool.query<{ data: { n: number } }>('SELECT data FROM events WHERE stream_id = $1 ORDER BY stream_version', [streamId])).rows.map((r) => r.data.n);
  const add = (store: EventStore, streamId: string, n: number) =>
    store.execute({ metadata: meta, streams: [streamId] }, async (uow) => (await decideWithin(uow, tally, streamId, { n })).before);

  it('reads only what came after the events it knew, which come as the same objects, and folds only the new ones', async () => {
    const store = new EventStore({ pool, schema });
    const stream = `s-${randomUUID()}`;
    await store.append(stream, 0, Array.from({ length: 300 }, (_, i) => ({ type: 'Added', data: { n: i } })), meta);
    const first = await store.readStream(stream);
    expect(foldStream(tally, first).count).toBe(300);
    for (let i = 0; i < 5; i++) {
      evolved = 0;
      const before = (await add(store, stream, 300 + i)).result;
      // The command's fold went on from the last one (the event the command before it appended, none
      // the first time), and its `after` folds its own event: not the 300 events before.
      expect(evolved).toBeLessThanOrEqual(2);
      expect(before.seen).toEqual(await committed(stream).then((all) => all.slice(0, 300 + i)));
    }
    const again = await store.readStream(stream);
    expect(again).toHaveLength(305);
    expect(again[0]).toBe(first[0]);
    expect(again[299]).toBe(first[299]);
  });

  it('remembers nothing a transaction read of its own appends: an append rolled back and an event of the same id committed in its place is read as committed', async () => {
    const store = new EventStore({ pool, schema });
    const stream = `s-${randomUUID()}`;
    await store.append(stream, 0, [{ type: 'Added', data: { n: 1 } }], meta);
    await store.readStream(stream);
    const eventId = randomUUID();
    await expect(
      store.execute({ metadata: meta }, async (uow) => {
        await uow.append(stream, 1, [{ type: 'Added', data: { n: 2 }, eventId }]);
        // The transaction sees its own append; this read must not become what the process knows.
        expect((await store.readStream(stream, uow.sql)).map((e) => (e.data as { n: number }).n)).toEqual([1, 2]);
        throw new GantryError(ErrorCode.INVALID_TRANSITION, 'changed its mind');
      }),
    ).rejects.toThrow('changed its mind');
    // The same event id, written again with other data (a command decided again after its rollback).
    await store.append(stream, 1, [{ type: 'Added', data: { n: 3 }, eventId }], meta);
    expect((await store.readStream(stream)).map((e) => (e.data as { n: number }).n)).toEqual([1, 3]);
    const decided = await add(store, stream, 4);
    expect(decided.result.seen).toEqual([1, 3]);
    expect(await committed(stream)).toEqual([1, 3, 4]);
  });

  it('two processes taking turns on one stream each decide on the whole committed stream', async () => {
    const one = new EventStore({ pool, schema });
    const two = new EventStore({ pool: otherPool, schema });
    const stream = `s-${randomUUID()}`;
    const answers: number[][] = [];
    for (let i = 0; i < 40; i++) {
      const store = i % 3 === 0 ? two : one; // runs of two on one, one on the other
      answers.push((await add(store, stream, i)).result.seen);
    }
    // Concurrently as well: conflicts are decided again on the stream as it then is.
    await Promise.all(Array.from({ length: 20 }, (_, i) => add(i % 2 ? one : two, stream, 40 + i)));
    const log = await committed(stream);
    expect(log).toHaveLength(60);
    answers.forEach((seen, i) => expect(seen).toEqual(log.slice(0, i)));
    for (const store of [one, two]) expect(foldStream(tally, await store.readStream(stream)).seen).toEqual(log);
  });

  it('a stream that no longer ends as remembered (its log rebuilt under the process) is read whole', async () => {
    const store = new EventStore({ pool, schema });
    const stream = `s-${randomUUID()}`;
    await store.append(stream, 0, [1, 2, 3].map((n) => ({ type: 'Added', data: { n } })), meta);
    expect(await store.readStream(stream)).toHaveLength(3);
    await pool.query('DELETE FROM outbox WHERE position IN (SELECT position FROM events WHERE stream_id = $1)', [stream]);
    await pool.query('DELETE FROM events WHERE stream_id = $1', [stream]);
    await store.append(stream, 0, [7, 8].map((n) => ({ type: 'Added', data: { n } })), meta);
    expect((await store.readStream(stream)).map((e) => (e.data as { n: number }).n)).toEqual([7, 8]);
    expect((await add(store, stream, 9)).result.seen).toEqual([7, 8]);
  });
});
