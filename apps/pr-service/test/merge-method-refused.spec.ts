import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { pullRequestIdFor } from '@gantry/contracts';
import { startGitHubFake, type GitHubFake } from '@gantry/github-fake';
import { Clone, octokitFor } from '@gantry/github-fake/testing';
import { startTestService, type TestService } from '@gantry/service-runtime/testing';
import { eventually, testDatabaseUrl } from '@gantry/testing';
import { AppModule } from '../src/app.module.js';
import { PullRequestLog } from '../src/application/pull-request-log.js';
import { PullRequestReconciler } from '../src/application/reconciler.js';
import { pendingEffects, type PullRequestCommand } from '../src/domain/index.js';

/*
 * A repository that does not allow the merge method the product asks for (squash turned off): GitHub
 * refuses auto-merge ("Merge method squash is not allowed on this repository") and a direct merge (405
 * "Squash merges are not allowed on this repository."). A setting a person must change: the refusal is
 * recorded on the PR, visible as its last failure, and the merge of that head is not asked again and
 * again (docs/pr-service.md, "Failures"). The pr-service runs in this process against the local GitHub,
 * on the real PostgreSQL and NATS.
 */
describe('a merge method the repository does not allow', () => {
  const owner = 'acme';
  let fake: GitHubFake;
  let service: TestService;
  let gitDir: string;

  beforeAll(async () => {
    fake = await startGitHubFake({});
    gitDir = mkdtempSync(join(tmpdir(), 'pr-merge-method-'));
    service = await startTestService({
      label: 'pr_merge_method',
      module: AppModule,
      env: {
        GANTRY_GITHUB_API_URL: fake.url,
        GANTRY_GITHUB_TOKEN: 'unused',
        GANTRY_GITHUB_WEBHOOK_SECRETS: 'unused',
        GANTRY_PR_GIT_DIR: gitDir,
        GANTRY_PR_RESYNC_INTERVAL_MS: '3600000',
      },
    });
  }, 90_000);

  afterAll(async () => {
    await service?.close();
    await fake?.close();
    rmSync(gitDir, { recursive: true, force: true });
  });

  it.each([
    ['auto-merge allowed: GitHub refuses the auto-merge for its method', 'squash-auto', true],
    ['auto-merge not allowed: GitHub refuses the direct merge (405)', 'squash-direct', false],
  ])('%s — recorded, visible, and not asked again for that head', async (_what, name, allowAutoMerge) => {
    const repo = await fake.control.createRepository({
      owner,
      name,
      initialFiles: { 'README.md': '# shop\n' },
      settings: { allowAutoMerge, allowSquashMerge: false },
      requiredChecks: ['ci/test'],
    });
    const repository = repo.fullName;
    const branch = 'story/ST-method';
    const clone = new Clone(repo.cloneUrl);
    let head: string;
    try {
      head = clone.commitAndPush(branch, { 'src/story.ts': 'export const story = 1;\n' }, 'the story');
    } finally {
      clone.remove();
    }
    await fake.control.refresh();
    const { octokit } = octokitFor(fake);
    const { data: pr } = await octokit.rest.pulls.create({ owner, repo: name, head: branch, base: 'main', title: 'Story ST-method' });

    const log = service.app.get(PullRequestLog);
    const db = new pg.Pool({ connectionString: testDatabaseUrl, options: `-c search_path=${service.schema}`, max: 1 });
    try {
      await db.query(`INSERT INTO products (product_id, repository, clone_url, settings) VALUES ($1, $2, $3, '{}')`, [`product-${name}`, repository, repo.cloneUrl]);
    } finally {
      await db.end();
    }
    const pullRequestId = pullRequestIdFor(repository, branch);
    const id = { pullRequestId, repository, branch };
    const record = (type: PullRequestCommand['type'], data: Record<string, unknown>) =>
      log.record({ type, data: { ...id, ...data, now: log.now() } } as PullRequestCommand, { correlationId: pullRequestId, causationId: null, actor: 'test' });
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
    await fake.control.setCheck(repository, { sha: head, name: 'ci/test', status: 'completed', conclusion: 'success' });
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
    const reconciler = service.app.get(PullRequestReconciler);
    const failedRuns = () => (reconciler as unknown as { attempts: { get(id: string): number | undefined } }).attempts.get(pullRequestId);
    await eventually(async () => failedRuns() === undefined, { what: 'no failed run of the PR waiting to be tried again', timeoutMs: 10_000 });
    expect((await log.load(pullRequestId)).mergeFailure).toMatchObject({ headSha: head });
    expect((await octokit.rest.pulls.get({ owner, repo: name, pull_number: pr.number })).data).toMatchObject({ merged: false, auto_merge: null });
  }, 120_000);
});
