import { eventually } from '@gantry/testing';
import { inProcessPrService } from './in-process-world.js';

/*
 * PR-15 with PR-14: a merge of the branch's head was decided on GitHub's green and GitHub refuses it (here with 405
 * "Base branch was modified", at every try: it is tried again at the next read). Meanwhile someone force-pushes the
 * branch back to a head it had before. GitHub had shown the later head, so its reads of the earlier one are no lag: the
 * PR follows the earlier head (its checks count), which predates the last task's push and is never merged by Gantry —
 * no merge is sent to GitHub at every read. The pr-service runs in this process against the local GitHub, on the real
 * PostgreSQL and NATS.
 */
describe('a branch force-pushed back while its merge is refused', () => {
  const owner = 'acme';
  const world = inProcessPrService('pr_head_went_back');
  const jobId = 'job-00000000-0000-4000-8000-0000000000b1';
  const storyPushedTwice = (name: string, storyTaskIds: string[], h1Green: boolean) => world.storyPushedTwice(name, jobId, storyTaskIds, { h1Green });

  it('reads showing the earlier head send the merge of the current head no more', async () => {
    const name = 'went-back';
    const { branch, repository, clone, octokit, pr, h1, h2, pullRequestId, record, merges } = await storyPushedTwice(name, ['T-1'], false);
    const log = world.log;
    try {
      await world.fake.control.setCheck(repository, { sha: h2, name: 'ci/test', status: 'completed', conclusion: 'success' });
      await world.fake.control.injectFault({ kind: 'base_branch_modified', method: 'PUT', path: '/merge', count: 1000 });
      const reads = async () => (await world.fake.control.requests({ method: 'GET', path: `/repos/${repository}/pulls/${pr.number}` })).length;
      const readAgain = async () => {
        const before = await reads();
        world.reconciler.ask(pullRequestId);
        await eventually(async () => (await reads()) > before, { what: 'the pull request read again', timeoutMs: 30_000 });
      };

      // The story is done and H2 green: its merge is sent, and refused (409).
      await record('RecordTaskDone', { jobId, taskId: 'T-1' });
      await eventually(async () => (await merges()) >= 1, { what: 'the merge of H2 sent', timeoutMs: 60_000 });

      // The branch goes back to H1. Once GitHub's reads have shown it for 2 s (one read may be a replica of GitHub behind
      // another) the PR follows it, and then (a merge under way having ended) no read sends the merge again.
      clone.git('push', '-q', '--force', 'origin', `${h1}:refs/heads/${branch}`);
      await world.fake.control.refresh();
      await readAgain();
      await eventually(async () => (await log.load(pullRequestId)).headSha === h1, { what: 'the PR following the branch back to H1', timeoutMs: 30_000 });
      await readAgain();
      const sent = await merges();
      for (let i = 0; i < 4; i++) await readAgain();
      expect(await merges()).toBe(sent);
      const state = await log.load(pullRequestId);
      expect(state.headSha).toBe(h1);
      expect(state.mergeDecision).toBeNull();
      expect(state.outcome).toBeNull();
      expect((await octokit.rest.pulls.get({ owner, repo: name, pull_number: pr.number })).data).toMatchObject({ merged: false, head: { sha: h1 } });
    } finally {
      await world.fake.control.clearFaults();
    }
  }, 180_000);
  it('a branch GitHub showed at its last head and then force-pushed back is followed: the earlier head\'s checks count, its red is recorded, and it is not merged', async () => {
    const { branch, repository, clone, h1, h2, pullRequestId, record, merges } = await storyPushedTwice('forced-back', ['T-1', 'T-2'], true);
    const log = world.log;
    // GitHub shows H2, red: recorded for H2.
    await world.fake.control.setCheck(repository, { sha: h2, name: 'ci/test', status: 'completed', conclusion: 'failure' });
    world.reconciler.ask(pullRequestId);
    await eventually(async () => (await log.load(pullRequestId)).checks?.headSha === h2, { what: 'H2\'s red checks recorded', timeoutMs: 60_000 });

    // Someone force-pushes the branch back to H1 (green on GitHub), and the whole story is done.
    clone.git('push', '-q', '--force', 'origin', `${h1}:refs/heads/${branch}`);
    await world.fake.control.refresh();
    await record('RecordTaskDone', { jobId, taskId: 'T-1' });
    await record('RecordTaskDone', { jobId, taskId: 'T-2' });
    world.reconciler.ask(pullRequestId);
    const followed = await eventually(async () => {
      const state = await log.load(pullRequestId);
      return state.headSha === h1 ? state : null;
    }, { what: 'the PR following the branch back to H1', timeoutMs: 60_000 });
    expect(followed.headSource).toBe('GITHUB');
    // H1 predates the last task's push: however green, it is not merged.
    await eventually(async () => (await log.load(pullRequestId)).checks?.headSha === h1, { what: 'H1\'s checks recorded', timeoutMs: 30_000 });
    expect((await log.load(pullRequestId)).checks).toMatchObject({ headSha: h1, verdict: 'GREEN' });
    expect((await log.load(pullRequestId)).mergeDecision).toBeNull();

    // Its check runs again and fails: the red of the head the PR is at is recorded (the task can be failed for it).
    await world.fake.control.setCheck(repository, { sha: h1, name: 'ci/test', status: 'completed', conclusion: 'failure' });
    world.reconciler.ask(pullRequestId);
    await eventually(async () => {
      const state = await log.load(pullRequestId);
      return state.checks?.headSha === h1 && state.checks.verdict === 'RED';
    }, { what: 'H1\'s red checks recorded', timeoutMs: 30_000 });
    expect(await merges()).toBe(0);

    // A new push after that is followed as ever, and merged once green.
    const h3 = clone.commitAndPush(branch, { 'src/three.ts': 'export const three = 3;\n' }, 'the work again');
    await world.fake.control.refresh();
    await world.fake.control.setCheck(repository, { sha: h3, name: 'ci/test', status: 'completed', conclusion: 'success' });
    world.reconciler.ask(pullRequestId);
    const merged = await eventually(async () => {
      const state = await log.load(pullRequestId);
      return state.outcome?.kind === 'MERGED' ? state : null;
    }, { what: 'H3 merged', timeoutMs: 60_000 });
    expect(merged.outcome).toMatchObject({ headSha: h3 });
  }, 180_000);
});
