import pg from 'pg';
import { dropSchema, eventually, testDatabaseUrl, uniqueName } from '@gantry/testing';
import { createPool } from './database.js';
import { outboxChannel } from './append.js';
import { EventStore } from './event-store.js';
import { EventLogOccurredAtIndex1783000000000, migrate } from './migrations.js';
import { countRepublishable, putBackInOutbox, recordedRuns, runsStillHeld, type RecordedRun, type StreamMark } from './republish.js';

const MINUTE = 60 * 1000;
const meta = { correlationId: 'republish-test' };

describe('putting events back in the outbox', () => {
  const schema = uniqueName('republish');
  let pool: pg.Pool;
  let store: EventStore;
  let now = new Date('2030-01-01T00:00:00Z');
  const at = (minutes: number) => new Date(Date.parse('2030-01-01T00:00:00Z') + minutes * MINUTE);

  beforeAll(async () => {
    await migrate({ url: testDatabaseUrl, schema });
    pool = createPool({ url: testDatabaseUrl, schema, max: 1 }); // one connection: the statistics of what it read are its own to flush
    store = new EventStore({ pool, schema, clock: () => now });
  });
  afterAll(async () => {
    await pool.end();
    await dropSchema(schema);
  });

  beforeEach(async () => {
    await pool.query('TRUNCATE outbox, events, republish_runs');
  });

  /** Appends one event of `type` to `stream` at `minute`, and returns its position. */
  const appendAt = async (minute: number, stream: string, type: string): Promise<string> => {
    now = at(minute);
    const [event] = await store.append(stream, 'any', [{ type, data: {} }], meta);
    return String(event!.position);
  };
  const outbox = async () => (await pool.query<{ position: string }>('SELECT position::text AS position FROM outbox ORDER BY position')).rows.map((r) => r.position);

  it('puts back every event of [since, until) once, in batches of the size asked, leaving those already waiting and those outside the window', async () => {
    const before = await appendAt(0, 'job-1', 'JobEnqueued');
    const inside = [
      await appendAt(10, 'job-1', 'JobClaimed'),
      await appendAt(11, 'job-2', 'JobEnqueued'),
      await appendAt(12, 'product-a', 'ProductRegistered'),
      await appendAt(13, 'job-2', 'JobClaimed'),
      await appendAt(14, 'job-1', 'JobFinished'),
    ];
    const after = await appendAt(20, 'job-3', 'JobEnqueued');
    // The relay published them all but one, which still waits.
    await pool.query('DELETE FROM outbox WHERE position <> $1', [inside[3]]);

    const result = await putBackInOutbox(pool, { schema, window: { since: at(10), until: at(20) }, batchSize: 2 });

    expect(await outbox()).toEqual(inside);
    expect(await outbox()).not.toContain(before);
    expect(await outbox()).not.toContain(after);
    expect(result).toMatchObject({ putBack: 4, alreadyWaiting: 1, batches: 3 });
    expect(result.tallies).toEqual([
      { streamType: 'job', type: 'JobClaimed', putBack: 1, alreadyWaiting: 1 },
      { streamType: 'job', type: 'JobEnqueued', putBack: 1, alreadyWaiting: 0 },
      { streamType: 'job', type: 'JobFinished', putBack: 1, alreadyWaiting: 0 },
      { streamType: 'product', type: 'ProductRegistered', putBack: 1, alreadyWaiting: 0 },
    ]);
    // Run again while they wait: nothing is added twice.
    const again = await putBackInOutbox(pool, { schema, window: { since: at(10), until: at(20) }, batchSize: 2 });
    expect(again).toMatchObject({ putBack: 0, alreadyWaiting: 5 });
    expect(await outbox()).toEqual(inside);
  });

  it('without an end, takes the events up to the last one the log held when it began', async () => {
    const first = await appendAt(5, 'job-1', 'JobEnqueued');
    const second = await appendAt(6, 'job-1', 'JobClaimed');
    await pool.query('DELETE FROM outbox');
    const result = await putBackInOutbox(pool, { schema, window: { since: at(5) } });
    expect(result).toMatchObject({ putBack: 2, alreadyWaiting: 0, batches: 1, upTo: second });
    expect(await outbox()).toEqual([first, second]);
  });

  it('a dry run counts what a run would put back, per stream type and event type, and writes nothing', async () => {
    await appendAt(0, 'job-1', 'JobEnqueued');
    await appendAt(10, 'job-1', 'JobClaimed');
    const waiting = await appendAt(11, 'job-2', 'JobClaimed');
    await appendAt(12, 'product-a', 'ProductRegistered');
    await pool.query('DELETE FROM outbox WHERE position <> $1', [waiting]);

    const counted = await countRepublishable(pool, { schema, window: { since: at(10) } });

    expect(await outbox()).toEqual([waiting]);
    expect(counted.tallies).toEqual([
      { streamType: 'job', type: 'JobClaimed', putBack: 1, alreadyWaiting: 1 },
      { streamType: 'product', type: 'ProductRegistered', putBack: 1, alreadyWaiting: 0 },
    ]);
    const run = await putBackInOutbox(pool, { schema, window: { since: at(10) } });
    expect(run.tallies).toEqual(counted.tallies);
  });

  it('finds where a window starts without reading the log before it, even with times out of order in the log', async () => {
    // A long log: 50,000 events a second apart from minute 0, each a few seconds out of order.
    await pool.query(
      `INSERT INTO events (event_id, stream_id, stream_version, type, schema_version, data, metadata, occurred_at)
       SELECT gen_random_uuid(), 'job-' || g, 1, 'JobEnqueued', 1, '{"prompt": "${'x'.repeat(100)}"}', '{}',
              $1::timestamptz + make_interval(secs => g - 3 * (g % 2))
         FROM generate_series(1, 50000) AS g ORDER BY g`,
      [at(0)],
    );
    await pool.query('DELETE FROM outbox');
    await pool.query('ANALYZE events');
    // What autovacuum does after each range of pages is filled (autosummarize), at once.
    await pool.query(`SELECT brin_summarize_new_values(to_regclass('events_occurred_at')) WHERE to_regclass('events_occurred_at') IS NOT NULL`);
    const pages = Number((await pool.query(`SELECT pg_relation_size('events') / current_setting('block_size')::int AS n`)).rows[0].n);
    // Pages of the log read so far, by any statement (statistics flushed by the connection that read them: the pool has one).
    const pagesRead = async () => {
      await pool.query('SELECT pg_stat_force_next_flush()');
      return Number((await pool.query(`SELECT heap_blks_read + heap_blks_hit AS n FROM pg_statio_user_tables WHERE relid = 'events'::regclass`)).rows[0].n);
    };
    // The last 500 events, and one before them positioned among them (committed late) but out of the window.
    const since = new Date(at(0).getTime() + 49_501 * 1000);
    const before = await pagesRead();
    const result = await putBackInOutbox(pool, { schema, window: { since } });
    const read = (await pagesRead()) - before;
    expect(result.putBack).toBe(Number((await pool.query('SELECT count(*) FROM events WHERE occurred_at >= $1', [since])).rows[0].count));
    expect(await outbox()).toEqual((await pool.query<{ p: string }>('SELECT position::text AS p FROM events WHERE occurred_at >= $1 ORDER BY position', [since])).rows.map((r) => r.p));
    expect(pages).toBeGreaterThan(500);
    expect(read).toBeLessThan(pages / 4);
  });

  it('the index it searches is a BRIN index built outside a transaction; a build left invalid (a CONCURRENTLY build that failed) is built again', async () => {
    const index = async () =>
      (await pool.query<{ method: string; valid: boolean }>(
        `SELECT a.amname AS method, i.indisvalid AS valid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam WHERE i.indexrelid = to_regclass('events_occurred_at')`,
      )).rows;
    expect(await index()).toEqual([{ method: 'brin', valid: true }]);
    expect(new EventLogOccurredAtIndex1783000000000().transaction).toBe(false);
    await pool.query(`UPDATE pg_index SET indisvalid = false WHERE indexrelid = to_regclass('events_occurred_at')`);
    await pool.query(`DELETE FROM migrations WHERE name = 'EventLogOccurredAtIndex1783000000000'`);
    await migrate({ url: testDatabaseUrl, schema });
    expect(await index()).toEqual([{ method: 'brin', valid: true }]);
  });

  it('a run that failed part-way, run again, puts back only what it had not: each batch records how far the run got, in its own statement', async () => {
    const positions = [];
    for (let minute = 10; minute < 15; minute++) positions.push(await appendAt(minute, `job-${minute}`, 'JobEnqueued'));
    await pool.query('DELETE FROM outbox');
    const stream: StreamMark = { created: '2030-01-01T00:00:00Z', nextSeq: 41, firstSeq: 1, dedupeSafe: true };
    // The database goes away before the second batch: the first stays committed, with its run's progress.
    let batches = 0;
    const failing = {
      query: (text: string, values?: unknown[]) => {
        if (text.includes('INSERT INTO outbox') && ++batches === 2) return Promise.reject(new Error('Connection terminated unexpectedly'));
        return pool.query(text, values);
      },
    } as unknown as pg.Pool;
    await expect(putBackInOutbox(failing, { schema, window: { since: at(10) }, batchSize: 2, stream })).rejects.toThrow('Connection terminated');
    expect(await outbox()).toEqual(positions.slice(0, 2));
    const [first] = await recordedRuns(pool);
    expect(first).toMatchObject({ reached: positions[1], since: at(10), until: null, stream: { created: stream.created, nextSeq: 41, dedupeSafe: true } });
    // The relay published them; the stream still holds all it took since (its first sequence is not past 41).
    await pool.query('DELETE FROM outbox');
    const held = runsStillHeld(await recordedRuns(pool), { ...stream, nextSeq: 43 });
    expect(held).toEqual([first!.id]);

    const counted = await countRepublishable(pool, { schema, window: { since: at(10) }, leaveOut: held });
    expect(counted).toMatchObject({ putBack: 3, leftOut: 2 });
    const again = await putBackInOutbox(pool, { schema, window: { since: at(10) }, leaveOut: held, stream });
    expect(again).toMatchObject({ putBack: 3, alreadyWaiting: 0, leftOut: 2 });
    expect(await outbox()).toEqual(positions.slice(2));

    // A third run while those wait: they count as waiting, the first run's two as left out.
    const third = await putBackInOutbox(pool, { schema, window: { since: at(10) }, leaveOut: runsStillHeld(await recordedRuns(pool), { ...stream, nextSeq: 43 }), stream: { ...stream, nextSeq: 43 } });
    expect(third).toMatchObject({ putBack: 0, alreadyWaiting: 3, leftOut: 2 });
    // Purged since the runs began: the stream holds none of theirs for sure, and all five go back.
    await pool.query('DELETE FROM outbox');
    const afterPurge = runsStillHeld(await recordedRuns(pool), { ...stream, nextSeq: 46, firstSeq: 44 });
    expect(afterPurge).toEqual([]);
    expect(await putBackInOutbox(pool, { schema, window: { since: at(10) }, leaveOut: afterPurge, stream })).toMatchObject({ putBack: 5, leftOut: 0 });
  });

  it('a run that left out an earlier run\'s events did not put them back: once only its own stand, those go back', async () => {
    const positions = [];
    for (let minute = 10; minute < 13; minute++) positions.push(await appendAt(minute, `job-${minute}`, 'JobEnqueued'));
    await pool.query('DELETE FROM outbox');
    const created = '2030-01-01T00:00:00Z';
    await putBackInOutbox(pool, { schema, window: { since: at(10) }, stream: { created, nextSeq: 1, firstSeq: 1, dedupeSafe: true } });
    await pool.query('DELETE FROM outbox'); // published as sequences 1 to 3
    const held = runsStillHeld(await recordedRuns(pool), { created, nextSeq: 4, firstSeq: 1, dedupeSafe: true });
    expect(await putBackInOutbox(pool, { schema, window: { since: at(10) }, leaveOut: held, stream: { created, nextSeq: 4, firstSeq: 1, dedupeSafe: true } })).toMatchObject({ putBack: 0, leftOut: 3 });
    // Purged after the second run began: the first run's messages are gone; the second run stands, but it put none of them back.
    const stands = runsStillHeld(await recordedRuns(pool), { created, nextSeq: 4, firstSeq: 4, dedupeSafe: false });
    expect(stands).toHaveLength(1);
    expect(await putBackInOutbox(pool, { schema, window: { since: at(10) }, leaveOut: stands, stream: { created, nextSeq: 4, firstSeq: 4, dedupeSafe: false } })).toMatchObject({ putBack: 3, leftOut: 0 });
    expect(await outbox()).toEqual(positions);
  });

  it('an earlier run\'s events are left out only while the stream holds everything published since it began', () => {
    const run = (stream: RecordedRun['stream'], reached: string | null = '10'): RecordedRun => ({ id: '1', since: at(0), until: null, reached, startedAt: at(60), stream });
    const created = '2030-01-01T00:00:00Z';
    const same = { created, nextSeq: 100, dedupeSafe: true };
    expect(runsStillHeld([run(same)], { created, nextSeq: 150, firstSeq: 1, dedupeSafe: true })).toEqual(['1']);
    expect(runsStillHeld([run(same)], { created, nextSeq: 150, firstSeq: 100, dedupeSafe: true })).toEqual(['1']);
    // Purged (or messages dropped for size) after it began: what it published may be gone.
    expect(runsStillHeld([run(same)], { created, nextSeq: 150, firstSeq: 101, dedupeSafe: true })).toEqual([]);
    // Deleted and made again, or gone now, or not known.
    expect(runsStillHeld([run(same)], { created: '2030-01-01T02:00:00Z', nextSeq: 5, firstSeq: 1, dedupeSafe: true })).toEqual([]);
    expect(runsStillHeld([run(same)], null)).toEqual([]);
    // A run that found no stream: the one made after it began holds all, if it never dropped a message.
    expect(runsStillHeld([run(null)], { created: '2030-01-01T01:00:05Z', nextSeq: 9, firstSeq: 1, dedupeSafe: true })).toEqual(['1']);
    expect(runsStillHeld([run(null)], { created: '2030-01-01T01:00:05Z', nextSeq: 9, firstSeq: 4, dedupeSafe: true })).toEqual([]);
    expect(runsStillHeld([run(null)], { created: '2030-01-01T00:59:00Z', nextSeq: 9, firstSeq: 1, dedupeSafe: true })).toEqual([]);
    // A run begun while the stream could drop the relay's publishes as copies of messages it no longer held (just purged).
    expect(runsStillHeld([run({ ...same, dedupeSafe: false })], { created, nextSeq: 150, firstSeq: 1, dedupeSafe: true })).toEqual([]);
    // A run that put nothing back.
    expect(runsStillHeld([run(same, null)], { created, nextSeq: 150, firstSeq: 1, dedupeSafe: true })).toEqual([]);
  });

  it("a new log's index is built at once: its migrations do not wait for an older transaction of the database to end", async () => {
    const other = uniqueName('republish_fresh');
    const older = new pg.Client({ connectionString: testDatabaseUrl });
    await older.connect();
    try {
      // A transaction with a snapshot, as a backup's or another service's long read: CREATE INDEX
      // CONCURRENTLY would wait for it to end, which the server does after 10 s (so that a migration
      // that waits fails this test rather than hanging it).
      older.on('error', () => undefined);
      await older.query(`SET idle_in_transaction_session_timeout = '10s'`);
      await older.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
      await older.query('SELECT 1');
      await migrate({ url: testDatabaseUrl, schema: other });
      // Still open: the migrations did not wait for it.
      const { rows } = await older.query(`SELECT to_regclass($1) IS NOT NULL AS built`, [`${other}.events_occurred_at`]);
      expect(rows[0].built).toBe(true);
    } finally {
      await older.query('ROLLBACK').catch(() => undefined);
      await older.end();
      await dropSchema(other);
    }
  }, 20_000);

  it('an empty log puts back nothing', async () => {
    expect(await putBackInOutbox(pool, { schema, window: { since: at(0) } })).toMatchObject({ putBack: 0, alreadyWaiting: 0, batches: 0, upTo: null });
    expect(await countRepublishable(pool, { schema, window: { since: at(0) } })).toMatchObject({ putBack: 0, tallies: [] });
  });

  it('wakes the relay of the schema: a notification on its outbox channel after rows were put back', async () => {
    await appendAt(1, 'job-1', 'JobEnqueued');
    await pool.query('DELETE FROM outbox');
    const listener = new pg.Client({ connectionString: testDatabaseUrl });
    await listener.connect();
    try {
      const heard: string[] = [];
      listener.on('notification', (n) => heard.push(n.channel));
      await listener.query(`LISTEN "${outboxChannel(schema)}"`);
      await putBackInOutbox(pool, { schema, window: { since: at(0) } });
      await eventually(() => heard.includes(outboxChannel(schema)), { what: 'the outbox channel notified' });
    } finally {
      await listener.end();
    }
  });
});
