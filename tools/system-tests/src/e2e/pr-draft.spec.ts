import { pullRequestIdFor } from '@gantry/contracts';
import { eventually } from '@gantry/testing';
import { PrSystem } from './pr-system.js';

/*
 * A STORY pull request a person converts to a draft before Gantry decided its merge (docs/pr-service.md,
 * PR-17): job service, worktree service, a runner with the stand-in agent, the pr-service and the local
 * GitHub as separate processes. The test plays CI (check runs on heads) and the person, who acts on
 * the PR on GitHub with a token of their own.
 */
describe('a STORY pull request a person made a draft, end to end', () => {
  const system = new PrSystem();

  beforeAll(async () => {
    await system.start();
    await system.startRunner('runner-draft', { concurrency: 1 });
  }, 90_000);
  afterAll(() => system.stop(), 60_000);

  const commit = (file: string) => ({ standIn: { behaviour: 'commit', files: { [file]: `export const x = '${file}';\n` } } });

  /** A finished one-task story on its own product: its PR open, its scope done. */
  async function finishedStory(name: string, protectedBy: string[]) {
    const productId = `product-${name}`;
    const { repository } = await system.product(productId, name, { strategy: 'STORY', requiredChecks: ['ci/test'], protectedBy });
    const branch = `story/${name}`;
    const job = await system.terminal(await system.enqueue({ productId, storyId: `ST-${name}`, taskId: `T-${name}`, branch, payload: commit(`src/${name}.ts`) }));
    expect(job).toMatchObject({ status: 'DONE', taskStatus: 'DONE' });
    const pr = await system.prWhere(repository, branch, (p) => p.prNumber !== null && p.headSha === job.headSha && p.scope.done, 'the PR open with its one task done', 120_000);
    return { repository, branch, head: job.headSha!, prNumber: pr.prNumber!, pullRequestId: pullRequestIdFor(repository, branch) };
  }

  /** What the person does on GitHub (GraphQL, with their own token): convert the PR to a draft, or mark it ready. */
  async function asThePerson(repository: string, mutation: 'convertPullRequestToDraft' | 'markPullRequestReadyForReview'): Promise<void> {
    const { node_id: id } = (await system.github.pulls(repository))[0]!;
    const answer = await system.asSomeone('POST', '/graphql', { query: `mutation($id: ID!) { ${mutation}(input: { pullRequestId: $id }) { clientMutationId } }`, variables: { id } });
    expect(answer).toMatchObject({ status: 200, body: { data: expect.anything() } });
    expect(answer.body.errors).toBeUndefined();
  }

  const types = async (pullRequestId: string, ...wanted: string[]) =>
    (await system.prEvents(pullRequestId)).filter((e) => wanted.includes(e.type)).map((e) => [e.type, e.data.draft ?? e.data.via ?? null]);

  it('converted before its checks were green: no auto-merge asked, no merge, the phase says why; marked ready, auto-merge is enabled and GitHub merges it', async () => {
    // GitHub waits for ci/lint as well: with ci/test green the PR is not clean, and auto-merge is what Gantry asks for.
    const story = await finishedStory('drafted', ['ci/test', 'ci/lint']);
    expect(await system.pr(story.repository, story.branch)).toMatchObject({ phase: 'waiting_for_checks', draft: false, mergeDecision: null });

    await asThePerson(story.repository, 'convertPullRequestToDraft');
    await system.prWhere(story.repository, story.branch, (p) => p.draft === true, 'the draft recorded', 60_000);
    await system.check(story.repository, story.head, 'success');
    const held = await system.prWhere(story.repository, story.branch, (p) => p.checks?.verdict === 'GREEN', 'green seen on the draft', 60_000);
    expect(held).toMatchObject({ phase: 'held_as_draft', draft: true, headSha: story.head, mergeDecision: null });

    // The pr-service reads it again and again (resync every second): each read sees a green draft and asks GitHub nothing.
    const reads = async () => (await system.github.requests({ method: 'GET', path: `/repos/${story.repository}/pulls/${story.prNumber}` })).length;
    const readsBefore = await reads();
    await eventually(async () => (await reads()) >= readsBefore + 3, { what: 'three more reads of the PR', timeoutMs: 60_000 });
    expect(await system.github.requests({ graphqlField: 'enablePullRequestAutoMerge' })).toEqual([]);
    expect(await system.github.requests({ method: 'PUT', path: `/repos/${story.repository}/pulls/` })).toEqual([]);
    expect(await system.pr(story.repository, story.branch)).toMatchObject({ phase: 'held_as_draft', mergeDecision: null, lastFailure: null });
    expect(await types(story.pullRequestId, 'PullRequestMergeRequested', 'PullRequestEffectFailed', 'PullRequestMergeFailed')).toEqual([]);

    await asThePerson(story.repository, 'markPullRequestReadyForReview');
    const enabled = await system.prWhere(story.repository, story.branch, (p) => p.phase === 'auto_merge_enabled', 'the merge decided again once ready', 60_000);
    expect(enabled).toMatchObject({ draft: false, mergeDecision: { headSha: story.head, via: 'AUTO_MERGE' } });
    await eventually(async () => (await system.github.pulls(story.repository))[0]!.auto_merge, { what: 'auto-merge enabled on GitHub', timeoutMs: 60_000 });
    await system.check(story.repository, story.head, 'success', 'ci/lint');
    const merged = await system.prWhere(story.repository, story.branch, (p) => p.phase === 'merged', 'merged by GitHub', 120_000);
    expect(merged.merged).toMatchObject({ headSha: story.head });

    expect(await types(story.pullRequestId, 'PullRequestDraftChanged', 'PullRequestMergeRequested', 'PullRequestEffectFailed')).toEqual([
      ['PullRequestDraftChanged', true],
      ['PullRequestDraftChanged', false],
      ['PullRequestMergeRequested', 'AUTO_MERGE'],
    ]);
    expect((await system.github.requests({ graphqlField: 'enablePullRequestAutoMerge' })).map((r) => r.status)).toEqual([200]);
  }, 300_000);

  it('converted between the read and the merge call (GitHub\'s 405 "still a draft"): no refusal of its head is recorded, and once ready it is merged', async () => {
    await system.restartPrService({ GANTRY_TEST_HOLD_AT: 'github:merge' });
    // GitHub protects main with ci/test only: green means clean, so the merge is a direct one.
    const story = await finishedStory('raced', ['ci/test']);
    await system.check(story.repository, story.head, 'success');
    // The pr-service decided to merge the green head and stops right before the merge call.
    await eventually(() => system.prService.output().includes('"testHold":"github:merge"'), { what: 'the pr-service at the merge', timeoutMs: 120_000 });
    expect(await system.pr(story.repository, story.branch)).toMatchObject({ mergeDecision: { headSha: story.head, via: 'DIRECT' } });
    await asThePerson(story.repository, 'convertPullRequestToDraft');
    system.prService.process.kill('SIGUSR2');

    const mergeCalls = async () => (await system.github.requests({ method: 'PUT', path: `/repos/${story.repository}/pulls/${story.prNumber}/merge` })).map((r) => r.status);
    await eventually(async () => (await types(story.pullRequestId, 'PullRequestDraftChanged')).length > 0, { what: 'the draft recorded after the refused merge', timeoutMs: 60_000 });
    expect(await mergeCalls()).toEqual([405]);
    expect(await system.pr(story.repository, story.branch)).toMatchObject({ phase: 'held_as_draft', draft: true, mergeDecision: null, lastFailure: null });
    expect(await types(story.pullRequestId, 'PullRequestMergeFailed', 'PullRequestEffectFailed')).toEqual([]);

    await asThePerson(story.repository, 'markPullRequestReadyForReview');
    const merged = await system.prWhere(story.repository, story.branch, (p) => p.phase === 'merged', 'merged once ready', 120_000);
    expect(merged.merged).toMatchObject({ headSha: story.head });
    expect(await mergeCalls()).toEqual([405, 200]);
    expect(await types(story.pullRequestId, 'PullRequestDraftChanged', 'PullRequestMergeRequested')).toEqual([
      ['PullRequestMergeRequested', 'AUTO_MERGE'],
      ['PullRequestMergeRequested', 'DIRECT'],
      ['PullRequestDraftChanged', true],
      ['PullRequestDraftChanged', false],
      // GitHub said before that this head would merge at once (PR-6): merged directly again.
      ['PullRequestMergeRequested', 'DIRECT'],
    ]);
  }, 300_000);

  it("the pr-service's view of the pull requests equals a rebuild from its log", async () => {
    const { live, rebuilt } = await system.viewsAndTheirRebuild();
    expect(live.length).toBe(2);
    expect(rebuilt).toEqual(live);
  }, 60_000);
});
