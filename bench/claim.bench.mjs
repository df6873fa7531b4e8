// Claim round trip through the NATS command path: the job service runs as its own process on a
// throw-away schema; 1,000 jobs are enqueued, then claimed one by one (runner polls the queue).
import { randomUUID } from 'node:crypto';
import { spawn } from 'node:child_process';
import { createServer } from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { jetstreamManager } from '@nats-io/jetstream';
import { claimJob, enqueueJob, registerProduct } from '@gantry/contracts';
import { Bus, CommandClient } from '@gantry/messaging';
import { benchName, databaseUrl, dropSchema, measure, natsUrl, stats } from './lib.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const total = Number(process.env.BENCH_CLAIMS ?? 1000);
const name = benchName('claim');
const naming = { subjectRoot: name, streamPrefix: `${name.toUpperCase()}_` };

const port = await new Promise((resolve) => {
  const server = createServer();
  server.listen(0, '127.0.0.1', () => {
    const { port } = server.address();
    server.close(() => resolve(port));
  });
});
const service = spawn(process.execPath, [path.join(root, 'apps/job-service/dist/main.js')], {
  env: {
    ...process.env,
    PORT: String(port),
    GANTRY_HTTP_HOST: '127.0.0.1',
    GANTRY_DATABASE_URL: databaseUrl,
    GANTRY_NATS_URL: natsUrl,
    GANTRY_DB_SCHEMA: name,
    GANTRY_SUBJECT_ROOT: naming.subjectRoot,
    GANTRY_STREAM_PREFIX: naming.streamPrefix,
    LOG_LEVEL: 'warn',
  },
  stdio: ['ignore', 'ignore', 'inherit'],
});

const bus = await Bus.connect({ servers: natsUrl, naming, name: 'claim-bench' });
const client = new CommandClient(bus);
try {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const ready = await fetch(`http://127.0.0.1:${port}/ready`).then((r) => r.status === 200, () => false);
    if (ready) break;
    if (Date.now() > deadline) throw new Error('job-service did not become ready');
    await new Promise((r) => setTimeout(r, 100));
  }
  await client.request(registerProduct, {
    productId: 'bench', repository: 'bench/bench', cloneUrl: '/srv/git/bench.git', targetBranch: 'main',
    prStrategy: 'STORY', mergeMethod: 'SQUASH', requiredChecks: [], idempotencyKey: 'bench/register:1',
  });
  const t0 = performance.now();
  for (let i = 0; i < total; i++) {
    await client.request(enqueueJob, { kind: 'TASK_IMPLEMENTATION', productId: 'bench', taskId: `T-${i}`, prompt: 'x', idempotencyKey: `bench/enqueue:${i}` });
  }
  const enqueueSeconds = (performance.now() - t0) / 1000;
  const latencies = [];
  for (let i = 0; i < total; i++) {
    const started = performance.now();
    const reply = await client.request(claimJob, { runnerId: 'bench-runner', kinds: ['TASK_IMPLEMENTATION'], idempotencyKey: `bench/claim:${randomUUID()}` });
    latencies.push(performance.now() - started);
    if (!reply.claimed) throw new Error(`claim ${i} found no queued job`);
  }
  const s = stats(latencies);
  console.log(`enqueue (sequential)              ${Math.round(total / enqueueSeconds)}/s over ${total} jobs`);
  console.log(`claim round trip (NATS, poll)     p50=${s.p50}ms p99=${s.p99}ms max=${s.max}ms (n=${s.n})`);

  // The same with 8 runners polling at once: SKIP LOCKED spreads them over the queue.
  for (let i = 0; i < total; i++) {
    await client.request(enqueueJob, { kind: 'TASK_IMPLEMENTATION', productId: 'bench', taskId: `U-${i}`, prompt: 'x', idempotencyKey: `bench/enqueue-8:${i}` });
  }
  let empty = 0;
  const concurrent = await measure(total, 8, async (i) => {
    const reply = await client.request(claimJob, { runnerId: `bench-runner-${i % 8}`, kinds: ['TASK_IMPLEMENTATION'], idempotencyKey: `bench/claim8:${randomUUID()}` });
    if (!reply.claimed) empty++;
  });
  console.log(`claim round trip, 8 pollers       ${concurrent.perSecond}/s p50=${concurrent.p50}ms p99=${concurrent.p99}ms (n=${concurrent.n}, ${empty} found nothing)`);
} finally {
  await bus.close();
  service.kill('SIGTERM');
  await new Promise((r) => service.once('exit', r));
  const nc = (await import('@nats-io/transport-node')).connect;
  const conn = await nc({ servers: natsUrl });
  const jsm = await jetstreamManager(conn);
  for await (const stream of jsm.streams.list()) {
    if (stream.config.name.startsWith(naming.streamPrefix)) await jsm.streams.delete(stream.config.name).catch(() => undefined);
  }
  await conn.close();
  await dropSchema(name);
}
