import { octokitFor } from '@gantry/github-fake/testing';
import { eventually } from '@gantry/testing';
import { pendingEffects } from '../src/domain/index.js';
import { inProcessPrService, pushedBranch } from './in-process-world.js';

/*
 * A repository that does not allow the merge method the product asks for (squash turned off): GitHub
 * refuses auto-merge ("Merge method squash is not allowed on this repository") and a direct merge (405
 * "Squash merges are not allowed on this repository."). A setting a person must change: the refusal is
 * recorded on the PR, visible as its last failure, and the merge of that head is not asked again and
 * again (docs/pr-service.md, "Failures"). The pr-service runs in this process against the local GitHub,
 * on the real PostgreSQL and NATS.
 */
describe('a merge method the repository does not allow, allowed later', () => {
  const owner = 'acme';
  const world = inProcessPrService('pr_merge_method');

  it.each([
    ['auto-merge allowed: GitHub refuses the auto-merge for its method', 'squash-auto', true],
    ['auto-merge not allowed: GitHub refuses the direct merge (405)', 'squash-direct', false],
  ])('%s — recorded, visible, not asked again for that head until the repository allows the method', async (_what, name, allowAutoMerge) => {
    const repo = await world.fake.control.createRepository({
      owner,
      name,
      initialFiles: { 'README.md': '# shop\n' },
      settings: { allowAutoMerge, allowSquashMerge: false },
      requiredChecks: ['ci/test'],
    });
    const repository = repo.fullName;
    const branch = 'story/ST-method';
    const head = pushedBranch(repo.cloneUrl, branch, { 'src/story.ts': 'export const story = 1;\n' }, 'the story');
    await world.fake.control.refresh();
    const { octokit } = octokitFor(world.fake);
    const { data: pr } = await octokit.rest.pulls.create({ owner, repo: name, head: branch, base: 'main', title: 'Story ST-method' });

    const log = world.log;
    await world.addProduct(`product-${name}`, repository, repo.cloneUrl);
    const { pullRequestId, record } = world.pullRequest(repository, branch);
    await record('RecordTaskQueued', { jobId: 'job-1', taskId: 'T-1', storyId: 'ST-method', storyTaskIds: ['T-1'] });
    await record('RecordBranchPushed', {
      headSha: head,
      pushedAt: log.now(),
      position: null,
      jobId: 'job-1',
      sprintRunId: null,
      flow: { productId: `product-${name}`, baseBranch: 'main', strategy: 'STORY', mergeMethod: 'SQUASH', requiredChecks: ['ci/test'], title: 'Story ST-method' },
    });
    await record('RecordOpened', { prNumber: pr.number, prUrl: pr.html_url, nodeId: pr.node_id, draft: false, headSha: head, adopted: true });
    await world.fake.control.setCheck(repository, { sha: head, name: 'ci/test', status: 'completed', conclusion: 'success' });
    await record('RecordTaskDone', { jobId: 'job-1', taskId: 'T-1' });

    const refused = await eventually(async () => {
      const state = await log.load(pullRequestId);
      return state.mergeFailure?.headSha === head ? state : null;
    }, { what: 'the refusal of the merge method recorded for the head', timeoutMs: 60_000 });
    expect(refused.mergeFailure!.message).toMatch(/squash.* not allowed/i);
    // Visible in get_pull_request: the PR's last failure names GitHub's words.
    expect(refused.lastFailure).toMatchObject({ message: expect.stringMatching(/squash.* not allowed/i) });
    // Nothing more is asked of GitHub for this head, and no failed run is waiting to be tried again.
    expect(pendingEffects(refused)).toEqual([]);
    await eventually(async () => world.failedRuns(pullRequestId) === undefined, { what: 'no failed run of the PR waiting to be tried again', timeoutMs: 10_000 });
    expect((await log.load(pullRequestId)).mergeFailure).toMatchObject({ headSha: head });
    expect((await octokit.rest.pulls.get({ owner, repo: name, pull_number: pr.number })).data).toMatchObject({ merged: false, auto_merge: null });

    // A person allows the method. GitHub shows the PR as before (its mergeable_state is the same) and sends no webhook
    // about a repository's settings: the next look at the PR (the resync, a webhook about it) reads the repository's
    // merge methods while its merge stands refused for one, and the merge is decided again.
    await world.fake.control.updateRepository(repository, { allowSquashMerge: true });
    world.reconciler.ask(pullRequestId);
    const merged = await eventually(async () => {
      const state = await log.load(pullRequestId);
      return state.outcome?.kind === 'MERGED' ? state : null;
    }, { what: 'the PR merged once the repository allows its method', timeoutMs: 60_000 });
    expect(merged.outcome).toMatchObject({ headSha: head });
    // The refusal is over: get_pull_request no longer shows it as the PR's last failure.
    expect(merged.lastFailure).toBeNull();
    expect((await octokit.rest.pulls.get({ owner, repo: name, pull_number: pr.number })).data).toMatchObject({ merged: true });
  }, 180_000);
});
