import { octokitFor, Clone } from '@gantry/github-fake/testing';
import { EventStore } from '@gantry/eventstore';
import { eventually } from '@gantry/testing';
import { PullRequestCommandHandlers } from '../src/application/pull-request-commands.js';
import { inProcessPrService } from './in-process-world.js';

/*
 * PR-2 / PR-13: a PR a person pointed at another base before the pr-service recorded it (the service was down
 * between GitHub's opening it and its answer) is found by its head and adopted on the base GitHub shows. That base
 * is the PR's from then on: its opened event records it, and get_pull_request answers it, not the product's.
 */
describe('a pull request adopted on another base than the product\'s', () => {
  const owner = 'acme';
  const world = inProcessPrService('pr_adopted_base');
  const clones: Clone[] = [];
  afterAll(() => clones.forEach((clone) => clone.remove()));

  it('is answered by get_pull_request on the base GitHub shows, and its opened event records that base', async () => {
    const name = 'rebased';
    const branch = 'story/ST-rebased';
    const repo = await world.fake.control.createRepository({ owner, name, initialFiles: { 'README.md': '# shop\n' }, requiredChecks: ['ci/test'] });
    const clone = new Clone(repo.cloneUrl);
    clones.push(clone);
    clone.commitAndPush('develop', { 'DEVELOP.md': 'develop\n' }, 'develop');
    const head = clone.commitAndPush(branch, { 'src/one.ts': 'export const one = 1;\n' }, 'first task');
    const { octokit } = octokitFor(world.fake);
    const { data: pr } = await octokit.rest.pulls.create({ owner, repo: name, head: branch, base: 'develop', title: `Story ST-${name}` });

    await world.addProduct(`product-${name}`, repo.fullName, repo.cloneUrl);
    const { pullRequestId, record } = world.pullRequest(repo.fullName, branch);
    const flow = { productId: `product-${name}`, baseBranch: 'main', strategy: 'STORY', mergeMethod: 'SQUASH', requiredChecks: ['ci/test'], title: `Story ST-${name}` };
    await record('RecordBranchPushed', { headSha: head, pushedAt: world.log.now(), position: null, jobId: null, sprintRunId: null, flow });
    world.reconciler.ask(pullRequestId);
    await eventually(async () => (await world.log.load(pullRequestId)).pr?.number === pr.number, { what: 'the PR adopted', timeoutMs: 60_000 });

    const view = await world.service.app.get(PullRequestCommandHandlers).get({ repository: repo.fullName, branch });
    expect(view).toMatchObject({ prNumber: pr.number, baseBranch: 'develop' });
    const opened = (await world.service.app.get(EventStore).readStream(pullRequestId)).filter((e) => e.type === 'PullRequestOpened');
    expect(opened.map((e) => e.data)).toEqual([expect.objectContaining({ adopted: true, prNumber: pr.number, baseBranch: 'develop' })]);
  }, 120_000);
});
