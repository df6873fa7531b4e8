import { randomUUID } from 'node:crypto';
import { Webhooks } from '@octokit/webhooks';
import { pullRequestIdFor } from '@gantry/contracts';
import { Clone } from '@gantry/github-fake/testing';
import { eventually, logRecordsOf } from '@gantry/testing';
import { PrSystem } from './pr-system.js';

/*
 * Pull requests under faults (docs/pr-service.md PR-7, PR-12, PR-13): the head moving between
 * the merge decision and the merge, webhook deliveries duplicated / reordered / dropped / forged,
 * secondary rate limits, and the pr-service SIGKILLed after GitHub did something and before it was
 * recorded. Job service, worktree service, runner, pr-service and the local GitHub are processes.
 */
describe('pull requests under faults, end to end', () => {
  const system = new PrSystem();
  let stories = 0;

  beforeAll(async () => {
    await system.start();
    await system.startRunner('runner-faults', { concurrency: 1 });
  }, 90_000);
  afterAll(() => system.stop(), 60_000);

  const commit = (file: string) => ({ standIn: { behaviour: 'commit', files: { [file]: `export const x = '${file}';\n` } } });

  /** A product whose PRs merge directly (GitHub protects main with ci/test, so green means clean), and one finished story on it. */
  /** Someone else's push to the branch: a late change on top of its head; the new head. */
  function pushLateChange(cloneUrl: string, branch: string): string {
    const clone = new Clone(cloneUrl);
    try {
      return clone.commitAndPush(branch, { 'src/late.ts': 'late\n' }, 'a late change', `origin/${branch}`);
    } finally {
      clone.remove();
    }
  }

  async function finishedStory(label: string, o: { protectedBy?: string[] } = {}) {
    stories += 1;
    const productId = `product-${label}`;
    const { repository, cloneUrl } = await system.product(productId, label, { strategy: 'STORY', requiredChecks: ['ci/test'], protectedBy: o.protectedBy ?? ['ci/test'] });
    const branch = `story/ST-${label}`;
    const job = await system.terminal(await system.enqueue({ productId, storyId: `ST-${stories}`, taskId: `T-${label}`, branch, payload: commit(`src/${label}.ts`) }));
    expect(job.status).toBe('DONE');
    const pr = await system.prWhere(repository, branch, (p) => p.prNumber !== null && p.scope.done, 'the PR open with its story done');
    return { repository, cloneUrl, branch, head: job.headSha!, pr, pullRequestId: pullRequestIdFor(repository, branch) };
  }

  const mergeCalls = (repository: string, prNumber: number) => system.github.requests({ method: 'PUT', path: `/repos/${repository}/pulls/${prNumber}/merge` });

  // Each group starts with the pr-service it needs (prServiceWith restarts it only when the one running has other settings).
  describe('the head moves between the merge decision and the merge', () => {
    beforeAll(() => system.prServiceWith(), 60_000);

    it('GitHub\'s 405 "Base branch was modified" (the base moved under the merge, the head unchanged) is tried again at the next read: merged', async () => {
      const story = await finishedStory('base-moved');
      await system.github.injectFault({ kind: 'base_branch_modified', method: 'PUT', path: `/repos/${story.repository}/pulls/${story.pr.prNumber}/merge` });
      await system.check(story.repository, story.head, 'success');
      const merged = await system.prWhere(story.repository, story.branch, (p) => p.phase === 'merged', 'merged after the 405', 30_000);
      expect(merged.merged).toMatchObject({ headSha: story.head });
      expect((await mergeCalls(story.repository, story.pr.prNumber!)).map((r) => r.status)).toEqual([405, 200]);
    });

    it("a merge whose answer is lost (GitHub merged, the connection closed): the retried merge's 405 is no refusal; merged once", async () => {
      const story = await finishedStory('merge-answer-lost');
      await system.github.injectFault({ kind: 'lost_response', method: 'PUT', path: `/repos/${story.repository}/pulls/${story.pr.prNumber}/merge` });
      await system.check(story.repository, story.head, 'success');
      const merged = await system.prWhere(story.repository, story.branch, (p) => p.phase === 'merged', 'merged after the lost answer', 30_000);
      expect(merged.merged).toMatchObject({ headSha: story.head });
      // The first merge took effect (its answer never came); Octokit sent it again and GitHub said 405, the PR being merged.
      const calls = await mergeCalls(story.repository, story.pr.prNumber!);
      expect(calls.map((r) => [r.status, r.answered])).toEqual([[200, false], [405, true]]);
      // That 405 is not GitHub refusing the merge: no MERGE_CONFLICT (or any refusal) is recorded for the head.
      expect((await system.prEvents(story.pullRequestId)).map((e) => e.type)).not.toContain('PullRequestMergeFailed');
      expect((await system.github.pulls(story.repository))[0]).toMatchObject({ merged: true });
    });

    it('auto-merge enabled, and later disabled, with the answer lost (GitHub acted, the connection closed): the retry finds it done, no failure; each once', async () => {
      // GitHub protects main with ci/lint too: it still waits for that when ci/test is green, so auto-merge is enabled.
      const story = await finishedStory('auto-answer-lost', { protectedBy: ['ci/test', 'ci/lint'] });
      const mutations = async (field: string) => (await system.github.requests({ graphqlField: field })).map((r) => [r.fault, r.answered]);
      const before = { enable: (await mutations('enablePullRequestAutoMerge')).length, disable: (await mutations('disablePullRequestAutoMerge')).length };
      const recorded = async (type: string) => (await system.prEvents(story.pullRequestId)).filter((e) => e.type === type);
      const deliveries = async (action: string) => (await system.github.deliveries({ event: 'pull_request', action })).filter((d) => d.payload.repository?.full_name === story.repository);

      await system.github.injectFault({ kind: 'lost_response', method: 'POST', path: '/graphql' });
      await system.check(story.repository, story.head, 'success');
      await eventually(async () => (await recorded('PullRequestAutoMergeEnabled')).length > 0, { what: 'auto-merge recorded enabled' });
      // Octokit sent the mutation again; GitHub said "already enabled", which is the effect done, not a failure.
      expect((await mutations('enablePullRequestAutoMerge')).slice(before.enable)).toEqual([['lost_response', false], [null, true]]);
      expect(await deliveries('auto_merge_enabled')).toHaveLength(1);

      // A push moves the head: auto-merge, on for the old head, is disabled — and that answer is lost too.
      await system.github.injectFault({ kind: 'lost_response', method: 'POST', path: '/graphql' });
      const moved = pushLateChange(story.cloneUrl, story.branch);
      await system.github.refresh();
      await eventually(async () => (await recorded('PullRequestAutoMergeDisabled')).length > 0, { what: 'auto-merge recorded disabled' });
      expect((await mutations('disablePullRequestAutoMerge')).slice(before.disable)).toEqual([['lost_response', false], [null, true]]);
      expect(await deliveries('auto_merge_disabled')).toHaveLength(1);
      expect(await system.pr(story.repository, story.branch)).toMatchObject({ headSha: moved, phase: 'waiting_for_checks', lastFailure: null });
      expect(await recorded('PullRequestEffectFailed')).toEqual([]);

      await system.check(story.repository, moved, 'success');
      await system.check(story.repository, moved, 'success', 'ci/lint');
      const merged = await system.prWhere(story.repository, story.branch, (p) => p.phase === 'merged', 'merged');
      expect(merged.merged).toMatchObject({ headSha: moved });
      expect(await recorded('PullRequestEffectFailed')).toEqual([]);
    }, 120_000);

    it('409 is handled: the new head waits for its own checks, and only a head seen green is merged', async () => {
      await system.restartPrService({ GANTRY_TEST_HOLD_AT: 'github:merge' });
      const story = await finishedStory('moved');
      await system.check(story.repository, story.head, 'success');
      // The pr-service decided to merge the green head and stops right before the merge call.
      await eventually(() => system.prService.output().includes('"testHold":"github:merge"'), { what: 'the pr-service at the merge' });
      expect(await system.pr(story.repository, story.branch)).toMatchObject({ mergeDecision: { headSha: story.head, via: 'DIRECT' } });
      const moved = pushLateChange(story.cloneUrl, story.branch);
      await system.github.refresh();
      system.prService.process.kill('SIGUSR2');

      const waiting = await system.prWhere(story.repository, story.branch, (p) => p.headSha === moved, 'the new head recorded');
      expect(waiting).toMatchObject({ phase: 'waiting_for_checks', mergeDecision: null, checks: null });
      expect((await mergeCalls(story.repository, story.pr.prNumber!)).map((r) => r.status)).toEqual([409]);
      expect((await system.github.pulls(story.repository))[0]).toMatchObject({ state: 'open', merged: false, head: { sha: moved } });
      const events = (await system.prEvents(story.pullRequestId)).map((e) => [e.type, e.data.headSha]);
      expect(events).toContainEqual(['PullRequestHeadMoved', moved]);

      await system.check(story.repository, moved, 'success');
      const merged = await system.prWhere(story.repository, story.branch, (p) => p.phase === 'merged', 'merged');
      expect(merged.merged).toMatchObject({ headSha: moved });
      expect((await mergeCalls(story.repository, story.pr.prNumber!)).map((r) => r.status)).toEqual([409, 200]);
      expect((await system.github.pulls(story.repository))[0]).toMatchObject({ merged: true, head: { sha: moved } });
      const decisions = (await system.prEvents(story.pullRequestId)).filter((e) => e.type === 'PullRequestMergeRequested').map((e) => [e.data.headSha, e.data.via]);
      expect(decisions).toEqual([
        [story.head, 'AUTO_MERGE'],
        [story.head, 'DIRECT'],
        [moved, 'AUTO_MERGE'],
        [moved, 'DIRECT'],
      ]);
    }, 150_000);
  });

  describe('webhook deliveries (no resync: only deliveries tell the pr-service what changed)', () => {
    beforeAll(() => system.prServiceWith({ GANTRY_PR_RESYNC_INTERVAL_MS: '3600000' }), 60_000);

    it('the same delivery twice: recorded once, one merge', async () => {
      const story = await finishedStory('twice');
      await system.github.onNextDeliveries({ event: 'check_run', action: 'completed', effect: 'duplicate' });
      await system.check(story.repository, story.head, 'success');
      await system.prWhere(story.repository, story.branch, (p) => p.phase === 'merged', 'merged');
      const delivery = await system.github.waitForDelivery((d) => d.event === 'check_run' && d.action === 'completed' && d.payload.repository?.full_name === story.repository);
      expect(delivery.attempts.length).toBeGreaterThanOrEqual(2);
      expect(delivery.attempts.every((a) => a.status === 202)).toBe(true);
      expect((await system.deliveries()).filter((d) => d.delivery_id === delivery.id)).toHaveLength(1);
      expect((await mergeCalls(story.repository, story.pr.prNumber!)).map((r) => r.status)).toEqual([200]);
    }, 120_000);

    it('deliveries held and released in reverse order: the same final state', async () => {
      const story = await finishedStory('reordered');
      await system.github.holdDeliveries();
      await system.check(story.repository, story.head, 'success');
      const held = await eventually(async () => {
        const mine = (await system.github.deliveries()).filter((d) => d.state === 'held' && d.payload.repository?.full_name === story.repository);
        return mine.some((d) => d.event === 'check_run' && d.action === 'completed') ? mine : null;
      }, { what: 'the check deliveries held' });
      await system.github.releaseDeliveries({ order: held.map((d) => d.id).reverse() });
      const merged = await system.prWhere(story.repository, story.branch, (p) => p.phase === 'merged', 'merged');
      expect(merged.merged).toMatchObject({ headSha: story.head });
      expect((await mergeCalls(story.repository, story.pr.prNumber!)).map((r) => r.status)).toEqual([200]);
    }, 120_000);

    it('deliveries dropped: nothing moves; redelivered: the same final state', async () => {
      const story = await finishedStory('dropped');
      await system.github.onNextDeliveries({ event: 'check_run', effect: 'drop', count: 5 });
      await system.github.onNextDeliveries({ event: 'check_suite', effect: 'drop', count: 5 });
      await system.check(story.repository, story.head, 'success');
      const dropped = await eventually(async () => {
        const mine = (await system.github.deliveries({ event: 'check_run', action: 'completed' })).filter((d) => d.payload.repository?.full_name === story.repository);
        return mine.find((d) => d.state === 'dropped');
      }, { what: 'the completed check delivery dropped' });
      expect(await system.pr(story.repository, story.branch)).toMatchObject({ phase: 'waiting_for_checks', checks: null });
      await system.github.redeliver(dropped.id);
      const merged = await system.prWhere(story.repository, story.branch, (p) => p.phase === 'merged', 'merged after the redelivery');
      expect(merged.merged).toMatchObject({ headSha: story.head });
      expect((await system.deliveries()).filter((d) => d.delivery_id === dropped.id)).toHaveLength(1);
    }, 120_000);

    it('a forged delivery (a merged PR, signed with a wrong secret) is refused with 401 and changes nothing', async () => {
      const story = await finishedStory('forged', { protectedBy: [] });
      const before = await system.deliveries();
      const body = JSON.stringify({
        action: 'closed',
        number: story.pr.prNumber,
        pull_request: { number: story.pr.prNumber, merged: true, head: { ref: story.branch, sha: story.head }, base: { ref: 'main' } },
        repository: { full_name: story.repository },
      });
      const id = randomUUID();
      const res = await fetch(`${system.prService.url}/webhooks/github`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-github-event': 'pull_request', 'x-github-delivery': id, 'x-hub-signature-256': await new Webhooks({ secret: 'not-the-secret' }).sign(body) },
        body,
      });
      expect(res.status).toBe(401);
      expect(await system.deliveries()).toHaveLength(before.length);
      expect(await system.pr(story.repository, story.branch)).toMatchObject({ phase: 'waiting_for_checks', merged: null });
    }, 120_000);
  });

  describe('secondary rate limits', () => {
    beforeAll(() => system.prServiceWith(), 60_000);

    it('with and without retry-after: the pr-service waits, and the PR is opened once and merged once', async () => {
      const productId = 'product-limited';
      const { repository } = await system.product(productId, 'limited', { strategy: 'STORY', requiredChecks: ['ci/test'], protectedBy: ['ci/test'] });
      await system.github.injectFault({ kind: 'secondary_rate_limit', method: 'POST', path: `/repos/${repository}/pulls`, retryAfterSeconds: 2 });
      await system.github.injectFault({ kind: 'secondary_rate_limit', method: 'PUT', path: `/repos/${repository}/pulls/` });
      const branch = 'story/ST-limited';
      const job = await system.terminal(await system.enqueue({ productId, storyId: 'ST-limited', taskId: 'T-limited', branch, payload: commit('src/limited.ts') }));
      const pr = await system.prWhere(repository, branch, (p) => p.prNumber !== null && p.scope.done, 'the PR open');
      await system.check(repository, job.headSha!, 'success');
      await system.prWhere(repository, branch, (p) => p.phase === 'merged', 'merged');

      const creates = await system.github.requests({ method: 'POST', path: `/repos/${repository}/pulls` });
      expect(creates.map((r) => [r.status, r.fault])).toEqual([[403, 'secondary_rate_limit'], [201, null]]);
      expect(Date.parse(creates[1]!.at) - Date.parse(creates[0]!.at)).toBeGreaterThanOrEqual(2000);
      const merges = await mergeCalls(repository, pr.prNumber!);
      expect(merges.map((r) => [r.status, r.fault])).toEqual([[403, 'secondary_rate_limit'], [200, null]]);
      expect(Date.parse(merges[1]!.at) - Date.parse(merges[0]!.at)).toBeGreaterThanOrEqual(1000);
      expect((await system.github.pulls(repository)).map((p) => [p.head.ref, p.merged])).toEqual([[branch, true]]);
      expect(logRecordsOf(system.prService.output())).toContainEqual(expect.objectContaining({ message: 'GitHub rate limit: waiting before the request is sent again', kind: 'secondary' }));
    }, 120_000);
  });

  describe('the pr-service SIGKILLed after GitHub did something and before it was recorded', () => {
    beforeAll(() => system.prServiceWith(), 60_000);
    afterEach(async () => {
      if (system.prService.process.exitCode === null && system.prService.process.signalCode === null) return;
      await system.startPrService();
    }, 60_000);

    it('after GitHub created the PR: on restart it adopts that PR; GitHub holds exactly one PR for the branch', async () => {
      await system.restartPrService({ GANTRY_TEST_CRASH_AT: 'github:open_pull_request' });
      const productId = 'product-crash-open';
      const { repository } = await system.product(productId, 'crash-open', { strategy: 'STORY', requiredChecks: ['ci/test'] });
      const branch = 'story/ST-crash-open';
      await system.terminal(await system.enqueue({ productId, storyId: 'ST-co', taskId: 'T-co', branch, payload: commit('src/co.ts') }));
      expect(await system.prServiceExited()).toBe('SIGKILL');
      expect((await system.github.pulls(repository)).filter((p) => p.head.ref === branch)).toHaveLength(1);
      expect((await system.prEvents(pullRequestIdFor(repository, branch))).map((e) => e.type)).not.toContain('PullRequestOpened');

      await system.startPrService();
      const pr = await system.prWhere(repository, branch, (p) => p.prNumber !== null, 'the PR recorded');
      const opened = (await system.prEvents(pullRequestIdFor(repository, branch))).filter((e) => e.type === 'PullRequestOpened');
      expect(opened).toEqual([expect.objectContaining({ data: expect.objectContaining({ adopted: true, prNumber: pr.prNumber }) })]);
      expect((await system.github.pulls(repository)).filter((p) => p.head.ref === branch)).toHaveLength(1);
      expect(await system.github.requests({ method: 'POST', path: `/repos/${repository}/pulls` })).toHaveLength(1);
    }, 150_000);

    it('after GitHub created the PR, a person pointed it at another base: on restart it adopts that PR on its base, and opens no second one', async () => {
      await system.restartPrService({ GANTRY_TEST_CRASH_AT: 'github:open_pull_request' });
      const productId = 'product-crash-rebased';
      const { repository } = await system.product(productId, 'crash-rebased', { strategy: 'STORY', requiredChecks: ['ci/test'] });
      await system.github.commit(repository, { branch: 'develop', from: 'main', files: { 'DEVELOP.md': 'develop\n' }, message: 'develop' });
      const branch = 'story/ST-crash-rebased';
      await system.terminal(await system.enqueue({ productId, storyId: 'ST-cr', taskId: 'T-crb', branch, payload: commit('src/crb.ts') }));
      expect(await system.prServiceExited()).toBe('SIGKILL');
      const [onGitHub] = (await system.github.pulls(repository)).filter((p) => p.head.ref === branch);
      expect((await system.asSomeone('PATCH', `/repos/${repository}/pulls/${onGitHub!.number}`, { base: 'develop' })).status).toBe(200);

      await system.startPrService();
      const pr = await system.prWhere(repository, branch, (p) => p.prNumber !== null, 'the PR recorded');
      expect(pr.prNumber).toBe(onGitHub!.number);
      const opened = (await system.prEvents(pullRequestIdFor(repository, branch))).filter((e) => e.type === 'PullRequestOpened');
      expect(opened).toEqual([expect.objectContaining({ data: expect.objectContaining({ adopted: true, prNumber: onGitHub!.number }) })]);
      expect((await system.github.pulls(repository)).filter((p) => p.head.ref === branch).map((p) => [p.number, p.state, p.base.ref])).toEqual([[onGitHub!.number, 'open', 'develop']]);
      expect(await system.github.requests({ method: 'POST', path: `/repos/${repository}/pulls` })).toHaveLength(1);
    }, 150_000);

    it('after GitHub marked the PR ready for review: on restart it reads that it is ready, and marks nothing twice', async () => {
      const productId = 'product-crash-ready';
      const { repository } = await system.product(productId, 'crash-ready', { strategy: 'SPRINT', requiredChecks: [] });
      const branch = 'sprint/SP-crash';
      await system.restartPrService({ GANTRY_TEST_CRASH_AT: 'github:mark_ready_for_review' });
      const marksBefore = (await system.github.requests({ graphqlField: 'markPullRequestReadyForReview' })).length;
      const run = await system.createSprintRun(productId, 'SP-crash', branch, { 'T-cr': commit('src/cr.ts') });
      await system.sprintRunWhere(run, 'DONE');
      expect(await system.prServiceExited()).toBe('SIGKILL');
      expect((await system.github.pulls(repository))[0]).toMatchObject({ draft: false });
      expect((await system.prEvents(pullRequestIdFor(repository, branch))).map((e) => e.type)).not.toContain('PullRequestReadyForReview');

      await system.startPrService();
      await system.prWhere(repository, branch, (p) => p.phase === 'ready_for_review', 'ready for review recorded');
      const ready = (await system.prEvents(pullRequestIdFor(repository, branch))).filter((e) => e.type === 'PullRequestReadyForReview');
      expect(ready).toEqual([expect.objectContaining({ data: expect.objectContaining({ alreadyReady: true }) })]);
      expect((await system.github.requests({ graphqlField: 'markPullRequestReadyForReview' })).length).toBe(marksBefore + 1);
      expect((await system.github.pulls(repository)).filter((p) => p.head.ref === branch)).toHaveLength(1);
    }, 150_000);

    it('after GitHub enabled auto-merge, and the branch was pushed while it was down: on restart it disables it; the new head is merged only once seen green', async () => {
      // GitHub protects main with ci/lint only: auto-merge waits for it, and would merge a head whose ci/test nobody saw.
      await system.restartPrService({ GANTRY_TEST_CRASH_AT: 'github:enable_auto_merge' });
      const productId = 'product-crash-auto';
      const { repository, cloneUrl } = await system.product(productId, 'crash-auto', { strategy: 'STORY', requiredChecks: ['ci/test'], protectedBy: ['ci/lint'] });
      const branch = 'story/ST-crash-auto';
      const job = await system.terminal(await system.enqueue({ productId, storyId: 'ST-ca', taskId: 'T-ca', branch, payload: commit('src/ca.ts') }));
      const pr = await system.prWhere(repository, branch, (p) => p.prNumber !== null && p.scope.done, 'the PR open with its story done');
      await system.check(repository, job.headSha!, 'success');
      expect(await system.prServiceExited()).toBe('SIGKILL');
      expect((await system.github.pulls(repository))[0]).toMatchObject({ state: 'open', auto_merge: expect.anything() });
      expect((await system.prEvents(pullRequestIdFor(repository, branch))).map((e) => e.type)).not.toContain('PullRequestAutoMergeEnabled');

      // While it is down, someone pushes to the branch (GitHub keeps auto-merge on across a push).
      const moved = pushLateChange(cloneUrl, branch);
      await system.github.refresh();
      expect((await system.github.pulls(repository))[0]).toMatchObject({ head: { sha: moved }, auto_merge: expect.anything() });

      await system.startPrService();
      await system.prWhere(repository, branch, (p) => p.headSha === moved, 'the new head recorded');
      await eventually(async () => (await system.github.pulls(repository))[0]!.auto_merge === null, { what: 'auto-merge disabled on GitHub' });
      // GitHub's own check passes on the new head: with auto-merge still on, it would merge a head whose ci/test was never seen.
      await system.check(repository, moved, 'success', 'ci/lint');
      await system.github.refresh();
      expect((await system.github.pulls(repository))[0]).toMatchObject({ state: 'open', merged: false });
      expect(await system.pr(repository, branch)).toMatchObject({ phase: 'waiting_for_checks', merged: null, prNumber: pr.prNumber });

      await system.check(repository, moved, 'success');
      const merged = await system.prWhere(repository, branch, (p) => p.phase === 'merged', 'merged');
      expect(merged.merged).toMatchObject({ headSha: moved });
    }, 150_000);

    it('a product registered while it hung and then died: the first push, handled before the product comes again, still opens the PR', async () => {
      // Frozen, it still holds a pull on its durable: the registration is delivered to it and never acknowledged,
      // so it comes to the next process only after the ack wait — after the events of the job that follows it.
      system.prService.process.kill('SIGSTOP');
      const productId = 'product-hung';
      const { repository } = await system.product(productId, 'hung', { strategy: 'STORY', requiredChecks: ['ci/test'] });
      await new Promise((resolve) => setTimeout(resolve, 1000));
      await system.prService.kill('SIGKILL');
      await system.startPrService();
      const branch = 'story/ST-hung';
      const job = await system.terminal(await system.enqueue({ productId, storyId: 'ST-hung', taskId: 'T-hung', branch, payload: commit('src/hung.ts') }));
      expect(job.status).toBe('DONE');
      const pr = await system.prWhere(repository, branch, (p) => p.prNumber !== null, 'the PR open', 90_000);
      expect(pr).toMatchObject({ headSha: job.headSha, scope: { done: true } });
      expect((await system.github.pulls(repository)).map((p) => p.head.ref)).toEqual([branch]);
    }, 150_000);

    it('a job enqueued while it hung and then died: the push and the finish, handled before the enqueue comes again, still open the PR and close its scope', async () => {
      const productId = 'product-late-enqueue';
      const { repository } = await system.product(productId, 'late-enqueue', { strategy: 'STORY', requiredChecks: ['ci/test'] });
      // The product is known before the freeze: only the job's enqueue is held by the frozen process, and it
      // comes to the next one after the ack wait — after the push and the finish of the job (its agent takes 10 s).
      await system.productKnown(productId);
      system.prService.process.kill('SIGSTOP');
      const branch = 'story/ST-late';
      const jobId = await system.enqueue({ productId, storyId: 'ST-late', taskId: 'T-late', branch, payload: { standIn: { behaviour: 'commit', files: { 'src/late.ts': 'late\n' }, delayMs: 10_000 } } });
      await new Promise((resolve) => setTimeout(resolve, 1000));
      await system.prService.kill('SIGKILL');
      await system.startPrService();
      const job = await system.terminal(jobId);
      expect(job.status).toBe('DONE');
      const pr = await system.prWhere(repository, branch, (p) => p.prNumber !== null && p.scope.done, 'the PR open with its scope done', 90_000);
      expect(pr).toMatchObject({ headSha: job.headSha, scope: { done: true, tasks: [{ taskId: 'T-late', done: true }] } });
      expect((await system.github.pulls(repository)).map((p) => p.head.ref)).toEqual([branch]);
    }, 180_000);

    it('after GitHub merged the PR: on restart it reads that it is merged, and merges nothing twice', async () => {
      await system.restartPrService({ GANTRY_TEST_CRASH_AT: 'github:merge' });
      const story = await finishedStory('crash-merge');
      await system.check(story.repository, story.head, 'success');
      expect(await system.prServiceExited()).toBe('SIGKILL');
      expect((await system.github.pulls(story.repository))[0]).toMatchObject({ merged: true });
      expect((await system.prEvents(story.pullRequestId)).map((e) => e.type)).not.toContain('PullRequestMerged');

      await system.startPrService();
      const merged = await system.prWhere(story.repository, story.branch, (p) => p.phase === 'merged', 'merged recorded');
      expect(merged.merged).toMatchObject({ headSha: story.head });
      expect((await mergeCalls(story.repository, story.pr.prNumber!)).map((r) => r.status)).toEqual([200]);
    }, 150_000);
  });
});
