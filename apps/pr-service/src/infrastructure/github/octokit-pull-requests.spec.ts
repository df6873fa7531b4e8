import { ErrorCode } from '@gantry/contracts';
import { startGitHubFake, type GitHubFake } from '@gantry/github-fake';
import { Clone } from '@gantry/github-fake/testing';
import { eventually } from '@gantry/testing';
import { settingsOf } from '@gantry/service-runtime';
import { prServiceSettings } from '../pr-service-config.js';
import { createOctokit } from './octokit.js';
import { OctokitPullRequests } from './octokit-pull-requests.js';

/*
 * The GitHub effects through real Octokit (retry + throttling plugins, GraphQL) against the local
 * GitHub: every behaviour docs/pr-service.md names for the GitHub side.
 */
describe('GitHub effects through Octokit, against the local GitHub', () => {
  let github: GitHubFake;
  let clone: Clone;
  let prs: OctokitPullRequests;
  let octokit: ReturnType<typeof createOctokit>;
  const warnings: { message: string; fields: Record<string, unknown> }[] = [];
  const repo = 'acme/effects';

  beforeAll(async () => {
    github = await startGitHubFake({ mergeabilityDelayMs: 20 });
    const created = await github.control.createRepository({ owner: 'acme', name: 'effects', initialFiles: { 'README.md': '# effects\n', 'src/app.ts': 'export const a = 1;\n' } });
    clone = new Clone(created.cloneUrl);
    const config = settingsOf(prServiceSettings, { GANTRY_GITHUB_API_URL: github.url, GANTRY_GITHUB_TOKEN: 'test-token', GANTRY_GITHUB_SECONDARY_RATE_LIMIT_WAIT_S: '1' });
    const log = { log: () => undefined, error: () => undefined, warn: (message: string, fields: Record<string, unknown>) => warnings.push({ message, fields }) };
    octokit = createOctokit(config, log);
    prs = new OctokitPullRequests(octokit);
  }, 30_000);

  afterAll(async () => {
    clone?.remove();
    await github?.close();
  });

  const settled = async (prNumber: number) => eventually(async () => {
    const pr = await prs.read(repo, prNumber);
    return pr.mergeable !== null ? pr : null;
  }, { what: `mergeability of #${prNumber}` });

  it('opens a PR; a second open of the same branch adopts it (GitHub\'s 422 "already exists"); a SPRINT PR opens as a draft', async () => {
    clone.commitAndPush('story/open', { 'src/open.ts': 'open\n' }, 'open');
    const first = await prs.open({ repository: repo, branch: 'story/open', baseBranch: 'main', title: 'Story open', body: 'b', draft: false });
    expect(first).toMatchObject({ adopted: false, pr: { state: 'open', draft: false, headBranch: 'story/open', baseBranch: 'main' } });
    const again = await prs.open({ repository: repo, branch: 'story/open', baseBranch: 'main', title: 'Story open', body: 'b', draft: false });
    expect(again).toMatchObject({ adopted: true, pr: { number: first.pr.number } });
    expect((await github.control.pulls(repo)).filter((p) => p.head.ref === 'story/open')).toHaveLength(1);
    expect(await prs.findOpen(repo, 'story/open', 'main')).toMatchObject({ number: first.pr.number });

    clone.commitAndPush('sprint/draft', { 'src/draft.ts': 'draft\n' }, 'draft');
    const draft = await prs.open({ repository: repo, branch: 'sprint/draft', baseBranch: 'main', title: 'Sprint', body: 'b', draft: true });
    expect(draft.pr.draft).toBe(true);
    expect(await prs.markReadyForReview(draft.pr.nodeId)).toEqual({ alreadyReady: false });
    expect(await prs.markReadyForReview(draft.pr.nodeId)).toEqual({ alreadyReady: true });
    expect((await prs.read(repo, draft.pr.number)).draft).toBe(false);
  });

  it('a PR whose base a person changed is still found by its head: the branch\'s PR is adopted, never opened a second time', async () => {
    await github.control.commit(repo, { branch: 'develop', from: 'main', files: { 'DEVELOP.md': 'develop\n' }, message: 'develop' });
    clone.commitAndPush('story/rebased', { 'src/rebased.ts': 'rebased\n' }, 'rebased');
    const first = await prs.open({ repository: repo, branch: 'story/rebased', baseBranch: 'main', title: 'Story rebased', body: 'b', draft: false });
    // Between GitHub opening it and Gantry recording it (a crash), a person points it at another base.
    await octokit.rest.pulls.update({ owner: 'acme', repo: 'effects', pull_number: first.pr.number, base: 'develop' });
    // The open effect looks for the branch's open PR before it asks for one (GitHub would open a second: its
    // "already exists" is per head and base): found by its head, the PR is adopted with the base GitHub shows.
    expect(await prs.findOpen(repo, 'story/rebased', 'main')).toMatchObject({ number: first.pr.number, baseBranch: 'develop' });
    expect((await github.control.pulls(repo)).filter((p) => p.head.ref === 'story/rebased' && p.state === 'open')).toHaveLength(1);
  });

  it('reads check runs and statuses together, the latest of each name; none at all is an empty list, not "pending"', async () => {
    const sha = clone.commitAndPush('story/checks', { 'src/checks.ts': 'c\n' }, 'checks');
    expect(await prs.checks(repo, sha)).toEqual([]);
    await github.control.setCheck(repo, { sha, name: 'ci/test', status: 'completed', conclusion: 'failure' });
    await github.control.setCheck(repo, { sha, name: 'ci/test', status: 'completed', conclusion: 'success' });
    await github.control.setCheck(repo, { sha, name: 'build', status: 'in_progress' });
    await github.control.setStatus(repo, { sha, context: 'deploy/preview', state: 'error' });
    expect(await prs.checks(repo, sha)).toEqual([
      { name: 'build', source: 'check_run', state: 'PENDING', conclusion: null, detailsUrl: expect.anything() },
      { name: 'ci/test', source: 'check_run', state: 'SUCCESS', conclusion: 'success', detailsUrl: expect.anything() },
      { name: 'deploy/preview', source: 'status', state: 'FAILURE', conclusion: 'error', detailsUrl: null },
    ]);
  });

  it('a name reported as a check run and as a status: the later word counts — a run\'s by when it completed — and in one second (GitHub\'s times are to the second) the one not green', async () => {
    const sha = clone.commitAndPush('story/same-name', { 'src/same-name.ts': 's\n' }, 'same name');
    const ci = async () => (await prs.checks(repo, sha)).find((c) => c.name === 'ci/test');
    // The run started first, the status said success later, and the run failed after that: the failure is the latest word.
    const run = await github.control.setCheck(repo, { sha, name: 'ci/test', status: 'in_progress' });
    await new Promise((resolve) => setTimeout(resolve, 1100));
    await github.control.setStatus(repo, { sha, context: 'ci/test', state: 'success' });
    await new Promise((resolve) => setTimeout(resolve, 1100));
    await github.control.updateCheck(repo, run, { conclusion: 'failure' });
    expect(await ci()).toMatchObject({ source: 'check_run', state: 'FAILURE' });

    // In one second GitHub's times cannot tell which came last: the one not green counts, whichever was sent first.
    const held = await github.control.holdClock();
    try {
      const other = clone.commitAndPush('story/same-second', { 'src/same-second.ts': 's\n' }, 'same second');
      await github.control.setStatus(repo, { sha: other, context: 'ci/test', state: 'success' });
      await github.control.setCheck(repo, { sha: other, name: 'ci/test', status: 'completed', conclusion: 'failure' });
      const third = clone.commitAndPush('story/same-second-2', { 'src/same-second-2.ts': 's\n' }, 'same second, the other order');
      await github.control.setCheck(repo, { sha: third, name: 'ci/test', status: 'completed', conclusion: 'failure' });
      await github.control.setStatus(repo, { sha: third, context: 'ci/test', state: 'success' });
      const statuses = await octokit.rest.repos.getCombinedStatusForRef({ owner: 'acme', repo: 'effects', ref: other });
      expect(statuses.data.statuses[0]!.updated_at).toBe(held);
      expect((await prs.checks(repo, other)).find((c) => c.name === 'ci/test')).toMatchObject({ state: 'FAILURE' });
      expect((await prs.checks(repo, third)).find((c) => c.name === 'ci/test')).toMatchObject({ state: 'FAILURE' });
    } finally {
      await github.control.releaseClock();
    }
  });

  it('auto-merge: GitHub refuses it for a clean PR (merge directly), and for a repository that disallows it', async () => {
    const sha = clone.commitAndPush('story/clean', { 'src/clean.ts': 'clean\n' }, 'clean');
    const { pr } = await prs.open({ repository: repo, branch: 'story/clean', baseBranch: 'main', title: 't', body: 'b', draft: false });
    await github.control.setCheck(repo, { sha, name: 'ci/test', status: 'completed', conclusion: 'success' });
    await settled(pr.number);
    await github.control.updateRepository(repo, { allowAutoMerge: true });
    expect(await prs.enableAutoMerge(pr.nodeId, sha, 'SQUASH')).toMatchObject({ outcome: 'REFUSED', reason: 'CLEAN', message: expect.stringMatching(/clean status/) });
    await github.control.updateRepository(repo, { allowAutoMerge: false });
    expect(await prs.enableAutoMerge(pr.nodeId, sha, 'SQUASH')).toMatchObject({ outcome: 'REFUSED', reason: 'NOT_ALLOWED' });
    expect(await prs.merge(repo, pr.number, sha, 'SQUASH')).toMatchObject({ outcome: 'MERGED', mergeCommitSha: expect.stringMatching(/^[0-9a-f]{40}$/) });
    expect(await prs.read(repo, pr.number)).toMatchObject({ merged: true, state: 'closed' });
  });

  it('auto-merge for a PR still waiting on a required check is enabled with the expected head; another head is HEAD_MOVED', async () => {
    await github.control.updateRepository(repo, { allowAutoMerge: true, requiredChecks: ['ci/test'] });
    const sha = clone.commitAndPush('story/auto', { 'src/auto.ts': 'auto\n' }, 'auto');
    const { pr } = await prs.open({ repository: repo, branch: 'story/auto', baseBranch: 'main', title: 't', body: 'b', draft: false });
    await settled(pr.number);
    expect(await prs.enableAutoMerge(pr.nodeId, '1'.repeat(40), 'MERGE')).toMatchObject({ outcome: 'HEAD_MOVED' });
    expect(await prs.enableAutoMerge(pr.nodeId, sha, 'MERGE')).toEqual({ outcome: 'ENABLED' });
    expect((await prs.read(repo, pr.number)).autoMergeEnabled).toBe(true);
    await prs.disableAutoMerge(pr.nodeId);
    expect((await prs.read(repo, pr.number)).autoMergeEnabled).toBe(false);
    await github.control.updateRepository(repo, { requiredChecks: [] });
  });

  it('auto-merge enabled or disabled with the answer lost (GitHub acted, the connection closed): the retry finds it done — ALREADY_ENABLED, NOT_ENABLED — no failure', async () => {
    await github.control.updateRepository(repo, { allowAutoMerge: true, requiredChecks: ['ci/test'] });
    const sha = clone.commitAndPush('story/lost', { 'src/lost.ts': 'lost\n' }, 'lost');
    const { pr } = await prs.open({ repository: repo, branch: 'story/lost', baseBranch: 'main', title: 't', body: 'b', draft: false });
    await settled(pr.number);
    // The local GitHub's requests of the whole file: those this test makes are the ones after it started.
    const earlier = { enable: (await github.control.requests({ graphqlField: 'enablePullRequestAutoMerge' })).length, disable: (await github.control.requests({ graphqlField: 'disablePullRequestAutoMerge' })).length };
    const mutations = async (field: 'enable' | 'disable') =>
      (await github.control.requests({ graphqlField: `${field}PullRequestAutoMerge` })).slice(earlier[field]).map((r) => [r.fault, r.answered]);

    await github.control.injectFault({ kind: 'lost_response', method: 'POST', path: '/graphql' });
    expect(await prs.enableAutoMerge(pr.nodeId, sha, 'MERGE')).toMatchObject({ outcome: 'ALREADY_ENABLED', message: expect.stringMatching(/already enabled/) });
    expect(await mutations('enable')).toEqual([['lost_response', false], [null, true]]);
    expect((await prs.read(repo, pr.number)).autoMergeEnabled).toBe(true);

    await github.control.injectFault({ kind: 'lost_response', method: 'POST', path: '/graphql' });
    expect(await prs.disableAutoMerge(pr.nodeId)).toMatchObject({ outcome: 'NOT_ENABLED', message: expect.stringMatching(/Can't disable auto-merge/) });
    expect(await mutations('disable')).toEqual([['lost_response', false], [null, true]]);
    expect((await prs.read(repo, pr.number)).autoMergeEnabled).toBe(false);
    await github.control.updateRepository(repo, { requiredChecks: [] });
  });

  it('a draft (a person converted it since it was read): auto-merge is DRAFT, no failure; a merge is refused with GitHub\'s 405 "Pull Request is still a draft"', async () => {
    await github.control.updateRepository(repo, { allowAutoMerge: true, requiredChecks: ['ci/test'] });
    const sha = clone.commitAndPush('story/drafted', { 'src/drafted.ts': 'drafted\n' }, 'drafted');
    const { pr } = await prs.open({ repository: repo, branch: 'story/drafted', baseBranch: 'main', title: 't', body: 'b', draft: true });
    await settled(pr.number);
    expect(await prs.enableAutoMerge(pr.nodeId, sha, 'MERGE')).toMatchObject({ outcome: 'DRAFT', message: expect.stringMatching(/draft/) });
    await expect(prs.merge(repo, pr.number, sha, 'MERGE')).rejects.toMatchObject({ code: ErrorCode.UNKNOWN, details: { status: 405, githubMessage: 'Pull Request is still a draft' } });
    expect(await prs.read(repo, pr.number)).toMatchObject({ state: 'open', draft: true, autoMergeEnabled: false });
    await github.control.updateRepository(repo, { requiredChecks: [] });
  });

  it('a merge always sends the head it was decided for: a moved head is BRANCH_MOVED (409, not retried), a conflict is MERGE_CONFLICT (405, not retried)', async () => {
    const first = clone.commitAndPush('story/moved', { 'src/moved.ts': 'one\n' }, 'one');
    const { pr } = await prs.open({ repository: repo, branch: 'story/moved', baseBranch: 'main', title: 't', body: 'b', draft: false });
    clone.commitAndPush('story/moved', { 'src/moved.ts': 'two\n' }, 'two');
    await github.control.refresh();
    expect(await prs.merge(repo, pr.number, first, 'MERGE')).toMatchObject({ outcome: 'BRANCH_MOVED', message: expect.stringMatching(/Head branch was modified/) });
    expect((await github.control.requests({ method: 'PUT', path: `/pulls/${pr.number}/merge` })).map((r) => r.status)).toEqual([409]);

    const conflicting = clone.commitAndPush('story/conflict', { 'src/app.ts': 'export const a = 2;\n' }, 'change app', 'origin/main');
    const { pr: dirty } = await prs.open({ repository: repo, branch: 'story/conflict', baseBranch: 'main', title: 't', body: 'b', draft: false });
    await github.control.commit(repo, { branch: 'main', files: { 'src/app.ts': 'export const a = 3;\n' }, message: 'main changes app' });
    await eventually(async () => (await prs.read(repo, dirty.number)).mergeableState === 'dirty', { what: 'the PR dirty' });
    await expect(prs.merge(repo, dirty.number, conflicting, 'MERGE')).rejects.toMatchObject({ code: ErrorCode.MERGE_CONFLICT, details: { status: 405 } });
    expect((await github.control.requests({ method: 'PUT', path: `/pulls/${dirty.number}/merge` })).map((r) => r.status)).toEqual([405]);
  });

  it('the base moved under the merge: GitHub\'s 405 "Base branch was modified" is BRANCH_MOVED (the same head is merged at the next try), not a refusal of the head', async () => {
    const head = clone.commitAndPush('story/base-moved', { 'src/base-moved.ts': 'b\n' }, 'base moved');
    const { pr } = await prs.open({ repository: repo, branch: 'story/base-moved', baseBranch: 'main', title: 't', body: 'b', draft: false });
    await settled(pr.number);
    await github.control.injectFault({ kind: 'base_branch_modified', method: 'PUT', path: `/pulls/${pr.number}/merge` });
    expect(await prs.merge(repo, pr.number, head, 'MERGE')).toMatchObject({ outcome: 'BRANCH_MOVED', message: expect.stringMatching(/Base branch was modified/) });
    expect(await prs.merge(repo, pr.number, head, 'MERGE')).toMatchObject({ outcome: 'MERGED' });
    expect((await github.control.requests({ method: 'PUT', path: `/pulls/${pr.number}/merge` })).map((r) => r.status)).toEqual([405, 200]);
  });

  it('a secondary rate limit with retry-after: the request waits that long and is sent again, once', async () => {
    clone.commitAndPush('story/limited', { 'src/limited.ts': 'l\n' }, 'limited');
    await github.control.injectFault({ kind: 'secondary_rate_limit', method: 'POST', path: '/pulls', retryAfterSeconds: 1 });
    const { pr } = await prs.open({ repository: repo, branch: 'story/limited', baseBranch: 'main', title: 't', body: 'b', draft: false });
    const last = (await github.control.requests({ method: 'POST', path: `/repos/${repo}/pulls` })).slice(-2);
    expect(last.map((r) => [r.status, r.fault])).toEqual([[403, 'secondary_rate_limit'], [201, null]]);
    expect(Date.parse(last[1]!.at) - Date.parse(last[0]!.at)).toBeGreaterThanOrEqual(1000);
    expect(warnings.at(-1)).toMatchObject({ fields: { kind: 'secondary', retryAfterSeconds: 1, retrying: true } });
    expect((await github.control.pulls(repo)).filter((p) => p.head.ref === 'story/limited').map((p) => p.number)).toEqual([pr.number]);
  });

  it('a secondary rate limit without retry-after: the configured wait, then once more', async () => {
    const sha = clone.commitAndPush('story/limited-2', { 'src/limited2.ts': 'l\n' }, 'limited 2');
    await github.control.injectFault({ kind: 'secondary_rate_limit', method: 'GET', path: `/commits/${sha}/check-runs` });
    expect(await prs.checks(repo, sha)).toEqual([]);
    const gets = (await github.control.requests({ method: 'GET', path: `/commits/${sha}/check-runs` })).slice(-2);
    expect(gets.map((r) => [r.status, r.fault])).toEqual([[403, 'secondary_rate_limit'], [200, null]]);
    expect(Date.parse(gets[1]!.at) - Date.parse(gets[0]!.at)).toBeGreaterThanOrEqual(1000);
    expect(warnings.at(-1)).toMatchObject({ fields: { kind: 'secondary', retryAfterSeconds: 1 } });
  });

  it('a secondary rate limit answered 429: the request waits its retry-after (not the retry plugin\'s 1 s) and is sent again, once', async () => {
    clone.commitAndPush('story/limited-429', { 'src/limited429.ts': 'l\n' }, 'limited 429');
    await github.control.injectFault({ kind: 'secondary_rate_limit', status: 429, method: 'POST', path: '/pulls', retryAfterSeconds: 3 });
    const { pr } = await prs.open({ repository: repo, branch: 'story/limited-429', baseBranch: 'main', title: 't', body: 'b', draft: false });
    const last = (await github.control.requests({ method: 'POST', path: `/repos/${repo}/pulls` })).slice(-2);
    expect(last.map((r) => [r.status, r.fault])).toEqual([[429, 'secondary_rate_limit'], [201, null]]);
    expect(Date.parse(last[1]!.at) - Date.parse(last[0]!.at)).toBeGreaterThanOrEqual(3000);
    expect(warnings.at(-1)).toMatchObject({ fields: { kind: 'secondary', retryAfterSeconds: 3, retrying: true } });
    expect((await github.control.pulls(repo)).filter((p) => p.head.ref === 'story/limited-429').map((p) => p.number)).toEqual([pr.number]);
  });

  it('a secondary rate limit answered 429 that lasts: sent 1 + GANTRY_GITHUB_RATE_LIMIT_RETRIES times, no more, then a typed failure', async () => {
    const sha = clone.commitAndPush('story/limited-429-long', { 'src/limited429long.ts': 'l\n' }, 'limited 429 long');
    await github.control.injectFault({ kind: 'secondary_rate_limit', status: 429, method: 'GET', path: `/commits/${sha}/check-runs`, retryAfterSeconds: 1, count: 50 });
    try {
      const failure = await prs.checks(repo, sha).then(() => null, (e: unknown) => e as { code: string; details: { status: number } });
      expect(failure).toMatchObject({ code: ErrorCode.UNKNOWN, details: { status: 429 } });
      const gets = await github.control.requests({ method: 'GET', path: `/commits/${sha}/check-runs` });
      expect(gets.map((r) => r.status)).toEqual([429, 429, 429, 429]);
    } finally {
      await github.control.clearFaults();
    }
  }, 120_000);

  it.each([403, 429])('a primary rate limit (REST %i, remaining 0): not waited out — the request fails at once, saying when the limit resets', async (status) => {
    const sha = clone.commitAndPush(`story/primary-${status}`, { [`src/primary${status}.ts`]: 'p\n' }, 'primary');
    await github.control.injectFault({ kind: 'primary_rate_limit', status, method: 'GET', path: `/commits/${sha}/check-runs`, resetInSeconds: 3600 });
    try {
      const failure = await prs.checks(repo, sha).then(() => null, (e: unknown) => e as { code: string; message: string; details: Record<string, unknown> });
      expect(failure).toMatchObject({ code: 'GH_RATE_LIMITED', message: expect.stringMatching(/rate limit/), details: { status, rateLimitResetAt: expect.any(String) } });
      expect(Date.parse(failure!.details.rateLimitResetAt as string)).toBeGreaterThan(Date.now() + 3_000_000);
      expect((await github.control.requests({ method: 'GET', path: `/commits/${sha}/check-runs` })).map((r) => r.status)).toEqual([status]);
    } finally {
      await github.control.clearFaults();
    }
  });

  it('a primary rate limit on GraphQL (200, a RATE_LIMITED error): the call fails at once, saying when the limit resets', async () => {
    clone.commitAndPush('story/primary-graphql', { 'src/primarygraphql.ts': 'p\n' }, 'primary graphql');
    const { pr } = await prs.open({ repository: repo, branch: 'story/primary-graphql', baseBranch: 'main', title: 't', body: 'b', draft: true });
    const before = (await github.control.requests({ path: '/graphql' })).length;
    await github.control.injectFault({ kind: 'primary_rate_limit', path: '/graphql', resetInSeconds: 3600 });
    try {
      const failure = await prs.markReadyForReview(pr.nodeId).then(() => null, (e: unknown) => e as { code: string; details: Record<string, unknown> });
      expect(failure).toMatchObject({ code: 'GH_RATE_LIMITED', details: { rateLimitResetAt: expect.any(String) } });
      expect(Date.parse(failure!.details.rateLimitResetAt as string)).toBeGreaterThan(Date.now() + 3_000_000);
      expect((await github.control.requests({ path: '/graphql' })).slice(before).map((r) => r.fault)).toEqual(['primary_rate_limit']);
    } finally {
      await github.control.clearFaults();
    }
  });

  it('a permission the token lacks is GH_AUTH_ERROR, for a GraphQL effect (its FORBIDDEN error) as for a REST one (403)', async () => {
    const sha = clone.commitAndPush('story/forbidden', { 'src/forbidden.ts': 'f\n' }, 'forbidden');
    const { pr } = await prs.open({ repository: repo, branch: 'story/forbidden', baseBranch: 'main', title: 't', body: 'b', draft: true });
    const failureOf = (call: Promise<unknown>) => call.then(() => null, (e: unknown) => e as { code: string; message: string });
    try {
      await github.control.injectFault({ kind: 'forbidden', path: '/graphql', count: 3 });
      for (const call of [() => prs.enableAutoMerge(pr.nodeId, sha, 'SQUASH'), () => prs.disableAutoMerge(pr.nodeId), () => prs.markReadyForReview(pr.nodeId)]) {
        expect(await failureOf(call())).toMatchObject({ code: ErrorCode.GH_AUTH_ERROR, message: expect.stringMatching(/Resource not accessible/) });
      }
      await github.control.injectFault({ kind: 'forbidden', method: 'PUT', path: '/merge' });
      expect(await failureOf(prs.merge(repo, pr.number, sha, 'SQUASH'))).toMatchObject({ code: ErrorCode.GH_AUTH_ERROR });
      // Nothing happened on GitHub.
      expect(await prs.read(repo, pr.number)).toMatchObject({ state: 'open', draft: true, autoMergeEnabled: false });
    } finally {
      await github.control.clearFaults();
    }
  });

  it('a 404 — a pull request or repository GitHub does not show: it does not exist, or the token cannot see it — is GH_AUTH_ERROR, REST and GraphQL alike', async () => {
    const failureOf = (call: Promise<unknown>) => call.then(() => null, (e: unknown) => e as { code: string; message: string; details?: Record<string, unknown> });
    const missingPr = await failureOf(prs.read(repo, 999_999));
    expect(missingPr).toMatchObject({ code: ErrorCode.GH_AUTH_ERROR, message: expect.stringMatching(/Not Found.*cannot see/), details: { status: 404 } });
    expect(await failureOf(prs.findOpen('acme/hidden', 'story/x', 'main'))).toMatchObject({ code: ErrorCode.GH_AUTH_ERROR, details: { status: 404 } });
    expect(await failureOf(prs.markReadyForReview('PR_unknown'))).toMatchObject({ code: ErrorCode.GH_AUTH_ERROR, message: expect.stringMatching(/Could not resolve/) });
  });

  it('refused credentials are GH_AUTH_ERROR, never with the token in the message', async () => {
    await github.control.setTokens(['another-token']);
    try {
      const failure = await prs.read(repo, 1).then(() => null, (e: unknown) => e as { code: string; message: string });
      expect(failure).toMatchObject({ code: ErrorCode.GH_AUTH_ERROR, message: expect.stringMatching(/Bad credentials/) });
      expect(failure!.message).not.toContain('test-token');
    } finally {
      await github.control.setTokens(null);
    }
  });
});
