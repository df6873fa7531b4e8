import { createHmac } from 'node:crypto';
import { RequestError } from '@octokit/request-error';
import { eventually } from '@gantry/testing';
import { startGitHubFake, type GitHubFake, type RepositorySummary } from './index.js';
import { Clone, octokitFor, startWebhookReceiver } from './testing/harness.js';

const SECRET = 'another-secret';
const owner = 'acme';

let fake: GitHubFake;
let receiver: Awaited<ReturnType<typeof startWebhookReceiver>>;
let repo: RepositorySummary;
let clone: Clone;
let counter = 0;

beforeAll(async () => {
  receiver = await startWebhookReceiver(SECRET);
  fake = await startGitHubFake({ webhooks: [{ url: receiver.url, secret: SECRET }] });
});

afterAll(async () => {
  await fake.close();
  await receiver.close();
});

beforeEach(async () => {
  counter += 1;
  repo = await fake.control.createRepository({ owner, name: `hooks-${counter}` });
  clone = new Clone(repo.cloneUrl);
  await fake.control.clearFaults();
});

afterEach(() => clone.remove());

const name = () => repo.fullName.split('/')[1]!;
const ofThisRepo = (d: { body: Record<string, any> }) => d.body.repository?.full_name === repo.fullName;

async function pushBranch(branch: string): Promise<string> {
  const sha = clone.commitAndPush(branch, { [`${branch}.txt`]: 'x\n' }, `Work on ${branch}`);
  await fake.control.refresh();
  return sha;
}

describe('webhook deliveries', () => {
  it('are signed over the exact body, name the event, and carry a UUID delivery id', async () => {
    const { octokit } = octokitFor(fake);
    await pushBranch('feature/signed');
    await octokit.rest.pulls.create({ owner, repo: name(), head: 'feature/signed', base: 'main', title: 'signed' });
    const [opened] = await receiver.waitFor((d) => ofThisRepo(d) && d.event === 'pull_request' && d.body.action === 'opened');
    expect(opened!.signatureValid).toBe(true);
    expect(opened!.id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(opened!.body).toMatchObject({ action: 'opened', number: 1, pull_request: { head: { ref: 'feature/signed' } }, sender: { login: 'gantry' } });
    const sha1 = createHmac('sha1', SECRET).update(JSON.stringify(opened!.body)).digest('hex');
    expect(opened!.headers).toMatchObject({
      'x-hub-signature': `sha1=${sha1}`,
      'x-github-hook-installation-target-type': 'repository',
      'x-github-hook-installation-target-id': String(opened!.body.repository.id),
      'user-agent': expect.stringMatching(/^GitHub-Hookshot\//),
    });
  });

  it('a git push becomes a push event with its commits and files; a deletion and a force-push say so', async () => {
    const first = await pushBranch('feature/push');
    const [created] = await receiver.waitFor((d) => ofThisRepo(d) && d.event === 'push' && d.body.ref === 'refs/heads/feature/push');
    expect(created!.body).toMatchObject({ created: true, deleted: false, forced: false, after: first, before: '0'.repeat(40), head_commit: { id: first } });
    expect(created!.body.commits).toEqual([expect.objectContaining({ id: first, added: ['feature/push.txt'], message: 'Work on feature/push' })]);
    // GitHub's push payload gives its repository's created_at and pushed_at as Unix seconds (every other time is ISO 8601).
    expect(created!.body.repository).toMatchObject({ created_at: expect.any(Number), pushed_at: expect.any(Number), updated_at: expect.stringMatching(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/) });
    expect(created!.body.repository.pushed_at * 1000).toBeLessThanOrEqual(Date.now());
    clone.git('push', '-q', '--force', 'origin', 'origin/main:refs/heads/feature/push');
    await fake.control.refresh();
    const [forced] = await receiver.waitFor((d) => ofThisRepo(d) && d.event === 'push' && d.body.before === first);
    expect(forced!.body.forced).toBe(true);
    clone.git('push', '-q', 'origin', '--delete', 'feature/push');
    await fake.control.refresh();
    const [deleted] = await receiver.waitFor((d) => ofThisRepo(d) && d.event === 'push' && d.body.deleted === true);
    expect(deleted!.body).toMatchObject({ after: '0'.repeat(40), head_commit: null });
  });

  it('a check_run webhook names its check suite as GitHub does: head branch, head SHA, status and conclusion (the REST check run only its id)', async () => {
    const sha = await pushBranch('feature/suite');
    const id = await fake.control.setCheck(repo.fullName, { sha, name: 'ci', status: 'in_progress' });
    await fake.control.updateCheck(repo.fullName, id, { conclusion: 'success' });
    const [completed] = await receiver.waitFor((d) => ofThisRepo(d) && d.event === 'check_run' && d.body.action === 'completed');
    expect(completed!.body.check_run.check_suite).toMatchObject({ head_branch: 'feature/suite', head_sha: sha, status: 'completed', conclusion: 'success', after: sha });
    const { octokit } = octokitFor(fake);
    expect((await octokit.rest.checks.get({ owner, repo: name(), check_run_id: id })).data.check_suite).toEqual({ id: completed!.body.check_run.check_suite.id });
  });

  it('a check suite completes only once all its runs have, and concludes by GitHub\'s precedence over their conclusions', async () => {
    const suiteOf = async (branch: string, runs: ({ conclusion: 'success' | 'failure' | 'neutral' | 'skipped' | 'timed_out' } | { status: 'in_progress' })[]) => {
      const sha = await pushBranch(branch);
      // Every run started before any completes: the suite completes once, when the last of them does.
      const ids = [];
      for (const i of runs.keys()) ids.push(await fake.control.setCheck(repo.fullName, { sha, name: `check-${i}`, status: 'in_progress' }));
      for (const [i, run] of runs.entries()) if ('conclusion' in run) await fake.control.updateCheck(repo.fullName, ids[i]!, run);
      return { sha, ids };
    };
    const suiteCompleted = async (sha: string) => {
      const [delivery] = await receiver.waitFor((d) => ofThisRepo(d) && d.event === 'check_suite' && d.body.check_suite.head_sha === sha);
      return delivery!.body.check_suite as { status: string; conclusion: string };
    };
    const cases: [string, Parameters<typeof suiteOf>[1], string][] = [
      ['feature/green-neutral', [{ conclusion: 'success' }, { conclusion: 'neutral' }], 'success'],
      ['feature/green-skipped', [{ conclusion: 'skipped' }, { conclusion: 'success' }], 'success'],
      ['feature/green-red', [{ conclusion: 'success' }, { conclusion: 'failure' }], 'failure'],
      ['feature/neutral-timed-out', [{ conclusion: 'neutral' }, { conclusion: 'timed_out' }], 'timed_out'],
      ['feature/all-neutral', [{ conclusion: 'neutral' }, { conclusion: 'neutral' }], 'neutral'],
      ['feature/all-skipped', [{ conclusion: 'skipped' }], 'skipped'],
    ];
    for (const [branch, runs, conclusion] of cases) {
      const { sha } = await suiteOf(branch, runs);
      expect({ branch, suite: await suiteCompleted(sha) }).toMatchObject({ branch, suite: { status: 'completed', conclusion } });
    }

    // A run still in progress: the suite is in progress, with no conclusion, whatever the others concluded; it completes with the last run.
    const { sha, ids } = await suiteOf('feature/still-running', [{ conclusion: 'failure' }, { status: 'in_progress' }]);
    const [completed] = await receiver.waitFor((d) => ofThisRepo(d) && d.event === 'check_run' && d.body.action === 'completed' && d.body.check_run.head_sha === sha && d.body.check_run.name === 'check-0');
    expect(completed!.body.check_run.check_suite).toMatchObject({ status: 'in_progress', conclusion: null });
    expect(receiver.received.filter((d) => ofThisRepo(d) && d.event === 'check_suite' && d.body.check_suite.head_sha === sha)).toEqual([]);
    await fake.control.updateCheck(repo.fullName, ids[1]!, { conclusion: 'success' });
    expect(await suiteCompleted(sha)).toMatchObject({ status: 'completed', conclusion: 'failure' });
  });

  it('a review someone submits is a pull_request_review event', async () => {
    const { octokit } = octokitFor(fake);
    const head = await pushBranch('feature/review');
    const { data: pr } = await octokit.rest.pulls.create({ owner, repo: name(), head: 'feature/review', base: 'main', title: 'review me' });
    await fake.control.submitReview(repo.fullName, pr.number, { state: 'CHANGES_REQUESTED', body: 'Please fix', user: 'alice' });
    const [review] = await receiver.waitFor((d) => ofThisRepo(d) && d.event === 'pull_request_review');
    expect(review!.body).toMatchObject({ action: 'submitted', review: { state: 'changes_requested', commit_id: head, user: { login: 'alice' } }, pull_request: { number: pr.number } });
  });

  it('a receiver with another secret sees the signature fail', async () => {
    const wrong = await startWebhookReceiver('not-the-secret');
    try {
      await fake.control.setWebhooks([{ url: wrong.url, secret: SECRET }]);
      const sha = await pushBranch('feature/wrong');
      await fake.control.setStatus(repo.fullName, { sha, context: 'ci', state: 'success' });
      const [status] = await wrong.waitFor((d) => ofThisRepo(d) && d.event === 'status');
      expect(status!.signatureValid).toBe(false);
    } finally {
      await fake.control.setWebhooks([{ url: receiver.url, secret: SECRET }]);
      await wrong.close();
    }
  });

  it('X-GitHub-Delivery names the event: every hook\'s delivery of it carries the same GUID (GitHub: "shared with all deliveries for all webhooks that subscribe to this event")', async () => {
    const second = await startWebhookReceiver(SECRET);
    try {
      await fake.control.setWebhooks([
        { url: receiver.url, secret: SECRET },
        { url: second.url, secret: SECRET },
      ]);
      const sha = await pushBranch('feature/two-hooks');
      await fake.control.setStatus(repo.fullName, { sha, context: 'ci', state: 'pending' });
      const [atFirst] = await receiver.waitFor((d) => ofThisRepo(d) && d.event === 'status');
      const [atSecond] = await second.waitFor((d) => ofThisRepo(d) && d.event === 'status');
      expect(atSecond!.id).toBe(atFirst!.id);
      expect(atSecond!.headers['x-github-hook-id']).not.toBe(atFirst!.headers['x-github-hook-id']);
      const views = (await fake.control.deliveries({ event: 'status' })).filter((d) => d.id === atFirst!.id);
      expect(views.map((d) => d.hookId)).toHaveLength(2);
      // Redelivered: every hook's delivery of the event again, with its GUID.
      await fake.control.redeliver(atFirst!.id);
      await receiver.waitFor((d) => d.id === atFirst!.id, 2);
      await second.waitFor((d) => d.id === atFirst!.id, 2);
    } finally {
      await fake.control.setWebhooks([{ url: receiver.url, secret: SECRET }]);
      await second.close();
    }
  });

  it('a redelivery keeps the delivery id and body', async () => {
    const sha = await pushBranch('feature/redeliver');
    await fake.control.setStatus(repo.fullName, { sha, context: 'ci', state: 'pending' });
    const [first] = await receiver.waitFor((d) => ofThisRepo(d) && d.event === 'status');
    await fake.control.redeliver(first!.id);
    const both = await receiver.waitFor((d) => d.id === first!.id, 2);
    expect(both[1]!.body).toEqual(both[0]!.body);
    const [view] = (await fake.control.deliveries({ event: 'status' })).filter((d) => d.id === first!.id);
    expect(view!.attempts.map((a) => [a.status, a.redelivery])).toEqual([
      [202, false],
      [202, true],
    ]);
  });

  it('held deliveries are sent when released, in the order asked for (reordered)', async () => {
    const sha = await pushBranch('feature/order');
    await fake.control.holdDeliveries();
    await fake.control.setStatus(repo.fullName, { sha, context: 'one', state: 'pending' });
    await fake.control.setStatus(repo.fullName, { sha, context: 'two', state: 'success' });
    const held = (await fake.control.deliveries({ event: 'status' })).filter((d) => d.payload.repository.full_name === repo.fullName);
    expect(held.map((d) => [d.payload.context, d.state])).toEqual([
      ['one', 'held'],
      ['two', 'held'],
    ]);
    expect(receiver.received.filter((d) => ofThisRepo(d) && d.event === 'status')).toHaveLength(0);
    await fake.control.releaseDeliveries({ order: [held[1]!.id, held[0]!.id] });
    const arrived = await receiver.waitFor((d) => ofThisRepo(d) && d.event === 'status', 2);
    expect(arrived.map((d) => d.body.context)).toEqual(['two', 'one']);
  });

  it('a dropped delivery is never sent until redelivered; a duplicated one arrives twice with one id', async () => {
    const sha = await pushBranch('feature/drop');
    await fake.control.onNextDeliveries({ event: 'status', effect: 'drop' });
    await fake.control.setStatus(repo.fullName, { sha, context: 'dropped', state: 'success' });
    await fake.control.onNextDeliveries({ event: 'status', effect: 'duplicate' });
    await fake.control.setStatus(repo.fullName, { sha, context: 'twice', state: 'success' });
    const twice = await receiver.waitFor((d) => ofThisRepo(d) && d.body.context === 'twice', 2);
    expect(twice[0]!.id).toBe(twice[1]!.id);
    // The drop happened before the duplicate was sent: had it been sent, it would have arrived first.
    expect(receiver.received.filter((d) => ofThisRepo(d) && d.body.context === 'dropped')).toHaveLength(0);
    const dropped = (await fake.control.deliveries({ event: 'status' })).find((d) => d.payload.context === 'dropped' && d.payload.repository.full_name === repo.fullName)!;
    expect(dropped.state).toBe('dropped');
    await fake.control.redeliver(dropped.id);
    const [late] = await receiver.waitFor((d) => ofThisRepo(d) && d.body.context === 'dropped');
    expect(late!.id).toBe(dropped.id);
  });

  it('a delayed delivery is sent no sooner than its delay after it was created', async () => {
    const sha = await pushBranch('feature/delay');
    await fake.control.onNextDeliveries({ event: 'status', effect: 'delay', delayMs: 300 });
    await fake.control.setStatus(repo.fullName, { sha, context: 'slow', state: 'success' });
    await receiver.waitFor((d) => ofThisRepo(d) && d.body.context === 'slow');
    const [delivery] = (await fake.control.deliveries({ event: 'status' })).filter((d) => d.payload.context === 'slow' && d.payload.repository.full_name === repo.fullName);
    expect(Date.parse(delivery!.attempts[0]!.at) - Date.parse(delivery!.createdAt)).toBeGreaterThanOrEqual(300);
  });

  it('records a receiver that answers with an error as a failed delivery', async () => {
    await fake.control.setWebhooks([{ url: 'http://127.0.0.1:1/webhooks/github', secret: SECRET }]);
    try {
      const sha = await pushBranch('feature/unreachable');
      await fake.control.setStatus(repo.fullName, { sha, context: 'lost', state: 'success' });
      const failed = await fake.control.waitForDelivery((d) => d.payload.context === 'lost' && d.state === 'failed');
      expect(failed.attempts[0]!.error).not.toBeNull();
    } finally {
      await fake.control.setWebhooks([{ url: receiver.url, secret: SECRET }]);
    }
  });
});

describe('rate limits, server errors and credentials', () => {
  it('a secondary rate limit with retry-after: Octokit waits that long and the request happens once', async () => {
    const { octokit, events } = octokitFor(fake);
    await pushBranch('feature/secondary');
    await fake.control.injectFault({ kind: 'secondary_rate_limit', path: '/pulls', method: 'POST', retryAfterSeconds: 3 });
    const { data } = await octokit.rest.pulls.create({ owner, repo: name(), head: 'feature/secondary', base: 'main', title: 'limited' });
    expect(data.number).toBe(1);
    expect(events.secondary).toEqual([{ retryAfter: 3, retryCount: 0 }]);
    const creates = await fake.control.requests({ method: 'POST', path: `/repos/${repo.fullName}/pulls` });
    expect(creates.map((r) => [r.status, r.fault])).toEqual([
      [403, 'secondary_rate_limit'],
      [201, null],
    ]);
    expect(await fake.control.pulls(repo.fullName)).toHaveLength(1);
  });

  it('a secondary rate limit as a 429 (GitHub answers with 403 or 429): its message and retry-after; Octokit waits that long', async () => {
    await fake.control.injectFault({ kind: 'secondary_rate_limit', path: `/repos/${repo.fullName}`, method: 'GET', status: 429, retryAfterSeconds: 1 });
    const response = await fetch(`${fake.url}/repos/${repo.fullName}`);
    expect(response.status).toBe(429);
    expect(response.headers.get('retry-after')).toBe('1');
    expect((await response.json()) as { message: string; status: string }).toMatchObject({ message: expect.stringMatching(/secondary rate limit/), status: '429' });
    const { octokit, events } = octokitFor(fake);
    await fake.control.injectFault({ kind: 'secondary_rate_limit', path: `/repos/${repo.fullName}`, method: 'GET', status: 429, retryAfterSeconds: 1 });
    await octokit.rest.repos.get({ owner, repo: name() });
    expect(events.secondary).toEqual([{ retryAfter: 1, retryCount: 0 }]);
  });

  it('a secondary rate limit without retry-after: Octokit falls back to its own wait', async () => {
    const { octokit, events } = octokitFor(fake, { fallbackSecondaryRateRetryAfter: 5 });
    await fake.control.injectFault({ kind: 'secondary_rate_limit', path: `/repos/${repo.fullName}` });
    await octokit.rest.repos.get({ owner, repo: name() });
    expect(events.secondary).toEqual([{ retryAfter: 5, retryCount: 0 }]);
  });

  it('a primary rate limit says when it resets (REST 403, GraphQL RATE_LIMITED)', async () => {
    const { octokit, events } = octokitFor(fake);
    await fake.control.injectFault({ kind: 'primary_rate_limit', path: `/repos/${repo.fullName}`, resetInSeconds: 2 });
    const response = await fetch(`${fake.url}/repos/${repo.fullName}`);
    expect(response.status).toBe(403);
    expect(response.headers.get('x-ratelimit-remaining')).toBe('0');
    expect(Number(response.headers.get('x-ratelimit-reset'))).toBeGreaterThan(Date.now() / 1000);
    expect(((await response.json()) as { message: string }).message).toMatch(/^API rate limit exceeded/);

    await fake.control.injectFault({ kind: 'primary_rate_limit', path: '/graphql', resetInSeconds: 1 });
    const result = await octokit.graphql<{ repository: { nameWithOwner: string } }>(`{ repository(owner: "${owner}", name: "${name()}") { nameWithOwner } }`);
    expect(result.repository.nameWithOwner).toBe(repo.fullName);
    expect(events.primary).toHaveLength(1);
    expect(events.primary[0]!.retryAfter).toBeGreaterThanOrEqual(1);
  });

  it('a primary rate limit answered 429 (GitHub answers it with 403 or 429): remaining 0 and the reset, as with 403', async () => {
    await fake.control.injectFault({ kind: 'primary_rate_limit', status: 429, path: `/repos/${repo.fullName}`, resetInSeconds: 30 });
    const response = await fetch(`${fake.url}/repos/${repo.fullName}`);
    expect(response.status).toBe(429);
    expect(response.headers.get('x-ratelimit-remaining')).toBe('0');
    expect(Number(response.headers.get('x-ratelimit-reset'))).toBeGreaterThan(Date.now() / 1000 + 10);
    expect(((await response.json()) as { message: string }).message).toMatch(/^API rate limit exceeded/);
    expect((await fetch(`${fake.url}/repos/${repo.fullName}`)).status).toBe(200);
  });

  it('a permission the token lacks: REST 403, GraphQL a FORBIDDEN error; nothing happens, nothing is retried', async () => {
    const { octokit } = octokitFor(fake);
    await pushBranch('feature/forbidden');
    await fake.control.injectFault({ kind: 'forbidden', method: 'POST', path: `/repos/${repo.fullName}/pulls` });
    const refused = (await octokit.rest.pulls.create({ owner, repo: name(), head: 'feature/forbidden', base: 'main', title: 'f' }).catch((e: unknown) => e)) as RequestError;
    expect(refused.status).toBe(403);
    expect(refused.message).toMatch(/Resource not accessible by personal access token/);
    expect((await fake.control.pulls(repo.fullName)).filter((p) => p.head.ref === 'feature/forbidden')).toEqual([]);
    expect(await fake.control.requests({ method: 'POST', path: `/repos/${repo.fullName}/pulls` })).toHaveLength(1);

    await fake.control.injectFault({ kind: 'forbidden', path: '/graphql' });
    const error = (await octokit.graphql(`{ viewer { login } }`).catch((e: unknown) => e)) as { errors?: { type: string; message: string }[] };
    expect(error.errors).toEqual([{ type: 'FORBIDDEN', message: 'Resource not accessible by personal access token' }]);
  });

  it('a stale read: a replica behind the PR\'s last change answers the PR as it was before it, updated_at earlier; then reads are current again', async () => {
    const { octokit } = octokitFor(fake);
    await pushBranch('feature/stale');
    clone.git('push', '-q', 'origin', 'origin/main:refs/heads/develop');
    await fake.control.refresh();
    const { data: pr } = await octokit.rest.pulls.create({ owner, repo: name(), head: 'feature/stale', base: 'main', title: 'stale' });
    const before = (await octokit.rest.pulls.get({ owner, repo: name(), pull_number: pr.number })).data;
    // GitHub's times are to the second: the change comes a second later.
    await new Promise((resolve) => setTimeout(resolve, 1000 - (Date.now() % 1000) + 10));
    await octokit.rest.pulls.update({ owner, repo: name(), pull_number: pr.number, base: 'develop' });
    const current = (await octokit.rest.pulls.get({ owner, repo: name(), pull_number: pr.number })).data;
    expect(Date.parse(current.updated_at)).toBeGreaterThan(Date.parse(before.updated_at));

    await fake.control.injectFault({ kind: 'stale_read', method: 'GET', path: `/pulls/${pr.number}` });
    const stale = (await octokit.rest.pulls.get({ owner, repo: name(), pull_number: pr.number })).data;
    expect(stale).toMatchObject({ base: { ref: 'main' }, updated_at: before.updated_at });
    expect((await octokit.rest.pulls.get({ owner, repo: name(), pull_number: pr.number })).data).toMatchObject({ base: { ref: 'develop' }, updated_at: current.updated_at });
    expect((await fake.control.requests({ method: 'GET', path: `/pulls/${pr.number}` })).map((r) => r.fault)).toEqual([null, null, 'stale_read', null]);
  });

  it('a stale read of a PR changed in the same second as the version before: that version, with the same updated_at (GitHub gives it to the second)', async () => {
    const { octokit } = octokitFor(fake);
    await pushBranch('feature/same-second');
    clone.git('push', '-q', 'origin', 'origin/main:refs/heads/develop');
    await fake.control.refresh();
    const held = await fake.control.holdClock();
    try {
      const { data: pr } = await octokit.rest.pulls.create({ owner, repo: name(), head: 'feature/same-second', base: 'main', title: 'same second' });
      const before = (await octokit.rest.pulls.get({ owner, repo: name(), pull_number: pr.number })).data;
      await octokit.rest.pulls.update({ owner, repo: name(), pull_number: pr.number, base: 'develop' });
      const current = (await octokit.rest.pulls.get({ owner, repo: name(), pull_number: pr.number })).data;
      expect([before.updated_at, current.updated_at]).toEqual([held, held]);

      await fake.control.injectFault({ kind: 'stale_read', method: 'GET', path: `/pulls/${pr.number}` });
      const stale = (await octokit.rest.pulls.get({ owner, repo: name(), pull_number: pr.number })).data;
      expect(stale).toMatchObject({ base: { ref: 'main' }, updated_at: held });
      expect((await octokit.rest.pulls.get({ owner, repo: name(), pull_number: pr.number })).data).toMatchObject({ base: { ref: 'develop' }, updated_at: held });
    } finally {
      await fake.control.releaseClock();
    }
  });

  it('GitHub\'s clock held: every change shows the held second; released, times go on from now', async () => {
    const { octokit } = octokitFor(fake);
    await pushBranch('feature/clock');
    const held = await fake.control.holdClock();
    expect(held).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/);
    const { data: pr } = await octokit.rest.pulls.create({ owner, repo: name(), head: 'feature/clock', base: 'main', title: 'clock' });
    await new Promise((resolve) => setTimeout(resolve, 1100));
    const { data: edited } = await octokit.rest.pulls.update({ owner, repo: name(), pull_number: pr.number, title: 'clock, edited' });
    expect([pr.created_at, edited.updated_at]).toEqual([held, held]);
    await fake.control.releaseClock();
    const { data: later } = await octokit.rest.pulls.update({ owner, repo: name(), pull_number: pr.number, title: 'clock, edited again' });
    expect(Date.parse(later.updated_at)).toBeGreaterThan(Date.parse(held));
  });

  it('a fault with notBefore waits for that moment: a request before it is answered as usual, the first after it meets the fault; a notBefore that is no time is refused', async () => {
    const { octokit } = octokitFor(fake);
    const path = `/repos/${repo.fullName}`;
    await fake.control.injectFault({ kind: 'server_error', method: 'GET', path, status: 500, notBefore: new Date(Date.now() + 800).toISOString() });
    await octokit.rest.repos.get({ owner, repo: name(), request: { retries: 0 } });
    await new Promise((resolve) => setTimeout(resolve, 900));
    const late = await octokit.rest.repos.get({ owner, repo: name(), request: { retries: 0 } }).catch((e: unknown) => e as RequestError);
    expect((late as RequestError).status).toBe(500);
    expect((await fake.control.requests({ method: 'GET', path })).filter((r) => r.path === path).slice(-2).map((r) => r.status)).toEqual([200, 500]);
    await expect(fake.control.injectFault({ kind: 'server_error', notBefore: 'soon' })).rejects.toThrow(/notBefore is not a time/);
  });

  it('a 5xx is retried by the retry plugin; a 405 or 409 is not', async () => {
    const { octokit } = octokitFor(fake);
    await fake.control.injectFault({ kind: 'server_error', path: `/repos/${repo.fullName}`, status: 502, count: 2 });
    const { data } = await octokit.rest.repos.get({ owner, repo: name() });
    expect(data.full_name).toBe(repo.fullName);
    const gets = await fake.control.requests({ method: 'GET', path: `/repos/${repo.fullName}` });
    expect(gets.slice(-3).map((r) => r.status)).toEqual([502, 502, 200]);

    const head = await pushBranch('feature/not-retried');
    const pr = await octokit.rest.pulls.create({ owner, repo: name(), head: 'feature/not-retried', base: 'main', title: 't', draft: true });
    const error = await octokit.rest.pulls.merge({ owner, repo: name(), pull_number: pr.data.number, sha: head }).catch((e: unknown) => e as RequestError);
    expect((error as RequestError).status).toBe(405);
    expect(await fake.control.requests({ method: 'PUT', path: `/pulls/${pr.data.number}/merge` })).toHaveLength(1);
  });

  it('a lost response: the PR is created but the answer never arrives; Octokit retries and meets GitHub’s 422', async () => {
    const { octokit } = octokitFor(fake);
    await pushBranch('feature/lost');
    await fake.control.injectFault({ kind: 'lost_response', method: 'POST', path: `/repos/${repo.fullName}/pulls` });
    const error = (await octokit.rest.pulls.create({ owner, repo: name(), head: 'feature/lost', base: 'main', title: 'lost' }).catch((e: unknown) => e)) as RequestError;
    expect(error.status).toBe(422);
    expect(JSON.stringify(error.response?.data)).toContain(`A pull request already exists for ${owner}:feature/lost.`);
    const creates = await fake.control.requests({ method: 'POST', path: `/repos/${repo.fullName}/pulls` });
    expect(creates.map((r) => [r.status, r.fault, r.answered])).toEqual([
      [201, 'lost_response', false],
      [422, null, true],
    ]);
    expect(await fake.control.pulls(repo.fullName)).toHaveLength(1);
  });

  it('a delayed response: the effect is visible on GitHub before the caller hears of it', async () => {
    const { octokit } = octokitFor(fake);
    await pushBranch('feature/slow');
    await fake.control.injectFault({ kind: 'delayed_response', method: 'POST', path: `/repos/${repo.fullName}/pulls`, delayMs: 60_000 });
    let answered = false;
    const creating = octokit.rest.pulls.create({ owner, repo: name(), head: 'feature/slow', base: 'main', title: 'slow' }).finally(() => {
      answered = true;
    });
    const [pull] = await eventually(async () => {
      const pulls = await fake.control.pulls(repo.fullName);
      return pulls.length ? pulls : undefined;
    }, { what: 'the PR to exist on the fake' });
    expect(pull!.head.ref).toBe('feature/slow');
    expect(answered).toBe(false);
    const [request] = await fake.control.requests({ method: 'POST', path: `/repos/${repo.fullName}/pulls` });
    expect(request).toMatchObject({ status: 201, answered: false, fault: 'delayed_response' });
    await fake.control.clearFaults();
    // The answer stays pending (a caller SIGKILLed now would never hear it); closing the fake ends it.
    void creating.catch(() => undefined);
  });

  it('with tokens configured, a wrong token is 401 Bad credentials and no token is 401 Requires authentication', async () => {
    await fake.control.setTokens(['good-token']);
    try {
      const bad = await octokitFor(fake, { auth: 'bad-token' }).octokit.rest.repos.get({ owner, repo: name() }).catch((e: unknown) => e as RequestError);
      expect((bad as RequestError).status).toBe(401);
      expect((bad as RequestError).message).toContain('Bad credentials');
      const anonymous = await fetch(`${fake.url}/repos/${repo.fullName}`);
      expect(anonymous.status).toBe(401);
      expect(await anonymous.json()).toMatchObject({ message: 'Requires authentication' });
      const good = await octokitFor(fake, { auth: 'good-token' }).octokit.rest.repos.get({ owner, repo: name() });
      expect(good.status).toBe(200);
    } finally {
      await fake.control.setTokens(null);
    }
  });
});
