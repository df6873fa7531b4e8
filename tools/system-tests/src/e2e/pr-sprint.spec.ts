import { pullRequestIdFor } from '@gantry/contracts';
import { Clone } from '@gantry/github-fake/testing';
import { eventually } from '@gantry/testing';
import { PrSystem } from './pr-system.js';

/*
 * SPRINT pull requests and failures (docs/pr-service.md PR-8..PR-10): draft until the sprint
 * run is DONE, then ready for review and never merged; a real conflict on the base pauses the run with
 * the PR URL and the conflicting files, and resolving it and resuming carries on to the end; red
 * checks fail the sprint or the task.
 */
describe('SPRINT pull requests, conflicts and red checks end to end', () => {
  const system = new PrSystem();

  beforeAll(async () => {
    await system.start();
    await system.startRunner('runner-sprint', { concurrency: 1 });
  }, 90_000);
  afterAll(() => system.stop(), 60_000);

  const commit = (file: string, content = `export const x = '${file}';\n`, delayMs = 0) => ({ standIn: { behaviour: 'commit', files: { [file]: content }, delayMs } });
  const merges = async (repository: string, branch: string) => [
    ...(await system.github.requests({ method: 'PUT', path: `/repos/${repository}/pulls/` })),
    ...(await system.prEvents(pullRequestIdFor(repository, branch))).filter((e) => e.type === 'PullRequestMergeRequested'),
  ];

  it('a draft PR until the sprint run is DONE, green checks or not; then ready for review, and never merged', async () => {
    const { repository } = await system.product('product-sprint', 'sprint', { strategy: 'SPRINT', requiredChecks: [] });
    const branch = 'sprint/SP-1';
    const run = await system.createSprintRun('product-sprint', 'SP-1', branch, { 'T-1': commit('src/one.ts'), 'T-2': commit('src/two.ts', 'two\n', 3000) });
    const draft = await system.prWhere(repository, branch, (p) => p.prNumber !== null, 'the PR opened');
    expect(draft).toMatchObject({ strategy: 'SPRINT', draft: true, phase: 'draft_opened' });
    await system.check(repository, draft.headSha!, 'success');
    await system.prWhere(repository, branch, (p) => p.checks?.verdict === 'GREEN', 'green seen');
    expect(await system.pr(repository, branch)).toMatchObject({ draft: true, phase: 'draft_opened' });
    expect((await system.github.pulls(repository))[0]).toMatchObject({ draft: true });

    await system.sprintRunWhere(run, 'DONE');
    const ready = await system.prWhere(repository, branch, (p) => p.phase === 'ready_for_review', 'ready for review');
    expect(ready).toMatchObject({ draft: false, scope: { done: true, sprintRunId: run } });
    const pull = (await system.github.pulls(repository))[0]!;
    expect(pull).toMatchObject({ draft: false, state: 'open', merged: false, auto_merge: null });
    // Read again and again (resync every second): still never merged.
    const reads = async () => (await system.github.requests({ method: 'GET', path: `/repos/${repository}/pulls/${pull.number}` })).length;
    const before = await reads();
    await eventually(async () => (await reads()) >= before + 3, { what: 'three more reads of the PR' });
    expect(await merges(repository, branch)).toEqual([]);
    expect((await system.github.pulls(repository))[0]).toMatchObject({ state: 'open', merged: false, auto_merge: null });
  }, 150_000);

  it('a repository without drafts: GitHub refuses the draft once, the PR opens ready, is made "ready" by the run DONE without a call, never merged; the next sprint opens ready at once', async () => {
    const { repository } = await system.product('product-no-drafts', 'no-drafts', { strategy: 'SPRINT', requiredChecks: [], allowDraftPullRequests: false });
    const opens = async () => (await system.github.requests({ method: 'POST', path: `/repos/${repository}/pulls` })).map((r) => r.status);
    // GitHub's requests are not per repository: the marks this test makes are those added while it runs.
    const marks = async () => (await system.github.requests({ graphqlField: 'markPullRequestReadyForReview' })).length;
    const marksBefore = await marks();
    const branch = 'sprint/SP-8';
    const run = await system.createSprintRun('product-no-drafts', 'SP-8', branch, { 'T-1': commit('src/one.ts', 'one\n', 3000) });
    const opened = await system.prWhere(repository, branch, (p) => p.prNumber !== null, 'the PR opened');
    expect(opened).toMatchObject({ strategy: 'SPRINT', draft: false });
    expect(await opens()).toEqual([422, 201]);

    await system.sprintRunWhere(run, 'DONE');
    const ready = await system.prWhere(repository, branch, (p) => p.phase === 'ready_for_review', 'ready for review');
    expect(ready).toMatchObject({ draft: false, scope: { done: true, sprintRunId: run }, lastFailure: null });
    expect(await marks()).toBe(marksBefore);
    const pull = (await system.github.pulls(repository))[0]!;
    const reads = async () => (await system.github.requests({ method: 'GET', path: `/repos/${repository}/pulls/${pull.number}` })).length;
    const before = await reads();
    await eventually(async () => (await reads()) >= before + 3, { what: 'three more reads of the PR' });
    expect(await merges(repository, branch)).toEqual([]);
    expect((await system.github.pulls(repository))[0]).toMatchObject({ draft: false, state: 'open', merged: false, auto_merge: null });

    // The repository is known to have no drafts: the next sprint's PR opens ready without being refused first.
    await system.createSprintRun('product-no-drafts', 'SP-9', 'sprint/SP-9', { 'T-1': commit('src/two.ts') });
    expect(await system.prWhere(repository, 'sprint/SP-9', (p) => p.prNumber !== null, 'the second PR opened')).toMatchObject({ draft: false });
    expect(await opens()).toEqual([422, 201, 201]);
  }, 150_000);

  it('a real conflicting change on the base: the sprint run PAUSED with the PR URL and the conflicting files; resolved and resumed, it carries on to the end', async () => {
    const { repository, cloneUrl } = await system.product('product-conflict', 'conflict', {
      strategy: 'SPRINT',
      requiredChecks: [],
      initialFiles: { 'README.md': '# conflict\n', 'src/app.ts': 'export const app = 1;\n' },
    });
    const branch = 'sprint/SP-2';
    const run = await system.createSprintRun('product-conflict', 'SP-2', branch, {
      'T-1': commit('src/app.ts', 'export const app = "sprint";\n'),
      // Long enough for the conflict to be seen while the run still has work to do.
      'T-2': commit('src/other.ts', 'other\n', 20_000),
    });
    const pr = await system.prWhere(repository, branch, (p) => p.prNumber !== null, 'the PR opened');
    // The run queues T-2 once T-1 is done: the conflict comes while T-2's agent works.
    await eventually(async () => (await system.sprintJobs(run)).find((j) => j.taskId === 'T-2' && (j.status === 'CLAIMED' || j.status === 'RUNNING')), { what: 'T-2 at work', timeoutMs: 60_000 });
    await system.github.commit(repository, { branch: 'main', files: { 'src/app.ts': 'export const app = "main";\n' }, message: 'main changes app' });

    const paused = await system.sprintRunWhere(run, 'PAUSED');
    expect(paused.pause).toMatchObject({ reason: 'MERGE_CONFLICT', prUrl: pr.prUrl, conflictingFiles: ['src/app.ts'], questionId: expect.any(String) });
    expect(paused.pause!.resumeInstructions).toContain('src/app.ts');
    expect(await system.pr(repository, branch)).toMatchObject({ phase: 'merge_conflict_paused', conflict: { conflictingFiles: ['src/app.ts'] } });

    // The running task finishes while the run is paused; the run stays paused.
    await eventually(async () => (await system.sprintJobs(run)).find((j) => j.taskId === 'T-2' && j.status === 'DONE'), { what: 'T-2 done', timeoutMs: 60_000 });
    expect((await system.sprintRun(run)).status).toBe('PAUSED');

    // A human resolves it on the sprint branch.
    const clone = new Clone(cloneUrl);
    try {
      clone.git('checkout', '-q', '-B', branch, `origin/${branch}`);
      try {
        clone.git('merge', '-q', '--no-edit', 'origin/main');
      } catch {
        clone.git('checkout', '--theirs', '--', 'src/app.ts');
        clone.git('add', 'src/app.ts');
        clone.git('commit', '-q', '--no-edit');
      }
      clone.git('push', '-q', 'origin', `HEAD:refs/heads/${branch}`);
      const resolved = clone.git('rev-parse', 'HEAD');
      await system.prWhere(repository, branch, (p) => p.headSha === resolved && p.conflict === null && p.phase === 'draft_opened', 'the resolved head without a conflict');
    } finally {
      clone.remove();
    }

    await system.resume(run, 'conflict in src/app.ts resolved');
    const done = await system.sprintRunWhere(run, 'DONE');
    expect(done).toMatchObject({ doneTaskIds: ['T-1', 'T-2'], pause: null });
    await system.prWhere(repository, branch, (p) => p.phase === 'ready_for_review', 'ready for review');
    expect((await system.github.pulls(repository))[0]).toMatchObject({ draft: false, state: 'open', mergeable_state: expect.not.stringMatching(/dirty/) });
  }, 180_000);

  it('red checks on a sprint PR fail the sprint run (not paused); nothing is merged', async () => {
    const { repository } = await system.product('product-red-sprint', 'red-sprint', { strategy: 'SPRINT', requiredChecks: ['ci/test'] });
    const branch = 'sprint/SP-3';
    const run = await system.createSprintRun('product-red-sprint', 'SP-3', branch, { 'T-1': commit('src/r1.ts'), 'T-2': commit('src/r2.ts', 'r2\n', 20_000) });
    const pr = await system.prWhere(repository, branch, (p) => p.prNumber !== null, 'the PR opened');
    await system.check(repository, pr.headSha!, 'failure');
    const failed = await system.sprintRunWhere(run, 'FAILED');
    expect(failed).toMatchObject({ failure: { reason: 'CHECKS_FAILED' }, pause: null });
    expect(await system.pr(repository, branch)).toMatchObject({ phase: 'checks_failed', checks: { verdict: 'RED', names: ['ci/test'] } });
    expect(await merges(repository, branch)).toEqual([]);
  }, 120_000);

  it('red checks on a story PR fail the task of the job that pushed that head; nothing is merged', async () => {
    const { repository } = await system.product('product-red-story', 'red-story', { strategy: 'STORY', requiredChecks: ['ci/test'] });
    const branch = 'story/ST-9';
    const job = await system.terminal(await system.enqueue({ productId: 'product-red-story', storyId: 'ST-9', taskId: 'T-91', branch, payload: commit('src/s.ts') }));
    expect(job.status).toBe('DONE');
    const pr = await system.prWhere(repository, branch, (p) => p.prNumber !== null && p.scope.done, 'the PR open with its task done');
    await system.check(repository, job.headSha!, 'failure');
    const failed = await eventually(async () => {
      const j = await system.job(job.jobId);
      return j.status === 'FAILED' ? j : null;
    }, { what: 'the job FAILED on red checks' });
    expect(failed).toMatchObject({ taskStatus: 'IN_PROGRESS', error: `checks failed on ${pr.prUrl}: ci/test` });
    await system.prWhere(repository, branch, (p) => p.phase === 'checks_failed' && !p.scope.done, 'the PR failed, its task open again');
    expect(await merges(repository, branch)).toEqual([]);
  }, 120_000);
});
