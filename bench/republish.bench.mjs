// Republish on a long log: a job service's log of BENCH_REPUBLISH_EVENTS (1,000,000) events spread
// over the last six days, and what `republish` costs to put back a window of 1,000 of its events
// (and to count them, as a dry run does): at the log's end, and in its middle (with an end). It
// runs putBackInOutbox and countRepublishable, the command's work, in this process, and reports the
// milliseconds each took and the pages of the log they read (pg_statio_user_tables; the figure that
// does not depend on the machine's load): what it costs to find where a window starts in a long log
// (docs/operations.md, "Putting the lost events back: republish").
//
//   npm run bench -- republish          (builds first; or `node bench/republish.bench.mjs` after a build)
//
// The events are inserted in bulk by SQL (their occurred_at a little out of order, as commits of
// concurrent callers are); no relay runs, so what it puts back stays in the outbox. It also times
// the migration that builds the index of occurred_at on that log, as on an upgrade.
import pg from 'pg';
import { countRepublishable, createPool, migrate, putBackInOutbox } from '@gantry/eventstore';
import { benchName, databaseUrl, dropSchema } from './lib.mjs';

const wanted = Number(process.env.BENCH_REPUBLISH_EVENTS ?? 1_000_000);
const tail = 1000;
const schema = `${benchName('republish')}_jobs`;
await migrate({ url: databaseUrl, schema });
const db = new pg.Client({ connectionString: databaseUrl });
await db.connect();
try {
  await db.query(`SET search_path TO ${schema}`);
  const span = 6 * 24 * 60 * 60 * 1000;
  const start = Date.now() - span - 60_000;
  const built = performance.now();
  for (let from = 0; from < wanted; from += 100_000) {
    const to = Math.min(wanted, from + 100_000);
    await db.query(
      `INSERT INTO events (event_id, stream_id, stream_version, type, schema_version, data, metadata, occurred_at, recorded_at)
       SELECT gen_random_uuid(), 'job-' || (g / 7), (g % 7) + 1, 'JobEnqueued', 1,
              json_build_object('jobId', 'job-' || (g / 7), 'prompt', repeat('x', 200)), '{"correlationId":"bench"}',
              t, t
         FROM generate_series($1::int, $2::int - 1) AS g,
              LATERAL (SELECT to_timestamp(($3::float8 + g * $4::float8 - random() * 2000) / 1000) AS t) AS s
        ORDER BY g`,
      [from, to, start, span / wanted],
    );
  }
  await db.query('ANALYZE events');
  console.log(`log of ${wanted} events built in ${Math.round((performance.now() - built) / 1000)} s`);
  // The upgrade of a log that had no index of its times: the migration builds it (CONCURRENTLY).
  await db.query(`DROP INDEX IF EXISTS events_occurred_at`);
  await db.query(`DELETE FROM migrations WHERE name = 'EventLogOccurredAtIndex1783000000000'`);
  const indexed = performance.now();
  await migrate({ url: databaseUrl, schema });
  console.log(`the migration built the index of occurred_at on it in ${Math.round(performance.now() - indexed)} ms`);
  // One connection: the statistics of what it read are its own to flush.
  const pool = createPool({ url: databaseUrl, schema, max: 1 });
  const pagesRead = async () => {
    await pool.query('SELECT pg_stat_force_next_flush()');
    const { rows } = await pool.query(`SELECT heap_blks_read + heap_blks_hit AS n FROM pg_statio_user_tables WHERE relid = 'events'::regclass`);
    return Number(rows[0].n);
  };
  const timeAt = async (offset) => (await db.query(`SELECT occurred_at FROM events ORDER BY position DESC OFFSET $1 LIMIT 1`, [offset])).rows[0].occurred_at;
  const windows = { end: { since: await timeAt(tail - 1) }, middle: { since: await timeAt(wanted / 2 + tail - 1), until: await timeAt(wanted / 2) } };
  try {
    for (const [label, window] of Object.entries(windows)) {
      const rounds = [];
      for (let round = 0; round < 3; round++) {
        const measured = {};
        for (const [what, work] of [['count', countRepublishable], ['putBack', putBackInOutbox]]) {
          await db.query('TRUNCATE outbox');
          const pages = await pagesRead();
          const t0 = performance.now();
          const result = await work(pool, { schema, window });
          measured[what] = { ms: Math.round(performance.now() - t0), pages: (await pagesRead()) - pages, events: result.putBack };
        }
        rounds.push(measured);
      }
      console.log(`window of ${rounds[0].putBack.events} events at the log's ${label} (3 rounds):`, JSON.stringify(rounds));
    }
  } finally {
    await pool.end();
  }
} finally {
  await db.end();
  await dropSchema(schema);
}
