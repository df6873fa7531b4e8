// A job's whole lifecycle through the real job service, side by side with BullMQ on a durable Redis.
//
//   npm run bench -- lifecycle          (builds first; or `node bench/lifecycle.bench.mjs` after a build)
//
// Gantry (A): the job service as its own process; BENCH_JOBS TASK_IMPLEMENTATION jobs enqueued by 16
// concurrent callers, then 16 workers each loop claim -> start_job -> log_implementation ->
// log_commit -> log_test_result -> report_push -> finish_job (DONE) over the NATS command path until
// the queue is empty (a DONE on a new commit needs its push reported first, as the runner does). BullMQ (B): a redis-server this bench starts on a spare port with `appendonly yes`,
// `appendfsync always`; the same number of jobs added by 16 concurrent callers, a Worker with
// concurrency 16 doing updateProgress + 2 job.log and completing. Rounds are interleaved A/B/A/B in
// one run (the machine is shared and noisy: compare the ratio, not the absolute figures). Also: raw
// PostgreSQL single-row commits/s with 1 and 8 clients, the ceiling of every PostgreSQL figure here,
// and the CPU a job costs each part of the machine (job service, PostgreSQL, NATS server, the
// callers here; Redis and the callers for BullMQ), read from /proc around the timed loop; and, from the
// job services' /metrics, the time a command spends inside the service (arrival to reply) and how
// long its write messages wait for PostgreSQL.
//
// Settings: BENCH_JOBS (600), BENCH_ROUNDS (2 per side), BENCH_WORKERS (16), BENCH_REPLICAS (1 job service), BENCH_CPU_PROF=<dir>
// (the job service writes a --cpu-prof profile there), BENCH_WAITS=1 (samples the job service's
// connections in pg_stat_activity every 20 ms), BENCH_ENV (extra job-service environment, e.g.
// "GANTRY_GROUP_COMMIT=4x32"), BENCH_LOG_EVENTS (0: the rounds run on a log that already holds about
// that many events of finished jobs, copies of a warm-up job's published long ago, and its views
// those jobs, as a service's do after months of work), BENCH_LABEL (the results key, default lifecycle),
// BENCH_STRACE=<file> (the job service's socket writes during each Gantry round's timed loop, traced
// with `strace -f -yy` into <file>.<round>, counted per job by connection: PostgreSQL by
// application_name — the pool, the relay — and NATS; a traced service is slow, so its timings mean
// nothing, only the counts; BENCH_STRACE_BYTES=<n> keeps each write's first n bytes in the file, to
// tell the statements apart). Results: bench/results/<date>.json and .md.
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import pg from 'pg';
import { Queue, Worker } from 'bullmq';
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
import { connectTestNats, deleteStreams, freePort, startApp } from '@gantry/testing';
import { jobServiceProjections } from '../apps/job-service/dist/infrastructure/projections.js';
import { benchName, copyJobEvents, databaseUrl, dropSchema, natsUrl, rawCommits, registerBenchProduct, stats, writeResults } from './lib.mjs';

const jobs = Number(process.env.BENCH_JOBS ?? 600);
const rounds = Number(process.env.BENCH_ROUNDS ?? 2);
const workers = Number(process.env.BENCH_WORKERS ?? 16);
const replicas = Number(process.env.BENCH_REPLICAS ?? 1);
const logEvents = Number(process.env.BENCH_LOG_EVENTS ?? 0);
const callers = 16;
const extraEnv = Object.fromEntries((process.env.BENCH_ENV ?? '').split(/\s+/).filter(Boolean).map((kv) => kv.split(/=(.*)/s).slice(0, 2)));
const name = benchName('lifecycle');
const naming = { subjectRoot: name, streamPrefix: `${name.toUpperCase()}_` };
const scratch = mkdtempSync(join(tmpdir(), 'gantry-bench-lifecycle-'));
const CLK_TCK = 100;

const sha = (c) => c.repeat(40).slice(0, 40);
const doneFacts = {
  verifyResult: 'ALIGNED',
  newCommit: true,
  netDiff: { filesChanged: 1, insertions: 3, deletions: 0 },
  workAlreadyOnTarget: false,
  diffIdenticalToMergedBranch: false,
  failure: null,
  cancelled: false,
  headSha: sha('c'),
};

/** CPU seconds (user + system) a process has used so far. */
function cpuSeconds(pid) {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(fields[11]) + Number(fields[12])) / CLK_TCK;
}

/** System calls that read or write (sockets included) the processes `pids` have made so far (/proc/<pid>/io). */
function readWriteCalls(pids) {
  let calls = 0;
  for (const pid of pids) {
    const io = readFileSync(`/proc/${pid}/io`, 'utf8');
    calls += Number(/^syscr: (\d+)/m.exec(io)[1]) + Number(/^syscw: (\d+)/m.exec(io)[1]);
  }
  return calls;
}

/**
 * CPU seconds used so far by each part of the system on this machine: the job services, the
 * PostgreSQL processes that work for them (their pools' and their relays' connections, and the WAL
 * writer, background writer and checkpointer; not autovacuum), the NATS server, and this process (the callers). Read from /proc; a
 * process that ended in between is left out of both readings.
 */
async function cpuByPart(servicePids) {
  const { rows } = await db.query(
    `SELECT pid FROM pg_stat_activity WHERE application_name IN ($1, $2) OR backend_type IN ('walwriter', 'background writer', 'checkpointer')`,
    [`job-service:${schema}`, `gantry-relay-${schema}`],
  );
  const pgPids = new Set(rows.map((r) => r.pid));
  const parts = { jobService: 0, postgres: 0, nats: 0, bench: 0 };
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let stat;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
    } catch {
      continue;
    }
    const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const seconds = (Number(fields[11]) + Number(fields[12])) / CLK_TCK;
    const pid = Number(entry);
    if (servicePids.includes(pid)) parts.jobService += seconds;
    else if (pid === process.pid) parts.bench += seconds;
    else if (comm === 'postgres' && pgPids.has(pid)) parts.postgres += seconds;
    else if (comm === 'nats-server') parts.nats += seconds;
  }
  return parts;
}

/**
 * What the job services' /metrics say so far: per command (answered ok) the seconds spent and the
 * answers given, and the write messages' commands and seconds (summed over the replicas).
 */
async function serviceMetrics(services) {
  const totals = { commands: {}, batches: { count: 0, seconds: 0, commands: 0 } };
  for (const s of services) {
    const text = await (await fetch(`${s.url}/metrics`)).text();
    for (const [, kind, command, value] of text.matchAll(/^gantry_command_duration_seconds_(sum|count)\{command="[^".]+\.([^"]+)",outcome="ok"\} (\S+)$/gm)) {
      const c = (totals.commands[command] ??= { sum: 0, count: 0 });
      c[kind] += Number(value);
    }
    const one = (name) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1] ?? 0);
    totals.batches.count += one('gantry_write_batch_duration_seconds_count');
    totals.batches.seconds += one('gantry_write_batch_duration_seconds_sum');
    totals.batches.commands += one('gantry_write_batch_commands_sum');
  }
  return totals;
}

/** Milliseconds per command answered between two readings of serviceMetrics, by command; and per write message. */
function serviceTimes(before, after) {
  const perCommand = {};
  for (const [command, a] of Object.entries(after.commands)) {
    const b = before.commands[command] ?? { sum: 0, count: 0 };
    if (a.count > b.count) perCommand[command] = +(((a.sum - b.sum) * 1000) / (a.count - b.count)).toFixed(2);
  }
  const messages = after.batches.count - before.batches.count;
  return {
    serviceMsPerCommand: perCommand,
    writeMessageMs: messages > 0 ? +(((after.batches.seconds - before.batches.seconds) * 1000) / messages).toFixed(2) : null,
    commandsPerWriteMessage: messages > 0 ? +((after.batches.commands - before.batches.commands) / messages).toFixed(2) : null,
  };
}

/** Sizes of the bursts the times fall into: times less than 2 ms after the one before belong to its burst. */
function burstsOf(times) {
  const sorted = [...times].sort((a, b) => a - b);
  const sizes = [];
  sorted.forEach((t, i) => {
    if (i > 0 && t - sorted[i - 1] < 2) sizes[sizes.length - 1]++;
    else sizes.push(1);
  });
  return sizes;
}

/** Runs `count` operations over `concurrency` loops; returns ops/s. */
async function spread(count, concurrency, op) {
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      for (let i = next++; i < count; i = next++) await op(i);
    }),
  );
  return count / ((performance.now() - t0) / 1000);
}

// ---- Gantry ---------------------------------------------------------------------------------
const processes = [];
const schema = `${name}_jobs`;
const db = new pg.Pool({ connectionString: databaseUrl, max: 2 });
let bus;

async function startJobService() {
  const nodeArgs = process.env.BENCH_CPU_PROF ? ['--cpu-prof', `--cpu-prof-dir=${resolve(process.env.BENCH_CPU_PROF)}`] : [];
  const child = await startApp('job-service', { schema, naming, env: extraEnv, nodeArgs, readyTimeoutMs: 60_000 });
  processes.push(child);
  return child;
}

/** Samples what the job service's connections wait on, while `until` is pending. */
async function sampleWaits(until) {
  const counts = {};
  let samples = 0;
  let done = false;
  until.finally(() => (done = true));
  while (!done) {
    const { rows } = await db.query(
      `SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU') AS wait, state FROM pg_stat_activity WHERE application_name = $1 AND backend_type = 'client backend' AND pid <> pg_backend_pid()`,
      [`job-service:${schema}`],
    );
    for (const r of rows) {
      const k = `${r.state} / ${r.wait}`;
      counts[k] = (counts[k] ?? 0) + 1;
    }
    samples++;
    await new Promise((r) => setTimeout(r, 20));
  }
  return { samples, connections: Object.fromEntries(Object.entries(counts).sort((a, b) => b[1] - a[1]).map(([k, v]) => [k, +(v / samples).toFixed(2)])) };
}

async function gantryRound(client, services, round) {
  const product = 'bench';
  const servicePids = services.map((s) => s.process.pid);
  const enqueueParts0 = await cpuByPart(servicePids);
  const enqueuePerSecond = await spread(jobs, callers, (i) =>
    client.request(enqueueJob, { kind: 'TASK_IMPLEMENTATION', productId: product, taskId: `T-${round}-${i}`, prompt: 'x', idempotencyKey: `bench/enqueue:${round}-${i}` }),
  );
  const { rows: [{ p: startPosition }] } = await db.query(`SELECT coalesce(max(position), 0) AS p FROM ${schema}.events`);
  const claims = [];
  const claimsSentAt = [];
  let done = 0;
  const cpuOf = () => services.reduce((sum, s) => sum + cpuSeconds(s.process.pid), 0);
  const enqueueParts1 = await cpuByPart(servicePids);
  // CPU milliseconds per enqueue, by part (the offers that follow each enqueue included, as far as they kept up).
  const cpuMsPerEnqueue = Object.fromEntries(Object.keys(enqueueParts1).map((k) => [k, +(((enqueueParts1[k] - enqueueParts0[k]) * 1000) / jobs).toFixed(2)]));
  const trace = process.env.BENCH_STRACE ? await startTrace(`${process.env.BENCH_STRACE}.${round}`, servicePids) : null;
  const cpu0 = cpuOf();
  const calls0 = readWriteCalls(servicePids);
  const parts0 = await cpuByPart(servicePids);
  const metrics0 = await serviceMetrics(services);
  const t0 = performance.now();
  const loop = Promise.all(
    Array.from({ length: workers }, async (_, w) => {
      const runnerId = `bench-runner-${w}`;
      for (;;) {
        const c0 = performance.now();
        const reply = await client.request(claimJob, { runnerId, kinds: ['TASK_IMPLEMENTATION'], idempotencyKey: `bench/claim:${randomUUID()}` });
        claims.push(performance.now() - c0);
        claimsSentAt.push(c0);
        if (!reply.claimed) return;
        const lease = { jobId: reply.job.jobId, runnerId, leaseToken: reply.job.leaseToken };
        const k = `bench/job:${lease.jobId}-${lease.leaseToken}`;
        await client.request(startJob, { ...lease, branch: 'feat/bench', baseSha: sha('b'), idempotencyKey: `${k}-start` });
        await client.request(logImplementation, { ...lease, summary: 'start: task, branch, plan', plan: 'plan', idempotencyKey: `${k}-impl` });
        await client.request(logCommit, { ...lease, commitSha: sha('c'), message: 'feat: x', summary: '1 file', idempotencyKey: `${k}-commit` });
        await client.request(logTestResult, { ...lease, status: 'PASSED', summary: 'green', idempotencyKey: `${k}-test` });
        await client.request(reportPush, { ...lease, branch: 'feat/bench', headSha: sha('c'), pushed: true, idempotencyKey: `${k}-push` });
        const finished = await client.request(finishJob, { ...lease, facts: doneFacts, idempotencyKey: `${k}-finish` });
        if (finished.jobStatus !== 'DONE') throw new Error(`job ${lease.jobId} finished ${finished.jobStatus}`);
        done++;
      }
    }),
  );
  const waits = process.env.BENCH_WAITS === '1' ? sampleWaits(loop) : null;
  await loop;
  const seconds = (performance.now() - t0) / 1000;
  const socketWritesPerJob = trace ? await trace.stop(done) : undefined;
  const cpu = cpuOf() - cpu0;
  const calls = readWriteCalls(servicePids) - calls0;
  const parts1 = await cpuByPart(servicePids);
  const inService = serviceTimes(metrics0, await serviceMetrics(services));
  // CPU milliseconds per job, by part of the system: where a job's cost lands on the machine.
  const cpuMsPerJob = Object.fromEntries(Object.keys(parts1).map((k) => [k, +(((parts1[k] - parts0[k]) * 1000) / done).toFixed(2)]));
  const commands = done * 7 + workers; // + the claim of each worker that found the queue empty
  const { rows: [{ n: commits }] } = await db.query(`SELECT count(DISTINCT tx_id)::int AS n FROM ${schema}.events WHERE position > $1`, [startPosition]);
  const claim = stats(claims);
  const bursts = burstsOf(claimsSentAt);
  return {
    jobsPerSecond: +(done / seconds).toFixed(1),
    enqueuePerSecond: Math.round(enqueuePerSecond),
    claimP50Ms: +claim.p50,
    claimP99Ms: +claim.p99,
    // The workers move in step (the commands of one write message are answered together), so
    // their claims come in bursts: the p99 of a round is about its slowest burst or two.
    claimBursts: bursts.length,
    claimsPerBurst: median(bursts),
    commandsPerCommit: +((done * 7) / commits).toFixed(2),
    cpuMsPerCommand: +((cpu * 1000) / commands).toFixed(3),
    serviceCpuCores: +(cpu / seconds).toFixed(2),
    // Socket reads and writes of the job service per job: round trips to PostgreSQL and NATS, and how
    // well they are batched (system calls are dear on these machines).
    serviceReadWriteCallsPerJob: +(calls / done).toFixed(1),
    cpuMsPerJob,
    cpuMsPerEnqueue,
    // From the services' /metrics: the time a command spent in the service (arrival to reply), and
    // the write messages' round trips, which most of that time is spent waiting for.
    ...inService,
    replicas,
    waits: waits ? await waits : undefined,
    socketWritesPerJob,
  };
}

/**
 * Traces the socket writes of `pids` (BENCH_STRACE) until `stop(jobs)`, which returns them per job by
 * connection. A PostgreSQL connection is named by its application_name (looked up by its client port
 * while the trace runs), NATS by the server's port; anything else is "other".
 */
async function startTrace(file, pids) {
  const tracer = spawn('strace', ['-f', '-yy', '-qq', '-e', 'trace=write,writev,sendto,sendmsg', '-s', process.env.BENCH_STRACE_BYTES ?? '0', '-o', file, ...pids.flatMap((p) => ['-p', String(p)])], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  await new Promise((r) => setTimeout(r, 1500)); // attached to every thread
  const pgPort = new URL(databaseUrl).port || '5432';
  const natsPort = new URL(natsUrl).port || '4222';
  return {
    async stop(jobsDone) {
      const { rows } = await db.query(`SELECT client_port, application_name FROM pg_stat_activity WHERE client_port IS NOT NULL`);
      const byPort = new Map(rows.map((r) => [String(r.client_port), r.application_name]));
      tracer.kill('SIGINT');
      await new Promise((r) => tracer.once('exit', r));
      const counts = {};
      for (const line of readFileSync(file, 'utf8').split('\n')) {
        const m = /(?:write|writev|sendto|sendmsg)\(\d+<TCP(?:v6)?:\[[^\]]*?:(\d+)->[^\]]*?:(\d+)\]>/.exec(line);
        if (!m) continue;
        const [, localPort, remotePort] = m;
        const key = remotePort === pgPort ? `postgres ${byPort.get(localPort) ?? 'closed'}` : remotePort === natsPort ? 'nats' : 'other';
        counts[key] = (counts[key] ?? 0) + 1;
      }
      return Object.fromEntries(Object.entries(counts).sort().map(([k, v]) => [k, +(v / jobsDone).toFixed(2)]));
    },
  };
}

// ---- BullMQ on a durable Redis ----------------------------------------------------------------
let redis;
async function startRedis() {
  const port = await freePort();
  const child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--dir', scratch, '--appendonly', 'yes', '--appendfsync', 'always', '--save', '', '--protected-mode', 'no'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  const deadline = Date.now() + 15_000;
  while (!/Ready to accept connections/.test(out)) {
    if (Date.now() > deadline || child.exitCode !== null) throw new Error(`redis-server did not start:\n${out}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  return { child, connection: { host: '127.0.0.1', port } };
}

async function bullRound(round) {
  const queueName = `bench-${round}`;
  const queue = new Queue(queueName, { connection: redis.connection });
  const enqueuePerSecond = await spread(jobs, callers, (i) => queue.add('task', { taskId: `T-${round}-${i}`, prompt: 'x' }, { removeOnComplete: false }));
  let done = 0;
  let finished;
  const allDone = new Promise((r) => (finished = r));
  const redisCpu0 = cpuSeconds(redis.child.pid);
  const benchCpu0 = process.cpuUsage();
  const t0 = performance.now();
  const worker = new Worker(
    queueName,
    async (job) => {
      await job.updateProgress(10);
      await job.log('implementation: start: task, branch, plan');
      await job.log('test result: PASSED');
      return { status: 'DONE' };
    },
    { connection: redis.connection, concurrency: workers },
  );
  worker.on('completed', () => {
    if (++done === jobs) finished();
  });
  await allDone;
  const seconds = (performance.now() - t0) / 1000;
  const benchCpu = process.cpuUsage(benchCpu0);
  const cpuMsPerJob = {
    redis: +(((cpuSeconds(redis.child.pid) - redisCpu0) * 1000) / jobs).toFixed(3),
    bench: +((benchCpu.user + benchCpu.system) / 1000 / jobs).toFixed(3),
  };
  await worker.close();
  await queue.obliterate({ force: true });
  await queue.close();
  return { jobsPerSecond: +(jobs / seconds).toFixed(1), enqueuePerSecond: Math.round(enqueuePerSecond), cpuMsPerJob };
}

// ---- the run ----------------------------------------------------------------------------------
const median = (xs) => {
  const sorted = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid] : +((sorted[mid - 1] + sorted[mid]) / 2).toFixed(3);
};
try {
  redis = await startRedis();
  // BENCH_REPLICAS job services on one schema: the commands' queue group spreads over them.
  const services = [];
  for (let i = 0; i < replicas; i++) services.push(await startJobService());
  bus = await Bus.connect({ servers: natsUrl, naming, name: 'bench-lifecycle' });
  const client = new CommandClient(bus);
  await registerBenchProduct(client, { repository: 'acme/bench', cloneUrl: 'https://github.com/acme/bench.git', idempotencyKey: `bench/register:${name}` });
  // Warm-up (JIT, pools, streams) that is not counted.
  await gantryRound(client, services, 'warmup');
  if (logEvents > 0) {
    const { rows: [{ stream_id: jobId }] } = await db.query(`SELECT stream_id FROM ${schema}.events WHERE type = 'JobFinished' LIMIT 1`);
    const { rows: [{ n: perJob }] } = await db.query(`SELECT count(*)::int AS n FROM ${schema}.events WHERE stream_id = $1`, [jobId]);
    const history = new pg.Pool({ connectionString: databaseUrl, max: 1, options: `-c search_path=${schema}` });
    const added = await copyJobEvents(history, { jobId, copies: Math.ceil(logEvents / perJob), seed: name }).finally(() => history.end());
    // The views take the copied jobs too (the service is idle meanwhile: the rebuild locks the log).
    const pool = createPool({ url: databaseUrl, schema, max: 4 });
    const replayed = await rebuildProjections(new EventStore({ pool, schema, inlineProjections: jobServiceProjections }), jobServiceProjections).finally(() => pool.end());
    // Vacuumed and analysed, as a months-old log is: no autovacuum of the bulk load runs during the rounds.
    await db.query(`VACUUM (ANALYZE) ${schema}.events, ${schema}.jobs, ${schema}.outbox`);
    console.log(`log: ${added.toLocaleString('en')} events of finished jobs added before the rounds; views rebuilt from ${replayed.toLocaleString('en')} events`);
  }

  const gantry = [];
  const bull = [];
  for (let r = 0; r < rounds; r++) {
    gantry.push(await gantryRound(client, services, `a${r}`));
    console.log(`A gantry  round ${r + 1}: ${JSON.stringify({ ...gantry.at(-1), waits: undefined })}`);
    if (gantry.at(-1).waits) console.log(`  job-service connections (average per sample): ${JSON.stringify(gantry.at(-1).waits.connections)}`);
    bull.push(await bullRound(`b${r}`));
    console.log(`B bullmq  round ${r + 1}: ${JSON.stringify(bull.at(-1))}`);
  }
  const ceiling = { onePgClient: await rawCommits(1), eightPgClients: await rawCommits(8) };
  const pick = (xs, k) => median(xs.map((x) => x[k]));
  const summary = {
    gantryJobsPerSecond: pick(gantry, 'jobsPerSecond'),
    bullmqJobsPerSecond: pick(bull, 'jobsPerSecond'),
    ratio: +(median(gantry.map((g, i) => g.jobsPerSecond / bull[i].jobsPerSecond))).toFixed(3),
    gantryEnqueuePerSecond: pick(gantry, 'enqueuePerSecond'),
    bullmqEnqueuePerSecond: pick(bull, 'enqueuePerSecond'),
    claimP50Ms: pick(gantry, 'claimP50Ms'),
    claimP99Ms: pick(gantry, 'claimP99Ms'),
    claimsPerBurst: pick(gantry, 'claimsPerBurst'),
    commandsPerCommit: pick(gantry, 'commandsPerCommit'),
    cpuMsPerCommand: pick(gantry, 'cpuMsPerCommand'),
    serviceReadWriteCallsPerJob: pick(gantry, 'serviceReadWriteCallsPerJob'),
    serviceClaimMs: median(gantry.map((g) => g.serviceMsPerCommand.claim_job)),
    serviceFinishMs: median(gantry.map((g) => g.serviceMsPerCommand.finish_job)),
    writeMessageMs: pick(gantry, 'writeMessageMs'),
    commandsPerWriteMessage: pick(gantry, 'commandsPerWriteMessage'),
    ...Object.fromEntries(Object.keys(gantry[0].cpuMsPerJob).map((k) => [`gantryCpuMsPerJob_${k}`, median(gantry.map((g) => g.cpuMsPerJob[k]))])),
    ...Object.fromEntries(Object.keys(gantry[0].cpuMsPerEnqueue).map((k) => [`gantryCpuMsPerEnqueue_${k}`, median(gantry.map((g) => g.cpuMsPerEnqueue[k]))])),
    ...Object.fromEntries(Object.keys(bull[0].cpuMsPerJob).map((k) => [`bullmqCpuMsPerJob_${k}`, median(bull.map((b) => b.cpuMsPerJob[k]))])),
    pgCommitsPerSecond1: ceiling.onePgClient,
    pgCommitsPerSecond8: ceiling.eightPgClients,
  };
  console.log(`\nlifecycle, ${jobs} jobs x ${rounds} rounds per side, ${workers} workers${logEvents > 0 ? `, on a log of ${logEvents.toLocaleString('en')} events` : ''} (medians; ratio per A/B pair)`);
  console.table(summary);
  // BENCH_LABEL keeps a variant's figures beside the main run's (e.g. lifecycle-group-commit).
  writeResults(process.env.BENCH_LABEL ?? 'lifecycle', { jobs, rounds, workers, replicas, logEvents, env: extraEnv, summary, gantry, bull });
} finally {
  await bus?.close();
  for (const p of processes) await p.kill('SIGTERM');
  redis?.child.kill('SIGKILL');
  await db.end();
  const nc = await connectTestNats();
  await deleteStreams(nc, naming.streamPrefix);
  await nc.close();
  await dropSchema(schema);
  rmSync(scratch, { recursive: true, force: true });
}
