// Claim round trip through the NATS command path: the job service runs as its own process on a
// throw-away schema; 1,000 jobs are enqueued, then claimed one by one (runner polls the queue);
// then by 8 pollers at once, and by 16 runners that claim again as soon as they have a job.
import { randomUUID } from 'node:crypto';
import { claimJob, enqueueJob } from '@gantry/contracts';
import { Bus, CommandClient } from '@gantry/messaging';
import { removeTestNamespace, startApp } from '@gantry/testing';
import { benchName, measure, natsUrl, registerBenchProduct, stats } from './lib.mjs';

const total = Number(process.env.BENCH_CLAIMS ?? 1000);
const name = benchName('claim');
const naming = { subjectRoot: name, streamPrefix: `${name.toUpperCase()}_` };

const service = await startApp('job-service', { schema: name, naming });

const bus = await Bus.connect({ servers: natsUrl, naming, name: 'claim-bench' });
const client = new CommandClient(bus);
try {
  await registerBenchProduct(client);
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
  console.log(`claim round trip, 8 pollers       ${concurrent.perSecond}/s p50=${concurrent.p50}ms p99=${concurrent.p99}ms max=${concurrent.max}ms (n=${concurrent.n}, ${empty} found nothing)`);

  // 16 runners each claiming again as soon as it has a job: the claims come in bursts of 16, which
  // share write messages, and every burst but the first takes its jobs from the look-ahead.
  await measure(total, 16, (i) =>
    client.request(enqueueJob, { kind: 'TASK_IMPLEMENTATION', productId: 'bench', taskId: `V-${i}`, prompt: 'x', idempotencyKey: `bench/enqueue-16:${i}` }),
  );
  const bursts = [];
  const burstsStarted = performance.now();
  await Promise.all(
    Array.from({ length: 16 }, async (_, w) => {
      for (;;) {
        const started = performance.now();
        const reply = await client.request(claimJob, { runnerId: `bench-runner-${w}`, kinds: ['TASK_IMPLEMENTATION'], idempotencyKey: `bench/claim16:${randomUUID()}` });
        if (!reply.claimed) return;
        bursts.push(performance.now() - started);
      }
    }),
  );
  const b = stats(bursts);
  const perSecond = Math.round(bursts.length / ((performance.now() - burstsStarted) / 1000));
  console.log(`claim round trip, 16 in bursts    ${perSecond}/s p50=${b.p50}ms p99=${b.p99}ms max=${b.max}ms (n=${b.n})`);
} finally {
  await bus.close();
  await service.kill('SIGTERM');
  await removeTestNamespace(naming, name);
}
