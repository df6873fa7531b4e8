// Shared helpers of the benchmarks: a throw-away schema and latency statistics.
import { randomBytes } from 'node:crypto';
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
