import { randomUUID } from 'node:crypto';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import pg from 'pg';
import { Webhooks } from '@octokit/webhooks';
import { EventStore } from '@gantry/eventstore';
import { eventually, testDatabaseUrl } from '@gantry/testing';
import { WebhookIntake } from '../src/application/webhook-intake.js';
import { inProcessPrService } from './in-process-world.js';

setFlagsFromString('--expose-gc');
const collectGarbage = runInNewContext('gc') as () => void;
const heapUsed = () => {
  collectGarbage();
  return process.memoryUsage().heapUsed;
};

/*
 * PR-12: deliveries are answered at once and processed after, a few at a time. While processing is held up (the
 * tracked pull requests' table locked, the database slow) and GitHub goes on delivering, the deliveries waiting are
 * kept in PostgreSQL, not in the process: its memory does not grow with their bodies, and each is processed once
 * the table is free. The intake runs in this process, on the real PostgreSQL and NATS.
 */
describe('webhook deliveries waiting to be processed', () => {
  const world = inProcessPrService('pr_webhook_backlog');
  const BODY_BYTES = 4 * 1024 * 1024;
  const DELIVERIES = 48;

  it('hold no body in memory while they wait, and are all processed once processing can go on', async () => {
    const intake = world.service.app.get(WebhookIntake);
    const signer = new Webhooks({ secret: 'unused' });
    const db = new pg.Client({ connectionString: testDatabaseUrl, options: `-c search_path=${world.service.schema}` });
    await db.connect();
    const ids: string[] = [];
    try {
      // Processing looks the delivery's pull requests up in this table: held up until the lock goes.
      await db.query('BEGIN');
      await db.query('LOCK TABLE pull_requests IN ACCESS EXCLUSIVE MODE');
      const before = heapUsed();
      for (let i = 0; i < DELIVERIES; i++) {
        const body = JSON.stringify({ sha: 'a'.repeat(40), branches: [{ name: `story/ST-${i}` }], repository: { full_name: 'acme/backlog' }, pad: `${i}`.padEnd(BODY_BYTES, 'x') });
        const deliveryId = randomUUID();
        ids.push(deliveryId);
        expect(await intake.receive({ rawBody: Buffer.from(body), signature: await signer.sign(body), event: 'status', deliveryId })).toEqual({ kind: 'recorded', duplicate: false });
      }
      await new Promise((resolve) => setTimeout(resolve, 200));
      const grown = heapUsed() - before;
      // The deliveries' bodies come to 192 MiB; the few being processed (4 at a time) are in memory, the rest not.
      expect(grown).toBeLessThan(80 * 1024 * 1024);
    } finally {
      await db.query('COMMIT');
      await db.end();
    }
    const pool = world.service.app.get(EventStore).pool;
    const processed = async () => {
      const { rows } = await pool.query<{ n: string }>(`SELECT count(*) AS n FROM webhook_deliveries WHERE delivery_id = ANY($1) AND processed_at IS NOT NULL`, [ids]);
      return Number(rows[0]!.n);
    };
    await eventually(async () => (await processed()) === DELIVERIES, { what: 'every delivery processed', timeoutMs: 90_000 });
  }, 180_000);
});
