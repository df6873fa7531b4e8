import { pullRequestIdFor } from '@gantry/contracts';
import { eventually } from '@gantry/testing';
import { PrSystem } from './pr-system.js';

/*
 * STORY pull requests (docs/pr-service.md PR-2..PR-6, PR-16): job service, worktree service, a
 * runner with the stand-in agent, the pr-service and the local GitHub as separate processes. The
 * test plays CI (it reports check runs on heads) and, where a test says so, a person acting on the
 * PR on GitHub with a token of their own.
 */
describe('STORY pull requests end to end', () => {
  const system = new PrSystem();

  beforeAll(async () => {
    await system.start();
    await system.startRunner('runner-story', { concurrency: 1 });
  }, 90_000);
  afterAll(() => system.stop(), 60_000);

  const commit = (file: string) => ({ standIn: { behaviour: 'commit', files: { [file]: `export const x = '${file}';\n` } } });
  /** Every merge asked of GitHub for the branch: merge calls, and merge decisions (auto-merge is asked only after one). */
  const mergeRequests = async (repository: string, branch: string) => [
    ...(await system.github.requests({ method: 'PUT', path: `/repos/${repository}/pulls/` })),
    ...(await system.prEvents(pullRequestIdFor(repository, branch))).filter((e) => e.type === 'PullRequestMergeRequested'),
  ];

  it('no auto-merge after the first or a middle task; after the last, once its head is green, merged — directly, as GitHub says the PR is already clean', async () => {
    const { repository } = await system.product('product-story', 'story', { strategy: 'STORY', requiredChecks: ['ci/test'], protectedBy: ['ci/test'] });
    const branch = 'story/ST-1';
    const tasks = ['T-1', 'T-2', 'T-3'];
    const run = async (taskId: string) => {
      const job = await system.terminal(
        await system.enqueue({ productId: 'product-story', storyId: 'ST-1', taskId, storyTaskIds: tasks, branch, payload: commit(`src/${taskId}.ts`) }),
      );
      expect(job).toMatchObject({ status: 'DONE', taskStatus: 'DONE' });
      return job.headSha!;
    };

    for (const taskId of ['T-1', 'T-2']) {
      const head = await run(taskId);
      const pr = await system.prWhere(repository, branch, (p) => p.headSha === head && p.prNumber !== null && p.scope.tasks.some((t) => t.taskId === taskId && t.done), `${taskId} done on an open PR`);
      expect(pr).toMatchObject({ strategy: 'STORY', draft: false, phase: 'waiting_for_scope_done', scope: { done: false } });
      await system.check(repository, head, 'success');
      const green = await system.prWhere(repository, branch, (p) => p.checks?.headSha === head && p.checks.verdict === 'GREEN', `green seen on ${taskId}'s head`);
      expect(green).toMatchObject({ phase: 'waiting_for_scope_done', mergeDecision: null });
      expect(await mergeRequests(repository, branch)).toEqual([]);
    }

    const last = await run('T-3');
    const waiting = await system.prWhere(repository, branch, (p) => p.headSha === last && p.scope.done, 'the story done');
    expect(waiting).toMatchObject({ phase: 'waiting_for_checks', mergeDecision: null });
    await system.check(repository, last, 'success');
    const merged = await system.prWhere(repository, branch, (p) => p.phase === 'merged', 'merged');
    expect(merged.merged).toMatchObject({ headSha: last });

    const pulls = (await system.github.pulls(repository)).filter((p) => p.head.ref === branch);
    expect(pulls).toHaveLength(1);
    expect(pulls[0]).toMatchObject({ merged: true, state: 'closed', head: { sha: last } });
    const events = (await system.prEvents(pullRequestIdFor(repository, branch))).map((e) => [e.type, e.data.headSha ?? null, e.data.via ?? e.data.reason ?? null]);
    expect(events.filter(([type]) => ['PullRequestMergeRequested', 'PullRequestAutoMergeRefused', 'PullRequestMerged'].includes(type as string))).toEqual([
      ['PullRequestMergeRequested', last, 'AUTO_MERGE'],
      ['PullRequestAutoMergeRefused', last, 'CLEAN'],
      ['PullRequestMergeRequested', last, 'DIRECT'],
      ['PullRequestMerged', last, null],
    ]);
    expect((await system.github.requests({ method: 'PUT', path: `/repos/${repository}/pulls/${pulls[0]!.number}/merge` })).map((r) => r.status)).toEqual([200]);
  }, 180_000);

  it('auto-merge when GitHub still waits for a check of its own: enabled with the head it was decided for, and GitHub merges it', async () => {
    const { repository } = await system.product('product-auto', 'auto', { strategy: 'STORY', requiredChecks: ['ci/test'], protectedBy: ['ci/test', 'ci/lint'] });
    const branch = 'story/ST-2';
    const job = await system.terminal(await system.enqueue({ productId: 'product-auto', storyId: 'ST-2', taskId: 'T-21', branch, payload: commit('src/t21.ts') }));
    expect(job.status).toBe('DONE');
    await system.prWhere(repository, branch, (p) => p.prNumber !== null && p.scope.done, 'the PR open with its one task done');
    await system.check(repository, job.headSha!, 'success');
    const enabled = await system.prWhere(repository, branch, (p) => p.phase === 'auto_merge_enabled', 'auto-merge requested');
    expect(enabled.mergeDecision).toMatchObject({ headSha: job.headSha, via: 'AUTO_MERGE' });
    await eventually(async () => (await system.github.pulls(repository)).find((p) => p.head.ref === branch)?.auto_merge, { what: 'auto-merge enabled on GitHub' });
    await system.check(repository, job.headSha!, 'success', 'ci/lint');
    const merged = await system.prWhere(repository, branch, (p) => p.phase === 'merged', 'merged by GitHub');
    expect(merged.merged).toMatchObject({ headSha: job.headSha });
    expect(await system.github.requests({ method: 'PUT', path: `/repos/${repository}/pulls/` })).toEqual([]);
  }, 120_000);

  it('red after green on the same head: the auto-merge enabled for it is disabled, so GitHub does not merge a red PR its protection lets through', async () => {
    // GitHub requires ci/lint only; the product requires ci/test. A PR with a red ci/test is unstable on GitHub: auto-merge would merge it.
    const { repository } = await system.product('product-rerun', 'rerun', { strategy: 'STORY', requiredChecks: ['ci/test'], protectedBy: ['ci/lint'] });
    const branch = 'story/ST-5';
    const job = await system.terminal(await system.enqueue({ productId: 'product-rerun', storyId: 'ST-5', taskId: 'T-51', branch, payload: commit('src/t51.ts') }));
    expect(job.status).toBe('DONE');
    await system.prWhere(repository, branch, (p) => p.prNumber !== null && p.scope.done, 'the PR open with its one task done');
    await system.check(repository, job.headSha!, 'success');
    await system.prWhere(repository, branch, (p) => p.phase === 'auto_merge_enabled', 'auto-merge requested');
    const onGitHub = async () => (await system.github.pulls(repository)).find((p) => p.head.ref === branch)!;
    await eventually(async () => (await onGitHub()).auto_merge, { what: 'auto-merge enabled on GitHub' });

    // ci/test runs again on the same head and fails.
    await system.check(repository, job.headSha!, 'failure');
    await system.prWhere(repository, branch, (p) => p.phase === 'checks_failed', 'the red seen');
    await eventually(async () => (await onGitHub()).auto_merge === null, { what: 'auto-merge disabled on GitHub' });
    await system.check(repository, job.headSha!, 'success', 'ci/lint');
    await system.github.refresh();
    expect(await onGitHub()).toMatchObject({ state: 'open', merged: false, mergeable_state: 'unstable', auto_merge: null });
    expect(await system.pr(repository, branch)).toMatchObject({ phase: 'checks_failed', mergeDecision: null });
  }, 120_000);

  it('never with no checks reported: a finished story whose head has no checks at all waits', async () => {
    const { repository } = await system.product('product-nochecks', 'nochecks', { strategy: 'STORY', requiredChecks: [] });
    const branch = 'story/ST-3';
    const job = await system.terminal(await system.enqueue({ productId: 'product-nochecks', storyId: 'ST-3', taskId: 'T-31', branch, payload: commit('src/t31.ts') }));
    const pr = await system.prWhere(repository, branch, (p) => p.scope.done && p.prNumber !== null, 'the story done on an open PR');
    // The pr-service reads the PR again and again (resync every second): each read sees no checks.
    const reads = async () => (await system.github.requests({ method: 'GET', path: `/repos/${repository}/commits/${job.headSha}/check-runs` })).length;
    const before = await reads();
    await eventually(async () => (await reads()) >= before + 3, { what: 'three more reads of the head\'s checks' });
    expect(await system.pr(repository, branch)).toMatchObject({ phase: 'waiting_for_checks', checks: null, mergeDecision: null, prNumber: pr.prNumber });
    expect(await mergeRequests(repository, branch)).toEqual([]);
    expect((await system.github.pulls(repository))[0]).toMatchObject({ state: 'open', merged: false, auto_merge: null });
  }, 120_000);

  it('a PR a person closed without merge and reopened is carried on: merged once its head is green', async () => {
    const { repository } = await system.product('product-reopen', 'reopen', { strategy: 'STORY', requiredChecks: ['ci/test'], protectedBy: ['ci/test'] });
    const branch = 'story/ST-4';
    const job = await system.terminal(await system.enqueue({ productId: 'product-reopen', storyId: 'ST-4', taskId: 'T-41', branch, payload: commit('src/t41.ts') }));
    expect(job.status).toBe('DONE');
    const open = await system.prWhere(repository, branch, (p) => p.prNumber !== null && p.scope.done, 'the PR open with its one task done');
    // Someone closes the PR on GitHub, and later reopens it (REST, as a person's client would).
    const setState = async (state: 'open' | 'closed') => {
      expect((await system.asSomeone('PATCH', `/repos/${repository}/pulls/${open.prNumber}`, { state })).status).toBe(200);
    };
    await setState('closed');
    await system.prWhere(repository, branch, (p) => p.phase === 'closed', 'closed');
    await system.check(repository, job.headSha!, 'success');
    await setState('open');
    const merged = await system.prWhere(repository, branch, (p) => p.phase === 'merged', 'merged after the reopen');
    expect(merged).toMatchObject({ prNumber: open.prNumber, merged: { headSha: job.headSha } });
    const types = (await system.prEvents(pullRequestIdFor(repository, branch))).map((e) => e.type);
    expect(types.filter((t) => ['PullRequestClosed', 'PullRequestReopened', 'PullRequestMerged'].includes(t))).toEqual(['PullRequestClosed', 'PullRequestReopened', 'PullRequestMerged']);
  }, 120_000);

  it('auto-merge turned off by a person on GitHub: its delivery has the PR read and the merge held — not enabled again, not merged when GitHub could; the person merges it', async () => {
    // GitHub waits for ci/lint as well: auto-merge is enabled when ci/test is green.
    const { repository } = await system.product('product-held', 'held', { strategy: 'STORY', requiredChecks: ['ci/test'], protectedBy: ['ci/test', 'ci/lint'] });
    const branch = 'story/ST-6';
    const pullRequestId = pullRequestIdFor(repository, branch);
    const job = await system.terminal(await system.enqueue({ productId: 'product-held', storyId: 'ST-6', taskId: 'T-61', branch, payload: commit('src/t61.ts') }));
    const open = await system.prWhere(repository, branch, (p) => p.prNumber !== null && p.scope.done, 'the PR open with its one task done');
    await system.check(repository, job.headSha!, 'success');
    await eventually(async () => (await system.prEvents(pullRequestId)).some((e) => e.type === 'PullRequestAutoMergeEnabled'), { what: 'auto-merge recorded enabled' });
    const enables = async () => (await system.github.requests({ graphqlField: 'enablePullRequestAutoMerge' })).length;
    const enablesBefore = await enables();

    const pull = (await system.github.pulls(repository))[0]!;
    const disabled = await system.asSomeone('POST', '/graphql', { query: 'mutation($id: ID!) { disablePullRequestAutoMerge(input: { pullRequestId: $id }) { clientMutationId } }', variables: { id: pull.node_id } });
    expect(disabled).toMatchObject({ status: 200, body: { data: { disablePullRequestAutoMerge: expect.anything() } } });
    const delivery = await system.github.waitForDelivery((d) => d.event === 'pull_request' && d.action === 'auto_merge_disabled' && d.payload.repository?.full_name === repository);
    const held = await system.prWhere(repository, branch, (p) => p.phase === 'merge_held', 'the merge held', 30_000);
    expect(held).toMatchObject({ headSha: job.headSha, mergeDecision: null, checks: { verdict: 'GREEN' } });
    expect((await system.deliveries()).find((d) => d.delivery_id === delivery.id)).toMatchObject({ outcome: 'read again: 1' });

    // GitHub's own check passes: the PR is clean, and nothing merges it.
    await system.check(repository, job.headSha!, 'success', 'ci/lint');
    const reads = async () => (await system.github.requests({ method: 'GET', path: `/repos/${repository}/pulls/${open.prNumber}` })).length;
    const readsBefore = await reads();
    await eventually(async () => (await reads()) >= readsBefore + 3, { what: 'three more reads of the PR' });
    expect(await system.github.requests({ method: 'PUT', path: `/repos/${repository}/pulls/` })).toEqual([]);
    expect(await enables()).toBe(enablesBefore);
    expect((await system.github.pulls(repository))[0]).toMatchObject({ state: 'open', merged: false, mergeable_state: 'clean', auto_merge: null });
    expect(await system.pr(repository, branch)).toMatchObject({ phase: 'merge_held', mergeDecision: null });

    const merge = await system.asSomeone('PUT', `/repos/${repository}/pulls/${open.prNumber}/merge`, { merge_method: 'squash' });
    expect(merge.status).toBe(200);
    const merged = await system.prWhere(repository, branch, (p) => p.phase === 'merged', 'merged by the person');
    expect(merged.merged).toMatchObject({ headSha: job.headSha });
    expect((await system.prEvents(pullRequestId)).filter((e) => e.type === 'PullRequestAutoMergeDisabledOnGitHub')).toHaveLength(1);
  }, 120_000);

  it('a PR a person converts to a draft with auto-merge on (GitHub turns it off) stays held when made ready again, until the person enables auto-merge: then GitHub merges it', async () => {
    const { repository } = await system.product('product-drafted', 'drafted', { strategy: 'STORY', requiredChecks: ['ci/test'], protectedBy: ['ci/test', 'ci/lint'] });
    const branch = 'story/ST-7';
    const pullRequestId = pullRequestIdFor(repository, branch);
    const job = await system.terminal(await system.enqueue({ productId: 'product-drafted', storyId: 'ST-7', taskId: 'T-71', branch, payload: commit('src/t71.ts') }));
    const open = await system.prWhere(repository, branch, (p) => p.prNumber !== null && p.scope.done, 'the PR open with its one task done');
    await system.check(repository, job.headSha!, 'success');
    await eventually(async () => (await system.prEvents(pullRequestId)).some((e) => e.type === 'PullRequestAutoMergeEnabled'), { what: 'auto-merge recorded enabled' });
    const enables = async () => (await system.github.requests({ graphqlField: 'enablePullRequestAutoMerge' })).length;
    const enablesBefore = await enables();
    const { node_id: id } = (await system.github.pulls(repository))[0]!;
    const asThePerson = async (mutation: string, variables: Record<string, unknown> = {}) => {
      const answer = await system.asSomeone('POST', '/graphql', { query: `mutation($id: ID!${mutation.includes('$oid') ? ', $oid: GitObjectID!' : ''}) { ${mutation} { clientMutationId } }`, variables: { id, ...variables } });
      expect(answer).toMatchObject({ status: 200, body: { data: expect.anything() } });
      expect(answer.body.errors).toBeUndefined();
    };

    await asThePerson('convertPullRequestToDraft(input: { pullRequestId: $id })');
    expect((await system.github.pulls(repository))[0]).toMatchObject({ draft: true, auto_merge: null });
    await system.prWhere(repository, branch, (p) => p.phase === 'merge_held', 'the merge held', 30_000);
    await asThePerson('markPullRequestReadyForReview(input: { pullRequestId: $id })');
    const reads = async () => (await system.github.requests({ method: 'GET', path: `/repos/${repository}/pulls/${open.prNumber}` })).length;
    const readsBefore = await reads();
    await eventually(async () => (await reads()) >= readsBefore + 3, { what: 'three more reads of the PR' });
    expect(await enables()).toBe(enablesBefore);
    expect((await system.github.pulls(repository))[0]).toMatchObject({ state: 'open', draft: false, auto_merge: null });
    expect(await system.pr(repository, branch)).toMatchObject({ phase: 'merge_held', mergeDecision: null });

    await asThePerson('enablePullRequestAutoMerge(input: { pullRequestId: $id, expectedHeadOid: $oid, mergeMethod: SQUASH })', { oid: job.headSha });
    await system.prWhere(repository, branch, (p) => p.phase === 'auto_merge_enabled', 'auto-merge seen on again', 30_000);
    await system.check(repository, job.headSha!, 'success', 'ci/lint');
    const merged = await system.prWhere(repository, branch, (p) => p.phase === 'merged', 'merged by GitHub');
    expect(merged.merged).toMatchObject({ headSha: job.headSha });
    expect(await system.github.requests({ method: 'PUT', path: `/repos/${repository}/pulls/` })).toEqual([]);
    expect(await enables()).toBe(enablesBefore + 1);
  }, 120_000);

  it("the pr-service's view of the pull requests equals a rebuild from its log", async () => {
    const { live, rebuilt } = await system.viewsAndTheirRebuild();
    expect(live.length).toBeGreaterThanOrEqual(5);
    expect(rebuilt).toEqual(live);
  });
});
