// Shared helpers of the benchmarks: a throw-away schema and latency statistics.
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { registerProduct } from '@gantry/contracts';
import { Bus, CommandClient } from '@gantry/messaging';
import { removeTestNamespace, startApp } from '@gantry/testing';
import pg from 'pg';

export const databaseUrl = process.env.GANTRY_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/gantry';
export const natsUrl = process.env.GANTRY_NATS_URL ?? 'nats://127.0.0.1:4222';

export function benchName(label) {
  return `bench_${label}_${randomBytes(3).toString('hex')}`;
}

export async function dropSchema(schema) {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  await client.end();
}

export function stats(latenciesMs) {
  const sorted = [...latenciesMs].sort((a, b) => a - b);
  const at = (q) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
  return { n: sorted.length, p50: at(0.5).toFixed(2), p99: at(0.99).toFixed(2), max: sorted[sorted.length - 1].toFixed(2) };
}

/** Runs `op` `total` times spread over `writers` concurrent loops; returns ops/s and latency stats. */
export async function measure(total, writers, op) {
  const latencies = [];
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: writers }, async () => {
      for (;;) {
        const i = next++;
        if (i >= total) return;
        const t0 = performance.now();
        await op(i);
        latencies.push(performance.now() - t0);
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  return { perSecond: Math.round(total / seconds), ...stats(latencies) };
}

/** Single-row durable commits per second with `clients` connections, for `seconds`: the ceiling of every figure here. */
export async function rawCommits(clients, seconds = 3) {
  const schema = benchName('commits');
  const pool = new pg.Pool({ connectionString: databaseUrl, max: clients, options: `-c search_path=${schema}` });
  await pool.query(`CREATE SCHEMA ${schema}`);
  await pool.query(`CREATE TABLE ${schema}.t (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v int NOT NULL)`);
  try {
    let commits = 0;
    const end = performance.now() + seconds * 1000;
    await Promise.all(
      Array.from({ length: clients }, async () => {
        const client = await pool.connect();
        try {
          while (performance.now() < end) {
            await client.query('INSERT INTO t (v) VALUES (1)');
            commits++;
          }
        } finally {
          client.release();
        }
      }),
    );
    return Math.round(commits / seconds);
  } finally {
    await pool.end();
    await dropSchema(schema);
  }
}

const resultsDir = fileURLToPath(new URL('./results/', import.meta.url));

/**
 * Adds one benchmark's figures to bench/results/<date>.json (one file per day, one key per
 * benchmark) and writes the day's markdown table beside it (<date>.md), which the README quotes.
 */
export function writeResults(kind, result) {
  const date = new Date().toISOString().slice(0, 10);
  mkdirSync(resultsDir, { recursive: true });
  const jsonPath = join(resultsDir, `${date}.json`);
  const all = existsSync(jsonPath) ? JSON.parse(readFileSync(jsonPath, 'utf8')) : {};
  all[kind] = { measuredAt: new Date().toISOString(), host: { cpus: cpus().length, load: loadavg().map((l) => +l.toFixed(2)) }, ...result };
  writeFileSync(jsonPath, JSON.stringify(all, null, 2) + '\n');
  writeFileSync(join(resultsDir, `${date}.md`), markdownTable(date, all));
  console.log(`results: bench/results/${date}.json, bench/results/${date}.md`);
}

/** The day's markdown table, from its JSON (e.g. after correcting a figure by hand). */
export function renderResults(date) {
  writeFileSync(join(resultsDir, `${date}.md`), markdownTable(date, JSON.parse(readFileSync(join(resultsDir, `${date}.json`), 'utf8'))));
}

function markdownTable(date, all) {
  const lines = [`Measured ${date} (\`npm run bench -- lifecycle\`, \`npm run bench -- replay\`), ${cpus().length} cores.`, '', '| figure | value |', '|---|---|'];
  const l = all.lifecycle;
  if (l) {
    const s = l.summary;
    const load = l.host.load.join(' / ');
    lines.push(
      `| lifecycle, Gantry (16 workers, ${l.jobs} jobs x ${l.rounds}) | ${s.gantryJobsPerSecond} jobs/s |`,
      `| lifecycle, BullMQ (Redis appendfsync always, same run) | ${s.bullmqJobsPerSecond} jobs/s |`,
      `| ratio Gantry / BullMQ (median of A/B pairs) | ${s.ratio}x |`,
      `| enqueue, 16 concurrent callers: Gantry / BullMQ | ${s.gantryEnqueuePerSecond}/s / ${s.bullmqEnqueuePerSecond}/s |`,
      `| claim p50 / p99 (16 workers) | ${s.claimP50Ms} ms / ${s.claimP99Ms} ms |`,
      ...(s.claimsPerBurst === undefined ? [] : [`| claims sent together (the workers move in step) / rounds' claim p99 | ${s.claimsPerBurst} / ${l.gantry.map((g) => `${g.claimP99Ms} ms`).join(', ')} |`]),
      `| commands per commit | ${s.commandsPerCommit} |`,
      `| job-service CPU per command | ${s.cpuMsPerCommand} ms |`,
      ...(s.serviceReadWriteCallsPerJob === undefined ? [] : [`| job-service read/write system calls per job | ${s.serviceReadWriteCallsPerJob} |`]),
      ...(s.serviceClaimMs === undefined
        ? []
        : [
            `| time in the job service (its /metrics): claim / finish | ${s.serviceClaimMs} ms / ${s.serviceFinishMs} ms |`,
            `| a write message's wait for its commit / commands in it | ${s.writeMessageMs} ms / ${s.commandsPerWriteMessage} |`,
          ]),
      ...(s.gantryCpuMsPerJob_jobService === undefined
        ? []
        : [
            `| CPU per job, Gantry: job service / PostgreSQL / NATS server / callers | ${s.gantryCpuMsPerJob_jobService} / ${s.gantryCpuMsPerJob_postgres} / ${s.gantryCpuMsPerJob_nats} / ${s.gantryCpuMsPerJob_bench} ms |`,
            `| CPU per job, BullMQ: Redis / callers | ${s.bullmqCpuMsPerJob_redis} / ${s.bullmqCpuMsPerJob_bench} ms |`,
            ...(s.gantryCpuMsPerEnqueue_jobService === undefined
              ? []
              : [`| CPU per enqueue, Gantry: job service / PostgreSQL / NATS server / callers | ${s.gantryCpuMsPerEnqueue_jobService} / ${s.gantryCpuMsPerEnqueue_postgres} / ${s.gantryCpuMsPerEnqueue_nats} / ${s.gantryCpuMsPerEnqueue_bench} ms |`]),
          ]),
      `| PostgreSQL single-row commits/s, 1 / 8 clients (ceiling) | ${s.pgCommitsPerSecond1} / ${s.pgCommitsPerSecond8} |`,
      `| load average during the lifecycle run (1/5/15 min) | ${load} |`,
    );
  }
  for (const [kind, variant] of Object.entries(all).filter(([k]) => k.startsWith('lifecycle-'))) {
    const env = [variant.replicas > 1 ? `${variant.replicas} job-service replicas` : '', variant.logEvents > 0 ? `${variant.logEvents.toLocaleString('en')} events already in the log` : '', ...Object.entries(variant.env ?? {}).map(([k, v]) => `${k}=${v}`)].filter(Boolean).join(', ') || kind;
    const v = variant.summary;
    lines.push(`| lifecycle with ${env}: Gantry / BullMQ (ratio) | ${v.gantryJobsPerSecond} / ${v.bullmqJobsPerSecond} jobs/s (${v.ratio}x), ${v.commandsPerCommit} commands per commit |`);
  }
  const r = all.replay;
  if (r) {
    lines.push(
      `| replay: projection rebuild, ${r.events.toLocaleString('en')} job events | ${r.rebuildEventsPerSecond.toLocaleString('en')} events/s |`,
      `| job-service restart to /ready with that log (with a 7-event log) | ${r.restartToReadyMs} ms (${r.restartToReadyWithSmallLogMs} ms) |`,
      ...(r.rebuildUnderLoad === undefined
        ? []
        : [
            `| the rebuild again while 4 callers enqueue: seconds / jobs enqueued meanwhile / enqueue p50, p99, max (alone: p50) | ${r.rebuildUnderLoad.rebuildSeconds} s / ${r.rebuildUnderLoad.commands} / ${r.rebuildUnderLoad.p50}, ${r.rebuildUnderLoad.p99}, ${r.rebuildUnderLoad.max} ms (${r.rebuildUnderLoad.aloneP50} ms) |`,
          ]),
    );
  }
  return lines.join('\n') + '\n';
}

/**
 * The job service and the workflow engine as their own processes on throw-away schemas
 * (`<name>_jobs`, `<name>_wf`), with a command client on their bus; `close()` stops them and
 * removes the schemas and the bus namespace.
 */
export async function startWorkflowServices(label, { engineNodeArgs = [] } = {}) {
  const name = benchName(label);
  const naming = { subjectRoot: name, streamPrefix: `${name.toUpperCase()}_` };
  const jobsSchema = `${name}_jobs`;
  const engineSchema = `${name}_wf`;
  const jobService = await startApp('job-service', { schema: jobsSchema, naming, readyTimeoutMs: 60_000 });
  const engine = await startApp('workflow-engine', { schema: engineSchema, naming, readyTimeoutMs: 60_000, nodeArgs: engineNodeArgs });
  const bus = await Bus.connect({ servers: natsUrl, naming, name: `${label}-bench` });
  return {
    naming,
    jobsSchema,
    engineSchema,
    engine,
    bus,
    client: new CommandClient(bus),
    async close() {
      await bus.close();
      for (const child of [engine, jobService]) await child.kill('SIGTERM');
      await removeTestNamespace(naming, jobsSchema);
      await dropSchema(engineSchema);
    },
  };
}

/** Registers the product the benches enqueue against (STORY, squash, no required checks); `fields` overrides any of them. */
export function registerBenchProduct(client, fields = {}) {
  return client.request(registerProduct, {
    productId: 'bench',
    repository: 'bench/bench',
    cloneUrl: '/srv/git/bench.git',
    targetBranch: 'main',
    prStrategy: 'STORY',
    mergeMethod: 'SQUASH',
    requiredChecks: [],
    idempotencyKey: 'bench/register:1',
    ...fields,
  });
}

/**
 * Adds `copies` copies of the events of the job `jobId` to the log of the pool's schema, each for a
 * new job id (`seed` makes them unique), 16 jobs interleaved at a time as when 16 run at once, in
 * one statement per 100,000 events. The copies have no outbox rows (as if long published) and no
 * view rows (rebuildProjections writes those).
 */
export async function copyJobEvents(db, { jobId, copies, seed }) {
  const { rows: [{ n: perJob }] } = await db.query(`SELECT count(*)::int AS n FROM events WHERE stream_id = $1`, [jobId]);
  const chunk = Math.ceil(100_000 / perJob);
  for (let from = 0; from < copies; from += chunk) {
    const to = Math.min(copies, from + chunk);
    await db.query(
      `INSERT INTO events (event_id, stream_id, stream_version, type, schema_version, data, metadata, occurred_at)
       SELECT gen_random_uuid(), j.job_id, e.stream_version, e.type, e.schema_version,
              jsonb_set(e.data::jsonb, '{jobId}', to_jsonb(j.job_id)), e.metadata, e.occurred_at
         FROM generate_series($2::int, $3::int - 1) AS g,
              LATERAL (SELECT 'job-' || md5($4 || g)::uuid AS job_id) AS j,
              events e
        WHERE e.stream_id = $1
        ORDER BY g / 16, e.stream_version, g`,
      [jobId, from, to, seed],
    );
  }
  await db.query('ANALYZE');
  return copies * perJob;
}
