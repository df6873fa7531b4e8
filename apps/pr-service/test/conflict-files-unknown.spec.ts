import { type PullRequestFailureCode } from '@gantry/contracts';
import { octokitFor } from '@gantry/github-fake/testing';
import { eventually } from '@gantry/testing';
import { CONFLICT_LOOKUPS } from '../src/application/reconciler.js';
import { CONFLICTING_FILES } from '../src/application/tokens.js';
import type { ConflictingFiles } from '../src/infrastructure/git/conflicting-files.js';
import { pendingEffects, type PullRequestState } from '../src/domain/index.js';
import { inProcessPrService, pushedBranch } from './in-process-world.js';

/*
 * PR-10: GitHub says a pull request conflicts, and the pr-service works out the files with git. When
 * git cannot (the fetch fails), the rest of the read still counts — red checks on the head are
 * recorded — and the look-up is tried a bounded number of times, then the conflict is left visible
 * as the PR's last failure (docs/pr-service.md, PR-10). The pr-service runs in this process against
 * the local GitHub, on the real PostgreSQL and NATS; the product's clone URL names no repository.
 */
describe('a conflict whose files git cannot work out', () => {
  const owner = 'acme';
  const branch = 'sprint/SP-unnamed';
  const world = inProcessPrService('pr_conflict_unnamed');

  /** Counts the look-ups of conflicting files the running process makes from now on (they still run). */
  const countLookups = (): { count: number } => {
    const files = world.service.app.get<ConflictingFiles>(CONFLICTING_FILES);
    const between = files.between.bind(files);
    const counted = { count: 0 };
    files.between = (...args) => {
      counted.count++;
      return between(...args);
    };
    return counted;
  };

  it('records the rest of the read (red checks), tries the files a bounded number of times, then leaves the conflict visible', async () => {
    const repo = await world.fake.control.createRepository({ owner, name: 'unnamed', initialFiles: { 'src/app.ts': 'export const app = 1;\n' } });
    const repository = repo.fullName;
    const head = pushedBranch(repo.cloneUrl, branch, { 'src/app.ts': 'export const app = "sprint";\n' }, 'sprint changes app');
    await world.fake.control.commit(repository, { branch: 'main', files: { 'src/app.ts': 'export const app = "main";\n' }, message: 'main changes app' });
    await world.fake.control.refresh();
    const { octokit } = octokitFor(world.fake);
    const { data: pr } = await octokit.rest.pulls.create({ owner, repo: 'unnamed', head: branch, base: 'main', title: 'Sprint SP-unnamed', draft: true });
    await eventually(async () => (await octokit.rest.pulls.get({ owner, repo: 'unnamed', pull_number: pr.number })).data.mergeable_state === 'dirty', { what: 'GitHub showing the PR dirty' });
    await world.fake.control.setCheck(repository, { sha: head, name: 'ci/test', status: 'completed', conclusion: 'failure' });

    // The product names a clone URL git cannot fetch from.
    const lookups = countLookups();
    const log = world.log;
    await world.addProduct('product-unnamed', repository, `file://${world.gitDir}/nowhere.git`);
    const { pullRequestId } = await world.adoptedSprintPullRequest('product-unnamed', repository, branch, head, pr);

    // The read is recorded without the conflict: its red checks count.
    const red = await eventually(async () => {
      const state = await log.load(pullRequestId);
      return state.checks?.verdict === 'RED' ? state : null;
    }, { what: 'the red checks of the conflicting head recorded', timeoutMs: 60_000 });
    expect(red.checks).toMatchObject({ headSha: head, verdict: 'RED', names: ['ci/test'] });
    expect(red.conflict).toBeNull();

    // The files are looked up CONFLICT_LOOKUPS times in all; then the conflict is the PR's last failure, files unknown.
    const visible = await eventually(async () => {
      const state: PullRequestState = await log.load(pullRequestId);
      return state.lastFailure?.code === 'MERGE_CONFLICT' ? state : null;
    }, { what: 'the unnamed conflict recorded as the PR\'s last failure', timeoutMs: 120_000 });
    expect(visible.lastFailure).toMatchObject({ effect: 'READ_PULL_REQUEST', code: 'MERGE_CONFLICT' satisfies PullRequestFailureCode });
    expect(visible.lastFailure!.message).toContain(head);
    expect(visible.conflict).toBeNull();

    // Read again (the check re-run green, a webhook, a resync): the read is recorded, and git is not asked again for that head.
    expect(lookups.count).toBe(CONFLICT_LOOKUPS);
    await world.fake.control.setCheck(repository, { sha: head, name: 'ci/test', status: 'completed', conclusion: 'success' });
    world.reconciler.ask(pullRequestId);
    await eventually(async () => (await world.log.load(pullRequestId)).checks?.verdict === 'GREEN', { what: 'the re-run green recorded' });
    expect(lookups.count).toBe(CONFLICT_LOOKUPS);

    // Nor after a restart: the look-ups made for the head are in the PR's log, not in the process that made them.
    await world.restart();
    const afterRestart = countLookups();
    await world.fake.control.setCheck(repository, { sha: head, name: 'ci/test', status: 'completed', conclusion: 'failure' });
    world.reconciler.ask(pullRequestId);
    await eventually(async () => (await world.log.load(pullRequestId)).checks?.verdict === 'RED', { what: 'the red re-run recorded after the restart' });
    expect(afterRestart.count).toBe(0);
    expect((await world.log.load(pullRequestId)).lastFailure).toMatchObject({ effect: 'READ_PULL_REQUEST', code: 'MERGE_CONFLICT' });
  }, 240_000);

  it('a head whose conflict stayed unnamed, shown clean and then conflicting again, is looked up again (its count starts again)', async () => {
    const name = 'unnamed-again';
    const againBranch = 'sprint/SP-unnamed-again';
    const repo = await world.fake.control.createRepository({ owner, name, initialFiles: { 'src/app.ts': 'export const app = 1;\n' } });
    const repository = repo.fullName;
    const head = pushedBranch(repo.cloneUrl, againBranch, { 'src/app.ts': 'export const app = "sprint";\n' }, 'sprint changes app');
    const { octokit } = octokitFor(world.fake);
    const { data: pr } = await octokit.rest.pulls.create({ owner, repo: name, head: againBranch, base: 'main', title: 'Sprint SP-unnamed-again', draft: true });
    const mainSays = async (value: string, mergeable: boolean) => {
      await world.fake.control.commit(repository, { branch: 'main', files: { 'src/app.ts': value }, message: `main: ${value.trim()}` });
      await world.fake.control.refresh();
      await eventually(async () => (await octokit.rest.pulls.get({ owner, repo: name, pull_number: pr.number })).data.mergeable === mergeable, { what: `GitHub showing the PR mergeable: ${mergeable}` });
    };
    await mainSays('export const app = "main";\n', false);

    const lookups = countLookups();
    const log = world.log;
    await world.addProduct(`product-${name}`, repository, `file://${world.gitDir}/nowhere-again.git`);
    const { pullRequestId } = await world.adoptedSprintPullRequest(`product-${name}`, repository, againBranch, head, pr);
    await eventually(async () => (await log.load(pullRequestId)).lastFailure?.code === 'MERGE_CONFLICT', { what: 'the unnamed conflict as the PR\'s last failure', timeoutMs: 120_000 });
    expect(lookups.count).toBe(CONFLICT_LOOKUPS);

    // The base changes back: GitHub shows the same head clean. The conflict is over, and so is its last failure.
    await mainSays('export const app = 1;\n', true);
    world.reconciler.ask(pullRequestId);
    const cleared = await eventually(async () => {
      const state = await log.load(pullRequestId);
      return state.conflictLookups === null ? state : null;
    }, { what: 'the cleared conflict recorded', timeoutMs: 60_000 });
    expect(cleared.lastFailure).toBeNull();
    expect(cleared.headSha).toBe(head);

    // The base conflicts with the same head again: git is asked again for it.
    await mainSays('export const app = "main again";\n', false);
    world.reconciler.ask(pullRequestId);
    const again = await eventually(async () => {
      const state = await log.load(pullRequestId);
      return state.conflictLookups?.headSha === head ? state : null;
    }, { what: 'a look-up of the conflict made again', timeoutMs: 60_000 });
    expect(again.conflictLookups!.failures).toBeGreaterThanOrEqual(1);
    expect(lookups.count).toBeGreaterThan(CONFLICT_LOOKUPS);
  }, 240_000);

  /*
   * The same conflict on a STORY PR that is done and green: the read shows no conflict recorded, so a merge is
   * decided for the head. GitHub refuses it — a direct merge with 405 "not mergeable", auto-merge with
   * "Pull request is in dirty status" — and either way the refusal is the head's MERGE_CONFLICT merge
   * failure (PR-14): not asked again until GitHub shows the PR differently, and no failed run left retrying.
   */
  it.each([
    ['auto-merge allowed: GitHub refuses the auto-merge (dirty status)', 'unnamed-auto', true],
    ['auto-merge not allowed: GitHub refuses the direct merge (405)', 'unnamed-direct', false],
  ])('a STORY PR done and green: %s — a MERGE_CONFLICT merge failure, not a retry loop', async (_what, name, allowAutoMerge) => {
    const storyBranch = 'story/ST-unnamed';
    const repo = await world.fake.control.createRepository({
      owner,
      name,
      initialFiles: { 'src/app.ts': 'export const app = 1;\n' },
      settings: { allowAutoMerge },
      requiredChecks: ['ci/test'],
    });
    const repository = repo.fullName;
    const head = pushedBranch(repo.cloneUrl, storyBranch, { 'src/app.ts': 'export const app = "story";\n' }, 'story changes app');
    await world.fake.control.commit(repository, { branch: 'main', files: { 'src/app.ts': 'export const app = "main";\n' }, message: 'main changes app' });
    await world.fake.control.refresh();
    const { octokit } = octokitFor(world.fake);
    const { data: pr } = await octokit.rest.pulls.create({ owner, repo: name, head: storyBranch, base: 'main', title: 'Story ST-unnamed' });
    await eventually(async () => (await octokit.rest.pulls.get({ owner, repo: name, pull_number: pr.number })).data.mergeable_state === 'dirty', { what: 'GitHub showing the PR dirty' });
    await world.fake.control.setCheck(repository, { sha: head, name: 'ci/test', status: 'completed', conclusion: 'success' });

    const log = world.log;
    await world.addProduct(`product-${name}`, repository, `file://${world.gitDir}/nowhere.git`);
    const { pullRequestId, record } = world.pullRequest(repository, storyBranch);
    await record('RecordTaskQueued', { jobId: `job-${name}`, taskId: 'T-1', storyId: 'ST-unnamed', storyTaskIds: ['T-1'] });
    await record('RecordBranchPushed', {
      headSha: head,
      pushedAt: log.now(),
      position: null,
      jobId: `job-${name}`,
      sprintRunId: null,
      flow: { productId: `product-${name}`, baseBranch: 'main', strategy: 'STORY', mergeMethod: 'SQUASH', requiredChecks: ['ci/test'], title: 'Story ST-unnamed' },
    });
    await record('RecordOpened', { prNumber: pr.number, prUrl: pr.html_url, nodeId: pr.node_id, draft: false, headSha: head, adopted: true });
    await record('RecordTaskDone', { jobId: `job-${name}`, taskId: 'T-1' });

    const refused = await eventually(async () => {
      const state = await log.load(pullRequestId);
      return state.mergeFailure?.headSha === head ? state : null;
    }, { what: 'the refused merge of the conflicting head recorded', timeoutMs: 60_000 });
    expect(refused.mergeFailure).toMatchObject({ code: 'MERGE_CONFLICT' satisfies PullRequestFailureCode, mergeableState: 'dirty' });
    expect(refused.conflict).toBeNull();
    expect(pendingEffects(refused)).toEqual([]);
    // The unnamed conflict ends as the PR's last failure (PR-10), and no failed run is left waiting to be tried again.
    const settled = await eventually(async () => {
      const state = await log.load(pullRequestId);
      return state.lastFailure?.effect === 'READ_PULL_REQUEST' && world.failedRuns(pullRequestId) === undefined ? state : null;
    }, { what: 'the conflict as the last failure, and no failed run waiting', timeoutMs: 120_000 });
    expect(settled.lastFailure).toMatchObject({ code: 'MERGE_CONFLICT' });
    expect(settled.mergeFailure).toMatchObject({ headSha: head, code: 'MERGE_CONFLICT' });
    expect((await octokit.rest.pulls.get({ owner, repo: name, pull_number: pr.number })).data).toMatchObject({ merged: false, auto_merge: null });
  }, 240_000);
});
