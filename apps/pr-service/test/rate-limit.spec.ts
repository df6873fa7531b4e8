import { register } from 'prom-client';
import { octokitFor } from '@gantry/github-fake/testing';
import { eventually } from '@gantry/testing';
import { inProcessPrService, pushedBranch } from './in-process-world.js';

/*
 * GitHub's primary rate limit lasts until its reset, up to an hour. A run that waited it out would hold its
 * database connection and its run slot all that time — with many PRs, every slot waits and the pool runs dry.
 * So a run that meets the limit ends: the limit is the PR's last failure, with the time the PR is worked on
 * again, and that time is in the PR's log, so a restart waits for it too (docs/pr-service.md, "Effects on
 * GitHub"). The pr-service runs in this process against the local GitHub, on the real PostgreSQL and NATS.
 */
describe('GitHub\'s primary rate limit used up', () => {
  const owner = 'acme';
  const name = 'limited';
  const branch = 'sprint/SP-limited';
  const world = inProcessPrService('pr_rate_limit');

  it('ends the run (no slot held), is the PR\'s last failure, and the PR is read again only after the reset — across a restart', async () => {
    const repo = await world.fake.control.createRepository({ owner, name, initialFiles: { 'src/app.ts': 'export const app = 1;\n' } });
    const repository = repo.fullName;
    const head = pushedBranch(repo.cloneUrl, branch, { 'src/app.ts': 'export const app = "sprint";\n' }, 'sprint changes app');
    const { octokit } = octokitFor(world.fake);
    const { data: pr } = await octokit.rest.pulls.create({ owner, repo: name, head: branch, base: 'main', title: 'Sprint SP-limited', draft: true });
    await world.fake.control.setCheck(repository, { sha: head, name: 'ci/test', status: 'completed', conclusion: 'failure' });
    const readPath = `/repos/${repository}/pulls/${pr.number}`;
    await world.fake.control.injectFault({ kind: 'primary_rate_limit', method: 'GET', path: readPath, resetInSeconds: 20 });

    const log = world.log;
    await world.addProduct('product-limited', repository, repo.cloneUrl);
    const { pullRequestId } = await world.adoptedSprintPullRequest('product-limited', repository, branch, head, pr);

    // The read met the limit: the PR's last failure says so, and when the PR is worked on again.
    const limited = await eventually(async () => {
      const state = await log.load(pullRequestId);
      return state.lastFailure?.retryAt ? state : null;
    }, { what: 'the rate limit recorded as the PR\'s last failure', timeoutMs: 60_000 });
    expect(limited.lastFailure).toMatchObject({ effect: 'READ_PULL_REQUEST', code: 'GH_RATE_LIMITED', message: expect.stringMatching(/rate limit/) });
    const [refused] = await world.fake.control.requests({ method: 'GET', path: readPath });
    expect(refused).toMatchObject({ status: 403, fault: 'primary_rate_limit' });
    const retryAt = Date.parse(limited.lastFailure!.retryAt!);
    expect(retryAt).toBeGreaterThan(Date.parse(refused!.at));
    // The run is over — no run slot (and no database connection) waits for the reset — and it is no failed run to retry sooner.
    const runs = (world.reconciler as unknown as { runs: { active: number } }).runs;
    await eventually(async () => runs.active === 0, { what: 'no run under way while the PR waits for the reset' });
    expect(world.failedRuns(pullRequestId)).toBeUndefined();

    // A restart asks for every open PR at once; this one still waits for the reset, which is in its log.
    await world.restart();
    const red = await eventually(async () => {
      const state = await world.log.load(pullRequestId);
      return state.checks?.verdict === 'RED' ? state : null;
    }, { what: 'the PR read after the reset', timeoutMs: 90_000 });
    expect(red.checks).toMatchObject({ headSha: head, verdict: 'RED' });
    const reads = await world.fake.control.requests({ method: 'GET', path: readPath });
    expect(reads.filter((r) => r.fault !== null)).toHaveLength(1);
    // GitHub's reset is a second before retryAt: not one read came before it.
    for (const read of reads.slice(1)) expect(Date.parse(read.at)).toBeGreaterThanOrEqual(retryAt - 1000);
  }, 180_000);

  /** A repository with its product, and for each branch a pushed head with red checks and a draft PR on GitHub (not yet tracked). */
  async function draftPullRequests(repoName: string, branches: string[]) {
    const repo = await world.fake.control.createRepository({ owner, name: repoName, initialFiles: { 'src/app.ts': 'export const app = 1;\n' } });
    const repository = repo.fullName;
    await world.addProduct(`product-${repoName}`, repository, repo.cloneUrl);
    const { octokit } = octokitFor(world.fake);
    const opened = [];
    for (const b of branches) {
      const head = pushedBranch(repo.cloneUrl, b, { [`src/${b.replace('/', '-')}.ts`]: 'x\n' }, b);
      const { data: pr } = await octokit.rest.pulls.create({ owner, repo: repoName, head: b, base: 'main', title: b, draft: true });
      await world.fake.control.setCheck(repository, { sha: head, name: 'ci/test', status: 'completed', conclusion: 'failure' });
      opened.push({ head, pr });
    }
    return { repository, opened };
  }

  it('while the limit lasts, no other PR is read either: each waits for the reset instead of asking GitHub again', async () => {
    const {
      repository,
      opened: [first, second],
    } = await draftPullRequests('limited-many', ['sprint/SP-first', 'sprint/SP-second']);
    await world.fake.control.injectFault({ kind: 'primary_rate_limit', method: 'GET', path: `/repos/${repository}/pulls/${first.pr.number}`, resetInSeconds: 15 });
    const limited = await world.adoptedSprintPullRequest('product-limited-many', repository, 'sprint/SP-first', first.head, first.pr);
    const retryAt = Date.parse(
      (await eventually(async () => (await world.log.load(limited.pullRequestId)).lastFailure?.retryAt, { what: 'the rate limit recorded', timeoutMs: 60_000 }))!,
    );

    // Another PR asked for meanwhile (its events, a webhook) is read only once the limit has reset.
    const other = await world.adoptedSprintPullRequest('product-limited-many', repository, 'sprint/SP-second', second.head, second.pr);
    await eventually(async () => (await world.log.load(other.pullRequestId)).checks?.verdict === 'RED', { what: 'the other PR read after the reset', timeoutMs: 90_000 });
    const reads = await world.fake.control.requests({ method: 'GET', path: `/repos/${repository}/pulls/${second.pr.number}` });
    expect(reads.length).toBeGreaterThan(0);
    for (const read of reads) expect(Date.parse(read.at)).toBeGreaterThanOrEqual(retryAt - 1000);
  }, 180_000);

  it('the hold is kept where every replica and a restart find it: after a restart no other PR is read before the reset, and /metrics shows it', async () => {
    const {
      repository,
      opened: [first, second],
    } = await draftPullRequests('limited-kept', ['sprint/SP-kept-first', 'sprint/SP-kept-second']);
    const hits = async () => (await register.getSingleMetric('gantry_pr_github_rate_limited_total')?.get())?.values.reduce((sum, v) => sum + v.value, 0) ?? 0;
    const hitsBefore = await hits();
    await world.fake.control.injectFault({ kind: 'primary_rate_limit', method: 'GET', path: `/repos/${repository}/pulls/${first.pr.number}`, resetInSeconds: 20 });
    const limited = await world.adoptedSprintPullRequest('product-limited-kept', repository, 'sprint/SP-kept-first', first.head, first.pr);
    const retryAt = Date.parse(
      (await eventually(async () => (await world.log.load(limited.pullRequestId)).lastFailure?.retryAt, { what: 'the rate limit recorded', timeoutMs: 60_000 }))!,
    );
    // Metrics: the refused request is counted, and the hold's remaining time is shown while it lasts (checked below).
    const hitsAfter = await hits();
    const hold = (await register.getSingleMetric('gantry_pr_github_rate_limit_hold_seconds')?.get())?.values[0]?.value ?? 0;
    const holdLeft = (retryAt - Date.now()) / 1000;

    // A new process (a restart here; a second replica alike) starts with nothing in memory: the hold is in the database.
    await world.restart();
    const other = await world.adoptedSprintPullRequest('product-limited-kept', repository, 'sprint/SP-kept-second', second.head, second.pr);
    await eventually(async () => (await world.log.load(other.pullRequestId)).checks?.verdict === 'RED', { what: 'the other PR read after the reset', timeoutMs: 90_000 });
    const reads = await world.fake.control.requests({ method: 'GET', path: `/repos/${repository}/pulls/${second.pr.number}` });
    expect(reads.length).toBeGreaterThan(0);
    for (const read of reads) expect(Date.parse(read.at)).toBeGreaterThanOrEqual(retryAt - 1000);
    expect(hitsAfter).toBe(hitsBefore + 1);
    expect(hold).toBeGreaterThan(0);
    expect(hold).toBeLessThanOrEqual(holdLeft + 1);
  }, 180_000);
});
