import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { Webhooks } from '@octokit/webhooks';
import { eventually, removeTestNamespace, startApp, testDatabaseUrl, testNaming, uniqueName, type RunningApp } from '@gantry/testing';

/*
 * The pruning of `webhook_deliveries` on the running pr-service (docs/pr-service.md, "Webhooks"): a
 * processed delivery goes once the receipt window (3 s here) has passed since it was processed; one
 * not processed stays. The pruning job runs every 200 ms.
 */
describe('retention of the pr-service\'s webhook deliveries', () => {
  const name = uniqueName('pr_webhook_retention');
  const naming = testNaming(name);
  const secret = 'whsec-retention';
  let app: RunningApp;
  let db: pg.Pool;

  beforeAll(async () => {
    app = await startApp('pr-service', {
      schema: name,
      naming,
      env: {
        GANTRY_GITHUB_WEBHOOK_SECRETS: secret,
        GANTRY_GITHUB_API_URL: 'http://127.0.0.1:9',
        GANTRY_GITHUB_TOKEN: 'unused',
        GANTRY_STREAM_MAX_AGE_MS: '3000',
        GANTRY_RECEIPT_TTL_MS: '3000',
        GANTRY_PRUNE_INTERVAL_MS: '200',
      },
    });
    db = new pg.Pool({ connectionString: testDatabaseUrl, options: `-c search_path=${name}`, max: 2 });
  }, 60_000);

  afterAll(async () => {
    await app?.kill('SIGKILL');
    await db?.end();
    await removeTestNamespace(naming, name);
  });

  const recorded = async (deliveryId: string) => (await db.query(`SELECT processed_at FROM webhook_deliveries WHERE delivery_id = $1`, [deliveryId])).rows;

  it('deletes a processed delivery after the receipt window and keeps one not processed yet', async () => {
    // Recorded before a crash and not processed yet (the next start processes it): kept however old.
    const unprocessed = randomUUID();
    await db.query(`INSERT INTO webhook_deliveries (delivery_id, event, action, payload, received_at) VALUES ($1, 'ping', NULL, '{}', now() - interval '1 day')`, [unprocessed]);

    const body = JSON.stringify({ zen: 'Keep it logically awesome.', hook_id: 1 });
    const deliveryId = randomUUID();
    const res = await fetch(`${app.url}/webhooks/github`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-github-event': 'ping', 'x-github-delivery': deliveryId, 'x-hub-signature-256': await new Webhooks({ secret }).sign(body) },
      body,
    });
    expect(res.status).toBe(202);
    await eventually(async () => (await recorded(deliveryId))[0]?.processed_at != null, { what: 'the delivery processed', timeoutMs: 60_000 });
    await eventually(async () => (await recorded(deliveryId)).length === 0, { what: 'the processed delivery pruned', timeoutMs: 60_000 });
    expect(await recorded(unprocessed)).toEqual([{ processed_at: null }]);
  });
});
