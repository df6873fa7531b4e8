// Replay: a log of BENCH_REPLAY_EVENTS (1,000,000) job events; the projections rebuilt from it
// (events/s), the job service restarted on it (spawn -> /ready 200), and the projections rebuilt
// again while 4 callers enqueue jobs through the running service (what they got done meanwhile,
// how long the slowest waited, and whether the rebuilt view holds their jobs).
//
//   npm run bench -- replay             (builds first; or `node bench/replay.bench.mjs` after a build)
//
// The log is made of real events: one job is taken through its whole life by the running service
// (enqueue, claim, start, the story log, the push report, finish), and its 8 events are copied for new job ids until
// the log holds the wanted number (inserted in bulk, in the order of 16 jobs running at once).
import pg from 'pg';
import {
  claimJob,
  enqueueJob,
  finishJob,
  logCommit,
  logImplementation,
  logTestResult,
  reportPush,
  startJob,
} from '@gantry/contracts';
import { createPool, EventStore, rebuildProjections } from '@gantry/eventstore';
import { Bus, CommandClient } from '@gantry/messaging';
import { connectTestNats, deleteStreams, startApp } from '@gantry/testing';
import { jobServiceProjections } from '../apps/job-service/dist/infrastructure/projections.js';
import { benchName, copyJobEvents, databaseUrl, dropSchema, natsUrl, registerBenchProduct, stats, writeResults } from './lib.mjs';

const wanted = Number(process.env.BENCH_REPLAY_EVENTS ?? 1_000_000);
const name = benchName('replay');
const schema = `${name}_jobs`;
const naming = { subjectRoot: name, streamPrefix: `${name.toUpperCase()}_` };
const sha = (c) => c.repeat(40).slice(0, 40);

async function startJobService() {
  const started = performance.now();
  const child = await startApp('job-service', { schema, naming, readyTimeoutMs: 120_000 });
  return { child, readyMs: Math.round(performance.now() - started) };
}

/**
 * Rebuilds the job service's projections (from this process, as POST /projections/rebuild would)
 * while 4 callers enqueue jobs through the service; checks that the rebuilt view holds every job
 * enqueued before and during it.
 */
async function rebuildUnderLoad(client, jobsBefore) {
  const enqueue = (i) => client.request(enqueueJob, { kind: 'TASK_IMPLEMENTATION', productId: 'bench', taskId: `L-${i}`, prompt: 'x', idempotencyKey: `bench/replay:load:${i}` });
  let next = 0;
  const alone = [];
  for (let i = 0; i < 50; i++) {
    const t0 = performance.now();
    await enqueue(next++);
    alone.push(performance.now() - t0);
  }
  const latencies = [];
  let rebuilding = true;
  const callers = Array.from({ length: 4 }, async () => {
    while (rebuilding) {
      const t0 = performance.now();
      await enqueue(next++);
      latencies.push(performance.now() - t0);
    }
  });
  const pool = createPool({ url: databaseUrl, schema, max: 4 });
  const store = new EventStore({ pool, schema, inlineProjections: jobServiceProjections });
  const r0 = performance.now();
  try {
    await rebuildProjections(store, jobServiceProjections);
  } finally {
    rebuilding = false;
    await pool.end();
  }
  const rebuildSeconds = +((performance.now() - r0) / 1000).toFixed(1);
  await Promise.all(callers);
  const { rows: [{ n: jobs }] } = await db.query(`SELECT count(*)::int AS n FROM jobs`);
  if (jobs !== jobsBefore + next) throw new Error(`the view rebuilt during commands has ${jobs} jobs, expected ${jobsBefore + next}`);
  const { p50, p99, max } = stats(latencies);
  return { rebuildSeconds, commands: latencies.length, p50: +p50, p99: +p99, max: +max, aloneP50: +stats(alone).p50 };
}

const db = new pg.Pool({ connectionString: databaseUrl, max: 2, options: `-c search_path=${schema}` });
let bus;
let service;
try {
  // One real job, start to finish.
  service = await startJobService();
  bus = await Bus.connect({ servers: natsUrl, naming, name: 'bench-replay' });
  const client = new CommandClient(bus);
  await registerBenchProduct(client, { repository: 'acme/bench', cloneUrl: 'https://github.com/acme/bench.git', idempotencyKey: `bench/register:${name}` });
  const { jobId } = await client.request(enqueueJob, { kind: 'TASK_IMPLEMENTATION', productId: 'bench', taskId: 'T-1', prompt: 'x', idempotencyKey: 'bench/replay:1' });
  const claimed = await client.request(claimJob, { runnerId: 'bench-runner', kinds: ['TASK_IMPLEMENTATION'], jobId, idempotencyKey: 'bench/replay:claim' });
  const lease = { jobId, runnerId: 'bench-runner', leaseToken: claimed.job.leaseToken };
  await client.request(startJob, { ...lease, branch: 'feat/bench', baseSha: sha('b'), idempotencyKey: 'bench/replay:start' });
  await client.request(logImplementation, { ...lease, summary: 'start: task, branch, plan', plan: 'plan', idempotencyKey: 'bench/replay:impl' });
  await client.request(logCommit, { ...lease, commitSha: sha('c'), message: 'feat: x', summary: '1 file', idempotencyKey: 'bench/replay:commit' });
  await client.request(logTestResult, { ...lease, status: 'PASSED', summary: 'green', idempotencyKey: 'bench/replay:test' });
  const facts = { verifyResult: 'ALIGNED', newCommit: true, netDiff: { filesChanged: 1, insertions: 3, deletions: 0 }, workAlreadyOnTarget: false, diffIdenticalToMergedBranch: false, failure: null, cancelled: false, headSha: sha('c') };
  // As the runner does: a DONE on a new commit needs its push reported first.
  await client.request(reportPush, { ...lease, branch: 'feat/bench', headSha: sha('c'), pushed: true, idempotencyKey: 'bench/replay:push' });
  await client.request(finishJob, { ...lease, facts, idempotencyKey: 'bench/replay:finish' });
  await service.child.kill('SIGTERM');
  service = null;
  const { rows: [{ n: perJob }] } = await db.query(`SELECT count(*)::int AS n FROM events WHERE stream_id = $1`, [jobId]);
  // For comparison: a restart on this log of one job's events.
  service = await startJobService();
  const restartSmallLogMs = service.readyMs;
  console.log(`restart to /ready, ${perJob} events: ${restartSmallLogMs} ms`);
  await service.child.kill('SIGTERM');
  service = null;

  // Copies of its events for new job ids, 16 jobs interleaved at a time.
  const copies = Math.ceil((wanted - perJob) / perJob);
  const t0 = performance.now();
  await copyJobEvents(db, { jobId, copies, seed: name });
  const { rows: [{ n: events }] } = await db.query(`SELECT count(*)::int AS n FROM events`);
  console.log(`log: ${events.toLocaleString('en')} events (${copies.toLocaleString('en')} jobs copied in ${((performance.now() - t0) / 1000).toFixed(1)} s)`);

  // Rebuild every projection from the log.
  const pool = createPool({ url: databaseUrl, schema, max: 4 });
  const store = new EventStore({ pool, schema, inlineProjections: jobServiceProjections });
  const r0 = performance.now();
  const replayed = await rebuildProjections(store, jobServiceProjections);
  const rebuildSeconds = (performance.now() - r0) / 1000;
  await pool.end();
  const { rows: [{ n: done }] } = await db.query(`SELECT count(*)::int AS n FROM jobs WHERE status = 'DONE'`);
  if (done !== copies + 1) throw new Error(`the rebuilt view has ${done} DONE jobs, expected ${copies + 1}`);
  const rebuildEventsPerSecond = Math.round(replayed / rebuildSeconds);
  console.log(`rebuild: ${replayed.toLocaleString('en')} events in ${rebuildSeconds.toFixed(1)} s = ${rebuildEventsPerSecond.toLocaleString('en')} events/s`);

  // Restart on that log.
  service = await startJobService();
  console.log(`restart to /ready, ${events.toLocaleString('en')} events: ${service.readyMs} ms`);

  // Rebuild again while commands go on: 4 callers enqueue jobs through the service until it ends.
  const during = await rebuildUnderLoad(client, copies + 1);
  console.log(
    `rebuild while 4 callers enqueue: ${during.rebuildSeconds} s, ${during.commands} jobs enqueued meanwhile, ` +
      `enqueue p50 / p99 / max ${during.p50} / ${during.p99} / ${during.max} ms (alone: p50 ${during.aloneP50} ms)`,
  );
  writeResults('replay', {
    events,
    rebuildSeconds: +rebuildSeconds.toFixed(2),
    rebuildEventsPerSecond,
    restartToReadyMs: service.readyMs,
    restartToReadyWithSmallLogMs: restartSmallLogMs,
    rebuildUnderLoad: during,
  });
} finally {
  await bus?.close();
  await service?.child.kill('SIGTERM');
  await db.end();
  const nc = await connectTestNats();
  await deleteStreams(nc, naming.streamPrefix);
  await nc.close();
  await dropSchema(schema);
}
