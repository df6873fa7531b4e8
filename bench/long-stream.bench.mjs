// Commands on one stream as it grows: the CPU a command costs this process after 200, 400 … 1,000
// events on its stream. A decider's state and its view's row are folded from the stream's events; a
// command folds only the events since the last command's fold (docs/architecture.md, "A fold
// starts where the last one ended"), so the cost stays flat as the stream grows. The stand-in
// aggregate keeps a list that grows with its stream, as a pull request's checks or a sprint run's
// tasks do.
//
//   node bench/long-stream.bench.mjs        (after a build; BENCH_STREAM_EVENTS, default 1000)
import { createPool, EventStore, handleWithDecider, migrate, stateProjection } from '@gantry/eventstore';
import { benchName, databaseUrl, dropSchema } from './lib.mjs';

const schema = benchName('long_stream');
const events = Number(process.env.BENCH_STREAM_EVENTS ?? 1000);
const stretch = Math.max(1, Math.floor(events / 5));

const evolve = (state, event) => ({ total: state.total + event.data.by, entries: [...state.entries, { by: event.data.by, note: event.data.note }] });
const decider = {
  initialState: { total: 0, entries: [] },
  decide: (command) => [{ type: 'Added', data: { by: command.by, note: 'an entry of about forty characters here' } }],
  evolve,
};
const view = stateProjection({
  name: 'totals',
  tables: ['totals'],
  types: ['Added'],
  initialState: decider.initialState,
  evolve,
  async load(sql, ids) {
    const { rows } = await sql.query('SELECT id, total FROM totals WHERE id = ANY($1)', [ids]);
    return new Map(rows.map((r) => [r.id, { total: r.total, entries: [] }]));
  },
  async save(sql, rows) {
    await sql.query(
      `INSERT INTO totals (id, total) SELECT r.id, r.total FROM jsonb_to_recordset($1::jsonb) AS r(id text, total int)
       ON CONFLICT (id) DO UPDATE SET total = EXCLUDED.total`,
      [JSON.stringify(rows.map((r) => ({ id: r.streamId, total: r.state.total })))],
    );
  },
});

await migrate({ url: databaseUrl, schema });
const pool = createPool({ url: databaseUrl, schema, max: 2 });
try {
  await pool.query('CREATE TABLE totals (id text PRIMARY KEY, total int NOT NULL)');
  const store = new EventStore({ pool, schema, inlineProjections: [view] });
  const figures = [];
  let from = process.cpuUsage();
  let started = performance.now();
  for (let i = 1; i <= events; i++) {
    await handleWithDecider(store, { decider, streamId: 'stream-1', command: { by: 1 }, metadata: { correlationId: 'bench' }, reply: (d) => d.after.total });
    if (i % stretch === 0) {
      const cpu = process.cpuUsage(from);
      figures.push(`${String(i).padStart(5)} events: ${((cpu.user + cpu.system) / 1000 / stretch).toFixed(3)} ms CPU, ${((performance.now() - started) / stretch).toFixed(2)} ms a command`);
      from = process.cpuUsage();
      started = performance.now();
    }
  }
  console.log(`one stream, commands one after another (the last ${stretch} up to each length):`);
  for (const line of figures) console.log(`  ${line}`);
} finally {
  await pool.end();
  await dropSchema(schema);
}
