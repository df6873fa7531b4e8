import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { Webhooks } from '@octokit/webhooks';
import { eventSubject, ProductRegistered, type EventEnvelope } from '@gantry/contracts';
import { EventStore } from '@gantry/eventstore';
import { Bus } from '@gantry/messaging';
import { eventually } from '@gantry/testing';
import { inProcessPrService } from './in-process-world.js';

const POOL_MAX = 10;
const CONCURRENCY = 8;
const GITHUB_DELAY_MS = 20_000;

/*
 * Every run of a pull request holds the PR's lock for its whole length, GitHub's answers included. With the pool at
 * GANTRY_DB_POOL_MAX=10 and GANTRY_PR_RECONCILE_CONCURRENCY=8, while every run waits on a slow GitHub, the service's
 * pool still lends all its connections to the rest of the service: webhooks are answered at once and the consumers
 * handle their events. The pr-service runs in this process against the local GitHub (its PR reads answered 20 s late),
 * on the real PostgreSQL and NATS.
 */
describe('pull request runs waiting on a slow GitHub', () => {
  const world = inProcessPrService('pr_slow_github', { GANTRY_DB_POOL_MAX: String(POOL_MAX), GANTRY_PR_RECONCILE_CONCURRENCY: String(CONCURRENCY) });

  it('take no connection of the service\'s pool: webhooks and consumers are served meanwhile', async () => {
    const prs = [];
    for (let i = 0; i < CONCURRENCY; i++) prs.push(await world.storyPushedTwice(`slow-${i}`, `job-00000000-0000-4000-8000-0000000001${String(i).padStart(2, '0')}`, ['T-1']));
    await world.fake.control.injectFault({ kind: 'delayed_response', method: 'GET', path: '/pulls/', count: 1000, delayMs: GITHUB_DELAY_MS });
    const waiting = async () => (await world.fake.control.requests({ method: 'GET' })).filter((r) => r.fault === 'delayed_response' && !r.answered).length;
    try {
      const startedAt = Date.now();
      for (const pr of prs) world.reconciler.ask(pr.pullRequestId);
      await eventually(async () => (await waiting()) === CONCURRENCY, { what: 'every run waiting on GitHub', timeoutMs: 10_000 });

      // The service's pool lends every one of its connections at once: none is held by a run.
      const pool = world.service.app.get(EventStore).pool;
      expect(pool.options.max).toBe(POOL_MAX);
      const lent: pg.PoolClient[] = [];
      const all = Promise.all(Array.from({ length: POOL_MAX }, async () => lent.push(await pool.connect())));
      const inTime = await Promise.race([all.then(() => true), new Promise<false>((resolve) => setTimeout(() => resolve(false), 2000))]);
      const lentCount = lent.length;
      lent.splice(0).forEach((client) => client.release());
      all.then(() => lent.forEach((client) => client.release())).catch(() => undefined);
      expect({ inTime, lentCount }).toEqual({ inTime: true, lentCount: POOL_MAX });

      // Webhooks are verified, recorded and answered at once (GitHub gives up on a delivery after 10 s).
      const signer = new Webhooks({ secret: 'unused' });
      const answers = await Promise.all(
        Array.from({ length: 20 }, async (_, i) => {
          const body = JSON.stringify({ sha: 'b'.repeat(40), state: 'success', context: 'ci/test', branches: [{ name: `story/ST-other-${i}` }], repository: { full_name: 'acme/other' } });
          const sentAt = Date.now();
          const res = await fetch(`${world.service.url}/webhooks/github`, {
            method: 'POST',
            headers: { 'content-type': 'application/json', 'x-github-event': 'status', 'x-github-delivery': randomUUID(), 'x-hub-signature-256': await signer.sign(body) },
            body,
          });
          return { status: res.status, ms: Date.now() - sentAt };
        }),
      );
      expect(answers.map((a) => a.status)).toEqual(answers.map(() => 202));
      expect(Math.max(...answers.map((a) => a.ms))).toBeLessThan(2000);

      // The job events' consumer handles an event: a product registered shows in the service's table.
      const bus = world.service.app.get(Bus);
      await bus.ensureEventStream('jobs');
      const productId = `product-slow-${randomUUID().slice(0, 8)}`;
      const envelope: EventEnvelope = {
        eventId: randomUUID(), type: 'ProductRegistered', schemaVersion: 1, streamId: productId, streamVersion: 1, position: 1,
        occurredAt: new Date().toISOString(), correlationId: `test-${productId}`, causationId: null, idempotencyKey: null, actor: null,
        data: { ...ProductRegistered.examples.valid[0], productId, repository: 'acme/slow-registered' },
      };
      await bus.js.publish(eventSubject(bus.naming, 'jobs', 'ProductRegistered', productId), JSON.stringify(envelope), { msgID: envelope.eventId });
      await eventually(async () => (await pool.query(`SELECT 1 FROM products WHERE product_id = $1`, [productId])).rowCount === 1, { what: 'the product registered handled', timeoutMs: 5000 });

      // All of this while every run was still waiting on GitHub.
      expect(await waiting()).toBe(CONCURRENCY);
      expect(Date.now() - startedAt).toBeLessThan(GITHUB_DELAY_MS);
    } finally {
      await world.fake.control.clearFaults();
    }
  }, 240_000);
});
