import { execFileSync } from 'node:child_process';
import { RequestError } from '@octokit/request-error';
import { startGitHubFake, type GitHubFake, type RepositorySummary } from './index.js';
import { Clone, octokitFor, startWebhookReceiver, type RetryingOctokitInstance } from './testing/harness.js';

const SECRET = 'webhook-secret';
const owner = 'acme';

let fake: GitHubFake;
let receiver: Awaited<ReturnType<typeof startWebhookReceiver>>;
let octokit: RetryingOctokitInstance;
let repo: RepositorySummary;
let clone: Clone;
let counter = 0;

async function failure(promise: Promise<unknown>): Promise<RequestError> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof RequestError) return error;
    throw error;
  }
  throw new Error('expected the request to fail');
}

beforeAll(async () => {
  receiver = await startWebhookReceiver(SECRET);
  fake = await startGitHubFake({ webhooks: [{ url: receiver.url, secret: SECRET }] });
  octokit = octokitFor(fake).octokit;
});

afterAll(async () => {
  await fake.close();
  await receiver.close();
});

beforeEach(async () => {
  counter += 1;
  repo = await fake.control.createRepository({ owner, name: `shop-${counter}`, initialFiles: { 'README.md': '# shop\n', 'app.txt': 'one\ntwo\nthree\n' } });
  clone = new Clone(repo.cloneUrl);
  await fake.control.setMergeabilityMode('auto');
});

afterEach(() => clone.remove());

const name = () => repo.fullName.split('/')[1]!;

async function openPull(branch: string, extra: { draft?: boolean } = {}) {
  clone.commitAndPush(branch, { [`${branch}.txt`]: `work on ${branch}\n` }, `Work on ${branch}`);
  await fake.control.refresh();
  const { data } = await octokit.rest.pulls.create({ owner, repo: name(), head: branch, base: 'main', title: `PR for ${branch}`, ...extra });
  return data;
}

describe('opening pull requests', () => {
  it('opens a PR for a pushed branch and refuses a second one for the same head with GitHub’s 422', async () => {
    const pr = await openPull('feature/a');
    expect(pr.number).toBe(1);
    expect(pr.state).toBe('open');
    expect(pr.head.ref).toBe('feature/a');
    expect(pr.head.sha).toBe(clone.git('rev-parse', 'HEAD'));

    const error = await failure(octokit.rest.pulls.create({ owner, repo: name(), head: `${owner}:feature/a`, base: 'main', title: 'again' }));
    expect(error.status).toBe(422);
    expect(error.response?.data).toMatchObject({
      message: 'Validation Failed',
      errors: [{ resource: 'PullRequest', code: 'custom', message: `A pull request already exists for ${owner}:feature/a.` }],
    });
    expect(await fake.control.pulls(repo.fullName)).toHaveLength(1);

    const listed = await octokit.rest.pulls.list({ owner, repo: name(), head: `${owner}:feature/a`, state: 'open' });
    expect(listed.data.map((p) => p.number)).toEqual([1]);
    const none = await octokit.rest.pulls.list({ owner, repo: name(), head: `${owner}:feature/other` });
    expect(none.data).toEqual([]);
    // GitHub does not treat owner names case-sensitively: the head's owner in another case is the same owner.
    const otherCase = await octokit.rest.pulls.list({ owner, repo: name(), head: `${owner.toUpperCase()}:feature/a`, state: 'open' });
    expect(otherCase.data.map((p) => p.number)).toEqual([1]);
    // The branch name is a git ref: its case counts.
    expect((await octokit.rest.pulls.list({ owner, repo: name(), head: `${owner}:Feature/A` })).data).toEqual([]);
  });

  it('refuses a head that does not exist and a branch with no commits', async () => {
    const missing = await failure(octokit.rest.pulls.create({ owner, repo: name(), head: 'nope', base: 'main', title: 't' }));
    expect(missing.status).toBe(422);
    expect(missing.response?.data).toMatchObject({ errors: [{ field: 'head', code: 'invalid' }] });
    clone.git('push', '-q', 'origin', 'origin/main:refs/heads/empty');
    const empty = await failure(octokit.rest.pulls.create({ owner, repo: name(), head: 'empty', base: 'main', title: 't' }));
    expect(empty.status).toBe(422);
    expect(empty.response?.data).toMatchObject({ errors: [{ message: 'No commits between main and empty' }] });
  });

  it('refuses a draft where the repository has no drafts (a private repository on a plan without them) with GitHub’s 422; a ready PR opens', async () => {
    expect((await openPull('sprint/a', { draft: true })).draft).toBe(true);
    await fake.control.updateRepository(repo.fullName, { allowDraftPullRequests: false });
    clone.commitAndPush('sprint/b', { 'b.txt': 'b\n' }, 'b');
    await fake.control.refresh();
    const refused = await failure(octokit.rest.pulls.create({ owner, repo: name(), head: 'sprint/b', base: 'main', title: 't', draft: true }));
    expect(refused.status).toBe(422);
    expect(refused.response?.data).toEqual({
      message: 'Draft pull requests are not supported in this repository.',
      documentation_url: 'https://docs.github.com/rest/pulls/pulls#create-a-pull-request',
      status: '422',
    });
    expect((await fake.control.pulls(repo.fullName)).map((p) => p.head.ref)).toEqual(['sprint/a']);
    const ready = await octokit.rest.pulls.create({ owner, repo: name(), head: 'sprint/b', base: 'main', title: 't', draft: false });
    expect(ready.data.draft).toBe(false);
  });

  it('answers 404 for an unknown repository or PR, with GitHub’s headers', async () => {
    const error = await failure(octokit.rest.pulls.get({ owner, repo: 'no-such-repo', pull_number: 1 }));
    expect(error.status).toBe(404);
    expect(error.response?.data).toMatchObject({ message: 'Not Found' });
    const ok = await octokit.rest.repos.get({ owner, repo: name() });
    expect(ok.headers['x-github-request-id']).toMatch(/^[0-9A-F]{4}:[0-9A-F]{4}:/);
    expect(Number(ok.headers['x-ratelimit-limit'])).toBe(5000);
    expect(Number(ok.headers['x-ratelimit-remaining'])).toBeLessThan(5000);
    expect(ok.data).toMatchObject({ full_name: repo.fullName, allow_auto_merge: false, clone_url: repo.cloneUrl, default_branch: 'main' });
  });

  it('finds a repository by owner and name in any case, and answers with the names as they were registered', async () => {
    const registered = await fake.control.createRepository({ owner: 'Acme-Labs', name: `Shop-${counter}` });
    const [regOwner, regName] = registered.fullName.split('/') as [string, string];
    const asked = { owner: regOwner.toUpperCase(), repo: regName.toLowerCase() };
    const { data: found } = await octokit.rest.repos.get(asked);
    expect(found).toMatchObject({ full_name: registered.fullName, name: regName, owner: expect.objectContaining({ login: regOwner }) });
    const pulls = await octokit.rest.pulls.list({ ...asked, state: 'all' });
    expect(pulls.status).toBe(200);
    const { repository } = await octokit.graphql<{ repository: { nameWithOwner: string; name: string } }>('query($owner: String!, $name: String!) { repository(owner: $owner, name: $name) { nameWithOwner name } }', {
      owner: asked.owner,
      name: asked.repo,
    });
    expect(repository).toEqual({ nameWithOwner: registered.fullName, name: regName });
    // The same name in another case is the same repository: registering it again is refused.
    await expect(fake.control.createRepository({ owner: regOwner.toLowerCase(), name: regName.toUpperCase() })).rejects.toThrow(/already exists/);
  });
});

describe('mergeability', () => {
  it('is null after opening and after a push until GitHub has computed it, then clean', async () => {
    await fake.control.setMergeabilityMode('manual');
    const pr = await openPull('feature/m');
    const first = await octokit.rest.pulls.get({ owner, repo: name(), pull_number: pr.number });
    expect(first.data.mergeable).toBeNull();
    expect(first.data.mergeable_state).toBe('unknown');
    await fake.control.computeMergeability();
    const computed = await octokit.rest.pulls.get({ owner, repo: name(), pull_number: pr.number });
    expect(computed.data.mergeable).toBe(true);
    expect(computed.data.mergeable_state).toBe('clean');
    expect(computed.data.merge_commit_sha).toMatch(/^[0-9a-f]{40}$/);

    // A push to the head: synchronize, and mergeability is unknown again.
    const before = pr.head.sha;
    const after = clone.commitAndPush('feature/m', { 'more.txt': 'more\n' }, 'More work');
    await fake.control.refresh();
    const pushed = await octokit.rest.pulls.get({ owner, repo: name(), pull_number: pr.number });
    expect(pushed.data.head.sha).toBe(after);
    expect(pushed.data.mergeable).toBeNull();
    const [sync] = await receiver.waitFor((d) => d.body.action === 'synchronize' && d.body.repository.full_name === repo.fullName);
    expect(sync!.body).toMatchObject({ before, after, number: pr.number });
    expect(sync!.signatureValid).toBe(true);
  });

  it('computes it by itself a moment later (auto mode)', async () => {
    const pr = await openPull('feature/auto');
    let data = (await octokit.rest.pulls.get({ owner, repo: name(), pull_number: pr.number })).data;
    while (data.mergeable === null) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      data = (await octokit.rest.pulls.get({ owner, repo: name(), pull_number: pr.number })).data;
    }
    expect(data.mergeable).toBe(true);
  });

  it('is dirty when the base received a conflicting change, and the merge is refused with 405', async () => {
    await fake.control.setMergeabilityMode('manual');
    clone.commitAndPush('feature/c', { 'app.txt': 'one\nTWO from the branch\nthree\n' }, 'Change line two');
    await fake.control.refresh();
    const { data: pr } = await octokit.rest.pulls.create({ owner, repo: name(), head: 'feature/c', base: 'main', title: 'conflicting' });
    await fake.control.commit(repo.fullName, { branch: 'main', files: { 'app.txt': 'one\n2 from main\nthree\n' }, message: 'Change line two on main' });
    await fake.control.computeMergeability();
    const { data } = await octokit.rest.pulls.get({ owner, repo: name(), pull_number: pr.number });
    expect(data.mergeable).toBe(false);
    expect(data.mergeable_state).toBe('dirty');
    const error = await failure(octokit.rest.pulls.merge({ owner, repo: name(), pull_number: pr.number, sha: data.head.sha }));
    expect(error.status).toBe(405);
    expect(error.message).toContain('Pull Request is not mergeable');
    const graph = await octokit.graphql<{ repository: { pullRequest: { mergeable: string; mergeStateStatus: string } } }>(
      'query($owner: String!, $name: String!, $number: Int!) { repository(owner: $owner, name: $name) { pullRequest(number: $number) { mergeable mergeStateStatus } } }',
      { owner, name: name(), number: pr.number },
    );
    expect(graph.repository.pullRequest).toEqual({ mergeable: 'CONFLICTING', mergeStateStatus: 'DIRTY' });
  });
});

describe('merging', () => {
  it('refuses a stale head with 409 and merges the current one with a real merge commit', async () => {
    const pr = await openPull('feature/merge');
    const stale = pr.head.sha;
    const head = clone.commitAndPush('feature/merge', { 'late.txt': 'late\n' }, 'Late change');
    await fake.control.refresh();
    const conflict = await failure(octokit.rest.pulls.merge({ owner, repo: name(), pull_number: pr.number, sha: stale }));
    expect(conflict.status).toBe(409);
    expect(conflict.message).toContain('Head branch was modified. Review and try the merge again.');

    const merged = await octokit.rest.pulls.merge({ owner, repo: name(), pull_number: pr.number, sha: head });
    expect(merged.data).toMatchObject({ merged: true, message: 'Pull Request successfully merged' });
    clone.git('fetch', '-q', 'origin');
    expect(clone.git('rev-parse', 'origin/main')).toBe(merged.data.sha);
    expect(clone.git('rev-list', '--parents', '-n', '1', 'origin/main').split(' ')).toHaveLength(3);
    expect(clone.git('merge-base', '--is-ancestor', head, 'origin/main')).toBe('');

    const { data } = await octokit.rest.pulls.get({ owner, repo: name(), pull_number: pr.number });
    expect(data).toMatchObject({ state: 'closed', merged: true, merge_commit_sha: merged.data.sha });
    const [closed] = await receiver.waitFor((d) => d.event === 'pull_request' && d.body.action === 'closed' && d.body.repository.full_name === repo.fullName);
    expect(closed!.body.pull_request.merged).toBe(true);

    const again = await failure(octokit.rest.pulls.merge({ owner, repo: name(), pull_number: pr.number }));
    expect(again.status).toBe(405);
  });

  it('a new base (PATCH base) is sent as `edited` with `changes.base`, shown on reads, and the merge goes into it', async () => {
    const main = clone.git('rev-parse', 'origin/main');
    clone.git('push', '-q', 'origin', 'origin/main:refs/heads/release');
    const pr = await openPull('feature/retarget');
    const { data: updated } = await octokit.rest.pulls.update({ owner, repo: name(), pull_number: pr.number, base: 'release' });
    expect(updated.base).toMatchObject({ ref: 'release', sha: main });
    const [edited] = await receiver.waitFor((d) => d.body.action === 'edited' && d.body.repository.full_name === repo.fullName);
    expect(edited!.event).toBe('pull_request');
    expect(edited!.body).toMatchObject({ number: pr.number, changes: { base: { ref: { from: 'main' }, sha: { from: main } } }, pull_request: { base: { ref: 'release' } } });
    // The same base again is no change: nothing is sent.
    await octokit.rest.pulls.update({ owner, repo: name(), pull_number: pr.number, base: 'release' });
    expect((await octokit.rest.pulls.get({ owner, repo: name(), pull_number: pr.number })).data.base.ref).toBe('release');

    const merged = await octokit.rest.pulls.merge({ owner, repo: name(), pull_number: pr.number, sha: pr.head.sha });
    clone.git('fetch', '-q', 'origin');
    expect(clone.git('rev-parse', 'origin/release')).toBe(merged.data.sha);
    expect(clone.git('rev-parse', 'origin/main')).toBe(main);
    expect(receiver.received.filter((d) => d.body.action === 'edited' && d.body.repository.full_name === repo.fullName)).toHaveLength(1);
  });

  it('accepts a merge request with no body at all, as Octokit may send it', async () => {
    const pr = await openPull('feature/nobody');
    const response = await fetch(`${fake.url}/repos/${repo.fullName}/pulls/${pr.number}/merge`, { method: 'PUT', headers: { authorization: 'token x' } });
    expect(response.status).toBe(200);
    expect(await response.json()).toMatchObject({ merged: true });
  });

  it('squashes into one commit with one parent, and rebases by replaying each commit', async () => {
    const squashPr = await openPull('feature/squash');
    clone.commitAndPush('feature/squash', { 'second.txt': '2\n' }, 'Second commit');
    await fake.control.refresh();
    const squashed = await octokit.rest.pulls.merge({ owner, repo: name(), pull_number: squashPr.number, merge_method: 'squash' });
    clone.git('fetch', '-q', 'origin');
    expect(clone.git('rev-list', '--parents', '-n', '1', squashed.data.sha).split(' ')).toHaveLength(2);
    expect(clone.git('log', '-1', '--format=%s', squashed.data.sha)).toBe(`PR for feature/squash (#${squashPr.number})`);
    expect(clone.git('show', `${squashed.data.sha}:second.txt`)).toBe('2');

    const rebasePr = await openPull('feature/rebase', {});
    clone.commitAndPush('feature/rebase', { 'r2.txt': 'r2\n' }, 'Rebase two');
    await fake.control.refresh();
    const rebased = await octokit.rest.pulls.merge({ owner, repo: name(), pull_number: rebasePr.number, merge_method: 'rebase' });
    clone.git('fetch', '-q', 'origin');
    expect(clone.git('log', '--format=%s', '-2', rebased.data.sha).split('\n')).toEqual(['Rebase two', 'Work on feature/rebase']);
    expect(clone.git('log', '--format=%an', '-1', rebased.data.sha)).toBe('Agent');
    expect(clone.git('rev-parse', `${rebased.data.sha}~2`)).toBe(squashed.data.sha);
  });

  it('refuses a method the repository does not allow, and a draft', async () => {
    await fake.control.updateRepository(repo.fullName, { allowRebaseMerge: false });
    const pr = await openPull('feature/draft', { draft: true });
    const method = await failure(octokit.rest.pulls.merge({ owner, repo: name(), pull_number: pr.number, merge_method: 'rebase' }));
    expect(method.status).toBe(405);
    expect(method.message).toContain('Rebase merges are not allowed on this repository.');
    const draft = await failure(octokit.rest.pulls.merge({ owner, repo: name(), pull_number: pr.number }));
    expect(draft.status).toBe(405);
    expect(draft.message).toContain('Pull Request is still a draft');
  });
});

describe('checks and branch protection', () => {
  it('is blocked until the required check passes, and unstable while another check is red', async () => {
    await fake.control.updateRepository(repo.fullName, { requiredChecks: ['ci'] });
    await fake.control.setMergeabilityMode('manual');
    const pr = await openPull('feature/checks');
    await fake.control.computeMergeability();
    const state = async () => (await octokit.rest.pulls.get({ owner, repo: name(), pull_number: pr.number })).data.mergeable_state;
    expect(await state()).toBe('blocked');
    const expected = await failure(octokit.rest.pulls.merge({ owner, repo: name(), pull_number: pr.number, sha: pr.head.sha }));
    expect(expected.status).toBe(405);
    expect(expected.message).toContain('Required status check "ci" is expected.');

    const runId = await fake.control.setCheck(repo.fullName, { sha: pr.head.sha, name: 'ci', status: 'in_progress' });
    expect(await state()).toBe('blocked');
    await fake.control.updateCheck(repo.fullName, runId, { conclusion: 'failure' });
    const failing = await failure(octokit.rest.pulls.merge({ owner, repo: name(), pull_number: pr.number, sha: pr.head.sha }));
    expect(failing.message).toContain('Required status check "ci" is failing.');

    await octokit.rest.checks.create({ owner, repo: name(), name: 'ci', head_sha: pr.head.sha, status: 'completed', conclusion: 'success' });
    expect(await state()).toBe('clean');
    await octokit.rest.repos.createCommitStatus({ owner, repo: name(), sha: pr.head.sha, state: 'failure', context: 'lint' });
    expect(await state()).toBe('unstable');

    const runs = await octokit.rest.checks.listForRef({ owner, repo: name(), ref: 'feature/checks' });
    expect(runs.data.total_count).toBe(1);
    expect(runs.data.check_runs[0]).toMatchObject({ name: 'ci', conclusion: 'success' });
    const all = await octokit.rest.checks.listForRef({ owner, repo: name(), ref: pr.head.sha, filter: 'all' });
    expect(all.data.total_count).toBe(2);
    const combined = await octokit.rest.repos.getCombinedStatusForRef({ owner, repo: name(), ref: pr.head.sha });
    expect(combined.data).toMatchObject({ state: 'failure', total_count: 1 });
  });

  it('reports a combined status of pending when no status was reported (check runs do not count)', async () => {
    const pr = await openPull('feature/none');
    await fake.control.setCheck(repo.fullName, { sha: pr.head.sha, name: 'ci', conclusion: 'success' });
    const combined = await octokit.rest.repos.getCombinedStatusForRef({ owner, repo: name(), ref: pr.head.sha });
    expect(combined.data).toMatchObject({ state: 'pending', total_count: 0, statuses: [] });
  });
});

describe('ready for review and auto-merge (GraphQL)', () => {
  const pullQuery = `query($owner: String!, $name: String!, $number: Int!) {
    repository(owner: $owner, name: $name) { pullRequest(number: $number) { id isDraft headRefOid mergeable mergeStateStatus autoMergeRequest { mergeMethod enabledAt } } }
  }`;
  type PullQuery = { repository: { pullRequest: { id: string; isDraft: boolean; headRefOid: string; mergeable: string; mergeStateStatus: string; autoMergeRequest: { mergeMethod: string } | null } } };
  const readPull = (number: number) => octokit.graphql<PullQuery>(pullQuery, { owner, name: name(), number }).then((r) => r.repository.pullRequest);

  it('marks a draft ready once; a second call on a ready PR succeeds without an event', async () => {
    const pr = await openPull('feature/sprint', { draft: true });
    const mutation = 'mutation($id: ID!) { markPullRequestReadyForReview(input: { pullRequestId: $id }) { pullRequest { isDraft } } }';
    const first = await octokit.graphql<{ markPullRequestReadyForReview: { pullRequest: { isDraft: boolean } } }>(mutation, { id: pr.node_id });
    expect(first.markPullRequestReadyForReview.pullRequest.isDraft).toBe(false);
    const second = await octokit.graphql<{ markPullRequestReadyForReview: { pullRequest: { isDraft: boolean } } }>(mutation, { id: pr.node_id });
    expect(second.markPullRequestReadyForReview.pullRequest.isDraft).toBe(false);
    await receiver.waitFor((d) => d.body.action === 'ready_for_review' && d.body.repository.full_name === repo.fullName);
    const ready = (await fake.control.deliveries({ event: 'pull_request', action: 'ready_for_review' })).filter((d) => d.payload.repository.full_name === repo.fullName);
    expect(ready).toHaveLength(1);
  });

  it('refuses auto-merge when the repository disallows it, when the PR is clean or unstable; enables it when blocked and merges when the check passes', async () => {
    await fake.control.setMergeabilityMode('manual');
    const pr = await openPull('feature/story');
    await fake.control.computeMergeability();
    const enable = `mutation($id: ID!, $oid: GitObjectID!) {
      enablePullRequestAutoMerge(input: { pullRequestId: $id, mergeMethod: SQUASH, expectedHeadOid: $oid }) { pullRequest { autoMergeRequest { mergeMethod } } }
    }`;
    const refusal = async () => {
      try {
        await octokit.graphql(enable, { id: pr.node_id, oid: pr.head.sha });
      } catch (error) {
        return (error as { errors: { type: string; message: string }[] }).errors[0];
      }
      throw new Error('expected a refusal');
    };
    expect(await refusal()).toEqual(expect.objectContaining({ type: 'UNPROCESSABLE', message: 'Auto merge is not allowed for this repository' }));
    await fake.control.updateRepository(repo.fullName, { allowAutoMerge: true });
    expect(await refusal()).toEqual(expect.objectContaining({ type: 'UNPROCESSABLE', message: 'Pull request Pull request is in clean status' }));
    await fake.control.setStatus(repo.fullName, { sha: pr.head.sha, context: 'lint', state: 'pending' });
    expect(await refusal()).toEqual(expect.objectContaining({ message: 'Pull request Pull request is in unstable status' }));

    await fake.control.updateRepository(repo.fullName, { requiredChecks: ['ci'] });
    expect((await readPull(pr.number)).mergeStateStatus).toBe('BLOCKED');
    const enabled = await octokit.graphql<{ enablePullRequestAutoMerge: { pullRequest: { autoMergeRequest: { mergeMethod: string } } } }>(enable, { id: pr.node_id, oid: pr.head.sha });
    expect(enabled.enablePullRequestAutoMerge.pullRequest.autoMergeRequest.mergeMethod).toBe('SQUASH');
    const rest = await octokit.rest.pulls.get({ owner, repo: name(), pull_number: pr.number });
    expect(rest.data.auto_merge).toMatchObject({ merge_method: 'squash' });
    // Enabled already: enabling it again (a mutation sent again after its answer was lost) is refused and changes nothing.
    expect(await refusal()).toEqual(expect.objectContaining({ type: 'UNPROCESSABLE', message: 'Pull request Auto merge is already enabled' }));
    // Disabled, disabling it again is refused too; enabled again, it is on.
    const disable = `mutation($id: ID!) { disablePullRequestAutoMerge(input: { pullRequestId: $id }) { pullRequest { autoMergeRequest { mergeMethod } } } }`;
    await octokit.graphql(disable, { id: pr.node_id });
    const disabledAgain = await octokit.graphql(disable, { id: pr.node_id }).then(
      () => null,
      (error: { errors: { type: string; message: string }[] }) => error.errors[0],
    );
    expect(disabledAgain).toEqual(expect.objectContaining({ type: 'UNPROCESSABLE', message: "Can't disable auto-merge for this pull request." }));
    await octokit.graphql(enable, { id: pr.node_id, oid: pr.head.sha });

    await fake.control.setCheck(repo.fullName, { sha: pr.head.sha, name: 'ci', conclusion: 'success' });
    const merged = await octokit.rest.pulls.get({ owner, repo: name(), pull_number: pr.number });
    expect(merged.data).toMatchObject({ state: 'closed', merged: true });
    clone.git('fetch', '-q', 'origin');
    expect(clone.git('rev-parse', 'origin/main')).toBe(merged.data.merge_commit_sha);
    const events = await receiver.waitFor((d) => d.body.repository?.full_name === repo.fullName && (d.body.action?.startsWith('auto_merge_') || (d.body.action === 'closed' && d.body.pull_request.merged)), 4);
    expect(events.map((e) => e.body.action)).toEqual(['auto_merge_enabled', 'auto_merge_disabled', 'auto_merge_enabled', 'closed']);
  });

  it('finds a branch’s PRs by state through the pullRequests connection', async () => {
    const pr = await openPull('feature/lookup');
    const query = `query($owner: String!, $name: String!, $branch: String!, $states: [PullRequestState!]) {
      repository(owner: $owner, name: $name) { pullRequests(headRefName: $branch, states: $states, first: 10) { totalCount nodes { number state } } }
    }`;
    type Result = { repository: { pullRequests: { totalCount: number; nodes: { number: number; state: string }[] } } };
    const open = await octokit.graphql<Result>(query, { owner, name: name(), branch: 'feature/lookup', states: ['OPEN'] });
    expect(open.repository.pullRequests).toEqual({ totalCount: 1, nodes: [{ number: pr.number, state: 'OPEN' }] });
    await octokit.rest.pulls.merge({ owner, repo: name(), pull_number: pr.number });
    const stillOpen = await octokit.graphql<Result>(query, { owner, name: name(), branch: 'feature/lookup', states: ['OPEN'] });
    expect(stillOpen.repository.pullRequests.totalCount).toBe(0);
    const merged = await octokit.graphql<Result>(query, { owner, name: name(), branch: 'feature/lookup', states: ['MERGED'] });
    expect(merged.repository.pullRequests.nodes).toEqual([{ number: pr.number, state: 'MERGED' }]);
    await expect(octokit.graphql(`{ repository(owner: "${owner}", name: "${name()}") { pullRequests(headRefName: "x") { totalCount } } }`)).rejects.toMatchObject({
      errors: [expect.objectContaining({ type: 'MISSING_PAGINATION_BOUNDARIES' })],
    });
  });

  it('answers NOT_FOUND for an unknown PR number or node id', async () => {
    await expect(readPull(99)).rejects.toMatchObject({ errors: [expect.objectContaining({ type: 'NOT_FOUND', message: 'Could not resolve to a PullRequest with the number of 99.' })] });
    await expect(octokit.graphql('mutation { markPullRequestReadyForReview(input: { pullRequestId: "PR_nope" }) { clientMutationId } }')).rejects.toMatchObject({
      errors: [expect.objectContaining({ type: 'NOT_FOUND' })],
    });
  });

  it('rejects a field GitHub does not have, and names a field the fake does not model', async () => {
    await expect(octokit.graphql('{ repository(owner: "acme", name: "x") { noSuchField } }')).rejects.toMatchObject({ errors: [expect.objectContaining({ message: expect.stringContaining('noSuchField') })] });
    await expect(octokit.graphql(`{ repository(owner: "${owner}", name: "${name()}") { stargazerCount } }`)).rejects.toMatchObject({
      errors: [expect.objectContaining({ message: 'The GitHub fake does not model Repository.stargazerCount' })],
    });
  });
});

describe('the repositories are real git repositories', () => {
  it('serves an existing bare repository in place', async () => {
    const existing = `${clone.dir}-existing.git`;
    execFileSync('git', ['clone', '-q', '--bare', repo.cloneUrl, existing]);
    const served = await fake.control.createRepository({ owner: 'demo', name: `existing-${counter}`, gitDir: existing });
    expect(served.gitDir).toBe(existing);
    expect(await fake.control.branchSha(served.fullName, 'main')).toBe(clone.git('rev-parse', 'origin/main'));
  });
});
