import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { RequestError } from '@octokit/request-error';
import { eventually } from '@gantry/testing';
import { startGitHubFake, type GitHubFake, type RepositorySummary } from './index.js';
import { Clone, octokitFor, type RetryingOctokitInstance } from './testing/harness.js';

const owner = 'acme';
let fake: GitHubFake;
let octokit: RetryingOctokitInstance;
let repo: RepositorySummary;
let clone: Clone;
let counter = 0;

beforeAll(async () => {
  fake = await startGitHubFake({ webhooks: [] });
  octokit = octokitFor(fake).octokit;
});
afterAll(() => fake.close());

beforeEach(async () => {
  counter += 1;
  repo = await fake.control.createRepository({ owner, name: `life-${counter}`, settings: { allowAutoMerge: true }, initialFiles: { 'app.txt': 'a\nb\nc\n' } });
  clone = new Clone(repo.cloneUrl);
  await fake.control.setMergeabilityMode('manual');
});
afterEach(() => clone.remove());

const name = () => repo.fullName.split('/')[1]!;
const getPull = (n: number) => octokit.rest.pulls.get({ owner, repo: name(), pull_number: n }).then((r) => r.data);

async function open(branch: string, files: Record<string, string> = { [`${branch}.txt`]: 'x\n' }) {
  const sha = clone.commitAndPush(branch, files, `Work on ${branch}`);
  await fake.control.refresh();
  const { data } = await octokit.rest.pulls.create({ owner, repo: name(), head: branch, base: 'main', title: branch });
  await fake.control.computeMergeability();
  return { pr: data, sha };
}

describe('auto-merge and a moving head', () => {
  it('waits for the new head’s own required check after a push, and merges that head', async () => {
    await fake.control.updateRepository(repo.fullName, { requiredChecks: ['ci'] });
    const { pr, sha: first } = await open('story/moving');
    await octokit.graphql('mutation($id: ID!, $oid: GitObjectID!) { enablePullRequestAutoMerge(input: { pullRequestId: $id, expectedHeadOid: $oid, mergeMethod: MERGE }) { clientMutationId } }', {
      id: pr.node_id,
      oid: first,
    });
    const second = clone.commitAndPush('story/moving', { 'later.txt': 'later\n' }, 'A later task');
    await fake.control.refresh();
    await fake.control.computeMergeability();

    // The old head's green check does not merge the new head.
    await fake.control.setCheck(repo.fullName, { sha: first, name: 'ci', conclusion: 'success' });
    expect(await getPull(pr.number)).toMatchObject({ state: 'open', mergeable_state: 'blocked', head: { sha: second }, auto_merge: { merge_method: 'merge' } });

    await fake.control.setCheck(repo.fullName, { sha: second, name: 'ci', conclusion: 'success' });
    const merged = await getPull(pr.number);
    expect(merged).toMatchObject({ state: 'closed', merged: true });
    clone.git('fetch', '-q', 'origin');
    expect(clone.git('rev-parse', `${merged.merge_commit_sha}^2`)).toBe(second);
  });

  it('refuses auto-merge for a head that is not the expected one', async () => {
    await fake.control.updateRepository(repo.fullName, { requiredChecks: ['ci'] });
    const { pr } = await open('story/expected');
    const wrong = 'f'.repeat(40);
    const error = (await octokit
      .graphql('mutation($id: ID!, $oid: GitObjectID!) { enablePullRequestAutoMerge(input: { pullRequestId: $id, expectedHeadOid: $oid }) { clientMutationId } }', { id: pr.node_id, oid: wrong })
      .catch((e: unknown) => e)) as { errors: { type: string }[] };
    expect(error.errors[0]!.type).toBe('UNPROCESSABLE');
    expect((await getPull(pr.number)).auto_merge).toBeNull();
  });

  it('closing a PR clears its auto-merge', async () => {
    await fake.control.updateRepository(repo.fullName, { requiredChecks: ['ci'] });
    const { pr, sha } = await open('story/closed');
    await octokit.graphql('mutation($id: ID!) { enablePullRequestAutoMerge(input: { pullRequestId: $id }) { clientMutationId } }', { id: pr.node_id });
    await octokit.rest.pulls.update({ owner, repo: name(), pull_number: pr.number, state: 'closed' });
    await fake.control.setCheck(repo.fullName, { sha, name: 'ci', conclusion: 'success' });
    expect(await getPull(pr.number)).toMatchObject({ state: 'closed', merged: false, auto_merge: null });
  });
});

describe('closing and reopening', () => {
  const close = (n: number) => octokit.rest.pulls.update({ owner, repo: name(), pull_number: n, state: 'closed' });
  const reopen = (n: number, extra: { title?: string } = {}) => octokit.rest.pulls.update({ owner, repo: name(), pull_number: n, state: 'open', ...extra });

  it('a PR reopened after more commits reached its branch shows the branch as it is now, and mergeability for that head', async () => {
    const { pr } = await open('story/reopen-later');
    await close(pr.number);
    const later = clone.commitAndPush('story/reopen-later', { 'later.txt': 'later\n' }, 'Pushed while closed');
    await fake.control.refresh();
    const { data } = await reopen(pr.number);
    expect(data).toMatchObject({ state: 'open', head: { sha: later } });
    await fake.control.computeMergeability();
    expect(await getPull(pr.number)).toMatchObject({ head: { sha: later }, mergeable: true, commits: 2 });
  });

  it('refuses to reopen a PR whose branch was force-pushed or deleted while it was closed, and changes nothing', async () => {
    const { pr, sha } = await open('story/reopen-forced');
    await close(pr.number);
    // Someone rewrites the branch from main: its tip no longer contains the PR's head.
    clone.git('checkout', '-q', '-B', 'story/reopen-forced', 'origin/main');
    clone.git('commit', '-q', '--allow-empty', '-m', 'Rewritten');
    clone.git('push', '-q', '-f', 'origin', 'HEAD:refs/heads/story/reopen-forced');
    await fake.control.refresh();
    const forced = (await reopen(pr.number, { title: 'renamed' }).catch((e: unknown) => e)) as RequestError;
    expect(forced.status).toBe(422);
    expect(forced.response?.data).toMatchObject({
      message: 'Validation Failed',
      errors: [{ resource: 'PullRequest', code: 'custom', field: 'state', message: 'state cannot be changed. The story/reopen-forced branch was force-pushed or recreated.' }],
    });
    expect(await getPull(pr.number)).toMatchObject({ state: 'closed', title: 'story/reopen-forced', head: { sha } });

    const { pr: gone } = await open('story/reopen-deleted');
    await close(gone.number);
    clone.git('push', '-q', 'origin', '--delete', 'story/reopen-deleted');
    await fake.control.refresh();
    const deleted = (await reopen(gone.number).catch((e: unknown) => e)) as RequestError;
    expect(deleted.status).toBe(422);
    expect(deleted.response?.data).toMatchObject({ errors: [{ resource: 'PullRequest', code: 'custom', field: 'state' }] });
    expect((await getPull(gone.number)).state).toBe('closed');
  });

  it('refuses to reopen a PR while another open PR has the same head and base: one open PR per branch', async () => {
    const { pr: first } = await open('story/reopen-twice');
    await close(first.number);
    const { data: second } = await octokit.rest.pulls.create({ owner, repo: name(), head: 'story/reopen-twice', base: 'main', title: 'again' });
    const error = (await reopen(first.number).catch((e: unknown) => e)) as RequestError;
    expect(error.status).toBe(422);
    expect(error.response?.data).toMatchObject({ message: 'Validation Failed', errors: [{ resource: 'PullRequest', code: 'custom', field: 'state' }] });
    const listed = await octokit.rest.pulls.list({ owner, repo: name(), head: `${owner}:story/reopen-twice`, state: 'open' });
    expect(listed.data.map((p) => p.number)).toEqual([second.number]);
  });

  it('refuses a new base for a closed PR with GitHub’s message', async () => {
    clone.git('push', '-q', 'origin', 'origin/main:refs/heads/release-closed');
    const { pr } = await open('story/closed-base');
    await close(pr.number);
    const error = (await octokit.rest.pulls.update({ owner, repo: name(), pull_number: pr.number, base: 'release-closed' }).catch((e: unknown) => e)) as RequestError;
    expect(error.status).toBe(422);
    expect(error.response?.data).toMatchObject({ errors: [{ resource: 'PullRequest', code: 'invalid', field: 'base', message: 'Cannot change the base branch of a closed pull request.' }] });
  });
});

describe('automatic checks (a CI stand-in)', () => {
  afterEach(() => fake.control.setAutoChecks([]));

  it('reports the configured checks on each new PR head, in progress then concluded, and auto-merge follows', async () => {
    await fake.control.setMergeabilityMode('auto');
    await fake.control.updateRepository(repo.fullName, { requiredChecks: ['ci'] });
    await fake.control.setAutoChecks([{ name: 'ci', delayMs: 100_000 }]);
    const { pr, sha } = await open('story/ci');
    const runs = await octokit.rest.checks.listForRef({ owner, repo: name(), ref: sha });
    expect(runs.data.check_runs.map((r) => [r.name, r.status])).toEqual([['ci', 'in_progress']]);
    await octokit.graphql('mutation($id: ID!) { enablePullRequestAutoMerge(input: { pullRequestId: $id }) { clientMutationId } }', { id: pr.node_id });

    // The next head gets its own run, which finishes quickly and lets auto-merge merge that head.
    await fake.control.setAutoChecks([{ name: 'ci', delayMs: 10 }]);
    const next = clone.commitAndPush('story/ci', { 'next.txt': 'n\n' }, 'Next task');
    await fake.control.refresh();
    // The timer's completion is GitHub's doing, not the test's: wait for the merge it leads to.
    const merged = await eventually(async () => {
      const pull = await getPull(pr.number);
      return pull.merged ? pull : undefined;
    }, { what: 'the auto-merge after the automatic check' });
    expect(merged.head.sha).toBe(next);
    const nextRuns = await octokit.rest.checks.listForRef({ owner, repo: name(), ref: next });
    expect(nextRuns.data.check_runs.map((r) => [r.name, r.conclusion])).toEqual([['ci', 'success']]);
  });
});

describe('the base branch', () => {
  it('a base that moves makes mergeability unknown again; behind only matters when protection is strict', async () => {
    const { pr } = await open('story/behind');
    expect((await getPull(pr.number)).mergeable_state).toBe('clean');
    await fake.control.commit(repo.fullName, { branch: 'main', files: { 'other.txt': 'other\n' }, message: 'Someone else’s change' });
    const moved = await getPull(pr.number);
    expect(moved.mergeable).toBeNull();
    expect(moved.base.sha).toBe(await fake.control.branchSha(repo.fullName, 'main'));
    await fake.control.computeMergeability();
    expect((await getPull(pr.number)).mergeable_state).toBe('clean');
    await fake.control.updateRepository(repo.fullName, { strict: true });
    expect((await getPull(pr.number)).mergeable_state).toBe('behind');
    const error = (await octokit.rest.pulls.merge({ owner, repo: name(), pull_number: pr.number }).catch((e: unknown) => e)) as RequestError;
    expect(error.status).toBe(405);
  });

  it('changing a PR’s base re-targets it (edited) and recomputes mergeability', async () => {
    clone.git('push', '-q', 'origin', 'origin/main:refs/heads/release');
    const { pr } = await open('story/retarget');
    const { data } = await octokit.rest.pulls.update({ owner, repo: name(), pull_number: pr.number, base: 'release' });
    expect(data.base.ref).toBe('release');
    expect(data.mergeable).toBeNull();
    const missing = (await octokit.rest.pulls.update({ owner, repo: name(), pull_number: pr.number, base: 'nope' }).catch((e: unknown) => e)) as RequestError;
    expect(missing.status).toBe(422);
  });

  it('a PR whose head branch was deleted stays open with its last head', async () => {
    const { pr, sha } = await open('story/deleted');
    clone.git('push', '-q', 'origin', '--delete', 'story/deleted');
    await fake.control.refresh();
    expect(await getPull(pr.number)).toMatchObject({ state: 'open', head: { sha } });
  });

  it('deletes the head branch after a merge when the repository says so', async () => {
    await fake.control.updateRepository(repo.fullName, { deleteBranchOnMerge: true });
    const { pr } = await open('story/cleanup');
    await octokit.rest.pulls.merge({ owner, repo: name(), pull_number: pr.number });
    expect(await fake.control.branchSha(repo.fullName, 'story/cleanup')).toBeNull();
  });
});

describe('concurrency and restarts', () => {
  it('two simultaneous creates for one branch: one PR, the other caller gets GitHub’s 422', async () => {
    clone.commitAndPush('story/race', { 'race.txt': 'r\n' }, 'Race');
    await fake.control.refresh();
    const attempts = await Promise.allSettled([1, 2].map(() => octokit.rest.pulls.create({ owner, repo: name(), head: 'story/race', base: 'main', title: 'race' })));
    expect(attempts.map((a) => a.status).sort()).toEqual(['fulfilled', 'rejected']);
    const rejected = attempts.find((a): a is PromiseRejectedResult => a.status === 'rejected')!;
    expect((rejected.reason as RequestError).status).toBe(422);
    expect(await fake.control.pulls(repo.fullName)).toHaveLength(1);
  });

  it('two simultaneous merges of one PR: one merges, the other is refused, the base has one merge', async () => {
    const { pr, sha } = await open('story/double-merge');
    const base = await fake.control.branchSha(repo.fullName, 'main');
    const attempts = await Promise.allSettled([1, 2].map(() => octokit.rest.pulls.merge({ owner, repo: name(), pull_number: pr.number, sha })));
    expect(attempts.map((a) => a.status).sort()).toEqual(['fulfilled', 'rejected']);
    clone.git('fetch', '-q', 'origin');
    expect(clone.git('rev-parse', 'origin/main^1')).toBe(base);
  });

  it('a restarted fake (same data directory) still has its repositories, PRs and checks', async () => {
    const dataDir = mkdtempSync(path.join(tmpdir(), 'github-fake-restart-'));
    try {
      const first = await startGitHubFake({ dataDir });
      const created = await first.control.createRepository({ owner, name: 'kept' });
      const local = new Clone(created.cloneUrl);
      const sha = local.commitAndPush('story/kept', { 'k.txt': 'k\n' }, 'Kept');
      await first.control.refresh();
      const client = octokitFor(first).octokit;
      await client.rest.pulls.create({ owner, repo: 'kept', head: 'story/kept', base: 'main', title: 'kept' });
      await first.control.setCheck(created.fullName, { sha, name: 'ci', conclusion: 'success' });
      await first.close();
      local.remove();

      const second = await startGitHubFake({ dataDir });
      try {
        const again = octokitFor(second).octokit;
        const { data } = await again.rest.pulls.get({ owner, repo: 'kept', pull_number: 1 });
        expect(data).toMatchObject({ state: 'open', head: { sha } });
        const runs = await again.rest.checks.listForRef({ owner, repo: 'kept', ref: sha });
        expect(runs.data.check_runs.map((r) => r.conclusion)).toEqual(['success']);
        const duplicate = (await again.rest.pulls.create({ owner, repo: 'kept', head: 'story/kept', base: 'main', title: 'again' }).catch((e: unknown) => e)) as RequestError;
        expect(duplicate.status).toBe(422);
      } finally {
        await second.close();
      }
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

describe('lists and pages', () => {
  it('paginates the PR list with GitHub’s Link header, and Octokit’s paginate reads every page', async () => {
    for (const branch of ['p/1', 'p/2', 'p/3']) {
      clone.commitAndPush(branch, { [`${branch}.txt`]: branch }, branch);
    }
    await fake.control.refresh();
    for (const branch of ['p/1', 'p/2', 'p/3']) await octokit.rest.pulls.create({ owner, repo: name(), head: branch, base: 'main', title: branch });
    const first = await octokit.rest.pulls.list({ owner, repo: name(), per_page: 2 });
    expect(first.data.map((p) => p.number)).toEqual([3, 2]);
    expect(first.headers.link).toContain('rel="next"');
    const all = await octokit.paginate(octokit.rest.pulls.list, { owner, repo: name(), per_page: 2 });
    expect(all.map((p) => p.number)).toEqual([3, 2, 1]);
  });

  it('pages check runs too, and Octokit’s paginate collects them all', async () => {
    const { sha } = await open('story/many-checks');
    for (const check of ['a', 'b', 'c']) await fake.control.setCheck(repo.fullName, { sha, name: check, conclusion: 'success' });
    const first = await octokit.rest.checks.listForRef({ owner, repo: name(), ref: sha, per_page: 2 });
    expect(first.data.total_count).toBe(3);
    expect(first.data.check_runs).toHaveLength(2);
    const all = await octokit.paginate(octokit.rest.checks.listForRef, { owner, repo: name(), ref: sha, per_page: 2 });
    expect(all.map((r) => r.name).sort()).toEqual(['a', 'b', 'c']);
  });

  it('pages the combined status’s statuses (newest first); its state and total_count are of them all', async () => {
    const { sha } = await open('story/many-statuses');
    await fake.control.setStatus(repo.fullName, { sha, context: 'ci/red', state: 'failure' });
    for (const context of ['a', 'b']) await fake.control.setStatus(repo.fullName, { sha, context, state: 'success' });
    const first = await octokit.rest.repos.getCombinedStatusForRef({ owner, repo: name(), ref: sha, per_page: 2 });
    expect(first.data).toMatchObject({ state: 'failure', total_count: 3 });
    expect(first.data.statuses.map((s) => s.context)).toEqual(['b', 'a']);
    expect(first.headers.link).toContain('rel="next"');
    const second = await octokit.rest.repos.getCombinedStatusForRef({ owner, repo: name(), ref: sha, per_page: 2, page: 2 });
    expect(second.data.statuses.map((s) => s.context)).toEqual(['ci/red']);
  });

  it('serves the PR’s html_url as a page', async () => {
    const { pr } = await open('story/page');
    const page = await fetch(pr.html_url);
    expect(page.status).toBe(200);
    expect(await page.text()).toContain(`${repo.fullName} #${pr.number}: story/page`);
  });
});

describe('connections kept alive', () => {
  it('a request sent on a kept-alive connection after the process was busy for 6 s is answered (a test running the fake in its own process blocks it with synchronous git)', async () => {
    await fake.control.refresh();
    // Busy without a turn of the event loop: the server's idle timer and the client's are both overdue
    // when the next request picks the idle connection.
    execFileSync('sleep', ['6']);
    await expect(fake.control.refresh()).resolves.toEqual({ ok: true });
  }, 30_000);
});
