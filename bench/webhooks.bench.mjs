// GitHub webhook ingest of the pr-service: signed deliveries per second to durable record, and the
// response time GitHub sees. The pr-service runs as its own process on a throw-away schema; every
// delivery is a GitHub example payload (pull_request.synchronize, check_run.completed, status) with
// its own X-GitHub-Delivery, signed beforehand (the signing is GitHub's work, not the service's).
// A 202 means the delivery was verified and committed; the count in webhook_deliveries is checked.
//   BENCH_WEBHOOKS    deliveries (default 3000)
//   BENCH_CONCURRENCY deliveries in flight at once (default 16)
import { randomUUID } from 'node:crypto';
import { createRequire } from 'node:module';
import pg from 'pg';
import { Webhooks } from '@octokit/webhooks';
import { removeTestNamespace, startApp } from '@gantry/testing';
import { benchName, databaseUrl, measure } from './lib.mjs';

const total = Number(process.env.BENCH_WEBHOOKS ?? 3000);
const concurrency = Number(process.env.BENCH_CONCURRENCY ?? 16);
const name = benchName('webhooks');
const naming = { subjectRoot: name, streamPrefix: `${name.toUpperCase()}_` };
const secret = 'bench-webhook-secret';

const examples = createRequire(import.meta.url)('@octokit/webhooks-examples');
const pick = (event, action) => examples.find((e) => e.name === event).examples.find((p) => action === undefined || p.action === action);
const kinds = [
  ['pull_request', pick('pull_request', 'synchronize') ?? pick('pull_request', 'opened')],
  ['check_run', pick('check_run', 'completed')],
  ['status', pick('status')],
];

const service = await startApp('pr-service', {
  schema: name,
  naming,
  env: { GANTRY_GITHUB_WEBHOOK_SECRETS: secret, GANTRY_GITHUB_API_URL: 'http://127.0.0.1:9', GANTRY_GITHUB_TOKEN: 'unused' },
});
const { url } = service;
const db = new pg.Pool({ connectionString: databaseUrl, options: `-c search_path=${name}`, max: 2 });
try {
  const signers = new Webhooks({ secret });
  const deliveries = [];
  for (let i = 0; i < total; i++) {
    const [event, payload] = kinds[i % kinds.length];
    const body = JSON.stringify(payload);
    deliveries.push({ event, body, id: randomUUID(), signature: await signers.sign(body) });
  }
  const bytes = deliveries.reduce((n, d) => n + d.body.length, 0) / deliveries.length;
  const send = async (i) => {
    const d = deliveries[i];
    const res = await fetch(`${url}/webhooks/github`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-github-event': d.event, 'x-github-delivery': d.id, 'x-hub-signature-256': d.signature },
      body: d.body,
    });
    await res.arrayBuffer();
    if (res.status !== 202) throw new Error(`delivery ${d.id} answered ${res.status}`);
  };
  // Warm-up outside the measurement (JIT, connection pool), with deliveries of their own.
  for (let i = 0; i < 50; i++) {
    const body = JSON.stringify(kinds[0][1]);
    const res = await fetch(`${url}/webhooks/github`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-github-event': 'pull_request', 'x-github-delivery': randomUUID(), 'x-hub-signature-256': await signers.sign(body) },
      body,
    });
    await res.arrayBuffer();
  }
  const result = await measure(total, concurrency, send);
  const recorded = Number((await db.query(`SELECT count(*) AS n FROM webhook_deliveries WHERE delivery_id = ANY($1)`, [deliveries.map((d) => d.id)])).rows[0].n);
  if (recorded !== total) throw new Error(`only ${recorded} of ${total} deliveries are recorded`);
  console.log(`webhook ingest (signed, ${concurrency} in flight)  ${result.perSecond}/s to durable record over ${total} deliveries of ~${Math.round(bytes / 1024)} KiB`);
  console.log(`response time (POST /webhooks/github)       p50=${result.p50}ms p99=${result.p99}ms max=${result.max}ms`);
} finally {
  await service.kill('SIGTERM');
  await db.end();
  await removeTestNamespace(naming, name);
}
