import { randomUUID } from 'node:crypto';
import { createRequire } from 'node:module';
import pg from 'pg';
import { Webhooks } from '@octokit/webhooks';
import { pullRequestIdFor } from '@gantry/contracts';
import { eventually, removeTestNamespace, startApp, testDatabaseUrl, testNaming, uniqueName, type RunningApp } from '@gantry/testing';
import { whatADeliveryConcerns } from '../src/application/webhook-targets.js';

const examples = createRequire(import.meta.url)('@octokit/webhooks-examples') as { name: string; examples: Record<string, unknown>[] }[];
const HANDLED = ['pull_request', 'pull_request_review', 'check_suite', 'check_run', 'status'];

/*
 * POST /webhooks/github on the running pr-service (its compiled dist: build first), fed GitHub's own
 * example payloads (@octokit/webhooks-examples) for every event it handles (docs/pr-service.md, PR-12).
 */
describe('GitHub webhooks into the pr-service', () => {
  const name = uniqueName('pr_webhooks');
  const naming = testNaming(name);
  const current = 'whsec-current';
  const next = 'whsec-next';
  let app: RunningApp;
  let db: pg.Pool;

  beforeAll(async () => {
    app = await startApp('pr-service', {
      schema: name,
      naming,
      env: { GANTRY_GITHUB_WEBHOOK_SECRETS: `${current},${next}`, GANTRY_GITHUB_API_URL: 'http://127.0.0.1:9', GANTRY_GITHUB_TOKEN: 'unused' },
    });
    db = new pg.Pool({ connectionString: testDatabaseUrl, options: `-c search_path=${name}`, max: 2 });
  }, 60_000);

  afterAll(async () => {
    await app?.kill('SIGKILL');
    await db?.end();
    await removeTestNamespace(naming, name);
  });

  async function deliver(event: string, payload: unknown, options: { secret?: string | null; deliveryId?: string; tamper?: boolean } = {}) {
    const body = JSON.stringify(payload);
    const secret = options.secret === undefined ? current : options.secret;
    const signature = secret === null ? null : await new Webhooks({ secret }).sign(body);
    const deliveryId = options.deliveryId ?? randomUUID();
    const res = await fetch(`${app.url}/webhooks/github`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'x-github-event': event,
        'x-github-delivery': deliveryId,
        ...(signature ? { 'x-hub-signature-256': signature } : {}),
      },
      body: options.tamper ? body.replace(/}$/, ',"injected":true}') : body,
    });
    return { status: res.status, body: (await res.json()) as Record<string, unknown>, deliveryId };
  }

  const recorded = async (deliveryId: string) => (await db.query(`SELECT * FROM webhook_deliveries WHERE delivery_id = $1`, [deliveryId])).rows;
  /** The delivery's row once it has been processed. */
  const processed = async (deliveryId: string) =>
    eventually(async () => {
      const rows = await recorded(deliveryId);
      return rows[0]?.processed_at ? rows[0] : null;
    }, { what: `delivery ${deliveryId} processed` });
  const count = async () => Number((await db.query(`SELECT count(*) AS n FROM webhook_deliveries`)).rows[0].n);

  const handledExamples = examples.filter((e) => HANDLED.includes(e.name)).flatMap((e) => e.examples.map((payload, i) => [e.name, (payload.action as string) ?? '-', i, payload] as const));

  it('has GitHub example payloads for every event it handles', () => {
    expect(new Set(handledExamples.map(([event]) => event))).toEqual(new Set(HANDLED));
  });

  it.each(handledExamples)('records and processes %s (%s, example %i), and works out which pull request it concerns', async (event, _action, _i, payload) => {
    const concerns = whatADeliveryConcerns(event, payload);
    const p = payload as { repository?: { full_name?: string }; action?: string };
    if (concerns) expect(concerns.repository).toBe(p.repository?.full_name);
    const { status, body, deliveryId } = await deliver(event, payload);
    expect(status).toBe(202);
    expect(body).toEqual({ delivery: deliveryId, duplicate: false });
    const row = await processed(deliveryId);
    expect(row).toMatchObject({ event, outcome: concerns === null ? 'ignored' : 'no tracked pull request' });
  });

  it('the same delivery twice is recorded once; the second answer says it was a duplicate', async () => {
    const payload = examples.find((e) => e.name === 'pull_request')!.examples[0]!;
    const first = await deliver('pull_request', payload);
    const again = await deliver('pull_request', payload, { deliveryId: first.deliveryId });
    expect([first.status, again.status]).toEqual([202, 202]);
    expect(again.body).toEqual({ delivery: first.deliveryId, duplicate: true });
    expect(await recorded(first.deliveryId)).toHaveLength(1);
  });

  /**
   * Delivers `payload` while its processing fails — processing reads the tracked pull requests, and their
   * table is away — and checks it is recorded, answered and still unprocessed 1.5 s later; the table is back after.
   */
  async function deliveredWhileProcessingFails(payload: unknown) {
    await db.query(`ALTER TABLE pull_requests RENAME TO pull_requests_away`);
    try {
      const first = await deliver('pull_request', payload);
      expect(first.status).toBe(202);
      await new Promise((resolve) => setTimeout(resolve, 1500));
      expect(await recorded(first.deliveryId)).toMatchObject([{ processed_at: null }]);
      return first;
    } finally {
      await db.query(`ALTER TABLE pull_requests_away RENAME TO pull_requests`);
    }
  }

  it('a delivery whose processing failed is processed when GitHub redelivers it (still recorded once)', async () => {
    const payload = examples.find((e) => e.name === 'pull_request')!.examples.find((p) => p.action === 'opened')!;
    const first = await deliveredWhileProcessingFails(payload);
    // Someone presses "Redeliver" on GitHub: the same X-GitHub-Delivery.
    const again = await deliver('pull_request', payload, { deliveryId: first.deliveryId });
    expect(again).toMatchObject({ status: 202, body: { delivery: first.deliveryId, duplicate: true } });
    const row = await processed(first.deliveryId);
    expect(row).toMatchObject({ event: 'pull_request', outcome: 'no tracked pull request' });
    expect(await recorded(first.deliveryId)).toHaveLength(1);
  });

  it('a delivery whose processing failed (the database away a moment) is processed again by itself once it is back, without a redelivery', async () => {
    const payload = examples.find((e) => e.name === 'pull_request')!.examples.find((p) => p.action === 'opened')!;
    const first = await deliveredWhileProcessingFails(payload);
    // Nobody presses "Redeliver": GitHub sends it once.
    const row = await processed(first.deliveryId);
    expect(row).toMatchObject({ event: 'pull_request', outcome: 'no tracked pull request' });
  });

  it('accepts either secret while one is rotated', async () => {
    const payload = examples.find((e) => e.name === 'status')!.examples[0]!;
    expect((await deliver('status', payload, { secret: next })).status).toBe(202);
  });

  it.each([
    ['a forged signature (another secret)', { secret: 'not-ours' }],
    ['a stale signature (a secret rotated out)', { secret: 'whsec-retired' }],
    ['no signature', { secret: null }],
    ['a body changed after signing', { tamper: true }],
  ])('%s is refused with 401 and nothing is recorded', async (_what, options) => {
    const before = await count();
    const payload = examples.find((e) => e.name === 'pull_request')!.examples[0]!;
    const { status, body, deliveryId } = await deliver('pull_request', payload, options);
    expect(status).toBe(401);
    expect(body).toEqual({ ok: false, error: { code: 'UNAUTHENTICATED', message: expect.stringMatching(/signature/i) } });
    expect(JSON.stringify(body)).not.toContain('whsec');
    expect(await recorded(deliveryId)).toHaveLength(0);
    expect(await count()).toBe(before);
  });

  it.each([
    ['unsigned', null],
    ['signed with another secret', 'not-ours'],
  ])('a body that is no JSON, %s, is refused with 401 (the signature is checked before anything is parsed) and nothing is recorded', async (_what, secret) => {
    const before = await count();
    const deliveryId = randomUUID();
    const raw = '{"action": "opened",';
    const res = await fetch(`${app.url}/webhooks/github`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'x-github-event': 'pull_request',
        'x-github-delivery': deliveryId,
        ...(secret ? { 'x-hub-signature-256': await new Webhooks({ secret }).sign(raw) } : {}),
      },
      body: raw,
    });
    expect(res.status).toBe(401);
    expect(await res.json()).toEqual({ ok: false, error: { code: 'UNAUTHENTICATED', message: expect.stringMatching(/signature/i) } });
    expect(await recorded(deliveryId)).toHaveLength(0);
    expect(await count()).toBe(before);
  });

  it.each([
    ['null', null],
    ['an array', [{ action: 'opened' }]],
    ['a number', 7],
    ['a string', 'opened'],
  ])('a signed body that is JSON but not an object (%s) is refused with 400 and nothing is recorded', async (_what, payload) => {
    const before = await count();
    const { status, body, deliveryId } = await deliver('pull_request', payload);
    expect(status).toBe(400);
    // The body parser refuses a JSON scalar itself (strict JSON); an array reaches the intake, which refuses it.
    expect(body).toEqual({ ok: false, error: { code: 'INVALID_COMMAND', message: expect.stringMatching(/not valid JSON|not a JSON object/) } });
    expect(await recorded(deliveryId)).toHaveLength(0);
    expect(await count()).toBe(before);
  });

  it.each([
    ['a body that is no JSON', 'content-type: application/json', '{"action": "opened",', 400],
    ['a body larger than GitHub sends (25 MB)', 'content-type: application/json', `{"action":"opened","pad":"${'x'.repeat(25 * 1024 * 1024)}"}`, 413],
  ])('%s, signed, is refused in the typed shape (%s) and nothing is recorded', async (_what, _type, raw, expected) => {
    const before = await count();
    const deliveryId = randomUUID();
    const res = await fetch(`${app.url}/webhooks/github`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-github-event': 'pull_request', 'x-github-delivery': deliveryId, 'x-hub-signature-256': await new Webhooks({ secret: current }).sign(raw) },
      body: raw,
    });
    expect(res.status).toBe(expected);
    expect(await res.json()).toEqual({ ok: false, error: { code: 'INVALID_COMMAND', message: expect.any(String), ...(expected === 413 ? { issues: [expect.objectContaining({ code: 'too_big' })] } : {}) } });
    expect(await recorded(deliveryId)).toHaveLength(0);
    expect(await count()).toBe(before);
  });

  it('a signed delivery without its X-GitHub-Event or X-GitHub-Delivery is refused with 400 in the typed shape and nothing is recorded', async () => {
    const before = await count();
    const raw = JSON.stringify(examples.find((e) => e.name === 'pull_request')!.examples[0]!);
    const res = await fetch(`${app.url}/webhooks/github`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-hub-signature-256': await new Webhooks({ secret: current }).sign(raw) },
      body: raw,
    });
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({ ok: false, error: { code: 'INVALID_COMMAND', message: expect.stringMatching(/X-GitHub-Event/) } });
    expect(await count()).toBe(before);
  });

  it.each([
    ['a pull request number no pull request can have', { number: 3_000_000_000 }],
    ['a fractional pull request number', { number: 1.5 }],
    ['a head SHA with a NUL in it', { head: { ref: 'feature/x', sha: 'abc\u0000def' } }],
    ['a head branch with a lone surrogate in it', { head: { ref: 'feature/\ud800', sha: 'abc' } }],
  ])('a signed pull_request delivery with %s is recorded and processed, not left unprocessed', async (_what, pullRequest) => {
    const example = examples.find((e) => e.name === 'pull_request')!.examples.find((p) => p.action === 'opened')! as Record<string, unknown>;
    const payload = { ...example, pull_request: { ...(example.pull_request as Record<string, unknown>), ...pullRequest } };
    const { status, deliveryId } = await deliver('pull_request', payload);
    expect(status).toBe(202);
    const row = await processed(deliveryId);
    expect(row).toMatchObject({ event: 'pull_request', outcome: 'no tracked pull request' });
  });

  it('a signed delivery whose action carries a NUL is recorded (the action made storable) and processed', async () => {
    const example = examples.find((e) => e.name === 'pull_request')!.examples[0]!;
    const { status, deliveryId } = await deliver('pull_request', { ...example, action: 'opened\u0000' });
    expect(status).toBe(202);
    const row = await processed(deliveryId);
    expect(row).toMatchObject({ event: 'pull_request', action: 'opened\uFFFD', outcome: 'ignored' });
  });

  it('a delivery names the tracked pull request of its repository however the product spells the repository\'s case (GitHub\'s names are case-insensitive)', async () => {
    const payload = examples.find((e) => e.name === 'pull_request')!.examples.find((p) => p.action === 'opened')! as {
      repository: { full_name: string };
      pull_request: { head: { ref: string } };
    };
    // The product registered the repository in lower case; GitHub's deliveries spell it as GitHub does (Codertocat/Hello-World).
    const repository = payload.repository.full_name.toLowerCase();
    const branch = payload.pull_request.head.ref;
    await db.query(
      `INSERT INTO pull_requests (pull_request_id, repository, branch, phase, pr_number, head_sha, settled, state, updated_at)
       VALUES ($1, $2, $3, 'waiting_for_checks', NULL, NULL, false, '{}', now())`,
      [pullRequestIdFor(repository, branch), repository, branch],
    );
    try {
      const { status, deliveryId } = await deliver('pull_request', payload);
      expect(status).toBe(202);
      const row = await processed(deliveryId);
      expect(row).toMatchObject({ event: 'pull_request', outcome: 'read again: 1' });
    } finally {
      await db.query(`DELETE FROM pull_requests WHERE pull_request_id = $1`, [pullRequestIdFor(repository, branch)]);
    }
  });

  it('events it does not handle are recorded and ignored', async () => {
    for (const event of ['push', 'issues']) {
      const payload = examples.find((e) => e.name === event)!.examples[0]!;
      const { status, deliveryId } = await deliver(event, payload);
      expect(status).toBe(202);
      const row = await processed(deliveryId);
      expect(row.outcome).toBe('ignored');
    }
  });
});
