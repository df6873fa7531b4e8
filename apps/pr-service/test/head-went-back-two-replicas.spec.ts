import { eventually } from '@gantry/testing';
import { HEAD_BACK_CONFIRM_MS } from '../src/domain/index.js';
import { inProcessPrService } from './in-process-world.js';

/*
 * PR-15 with two replicas of the service on one schema: a read showing the branch back at an earlier head is followed
 * only once GitHub has shown that head for HEAD_BACK_CONFIRM_MS, every read in between — by whichever replica — showing
 * it too. A replica of GitHub behind another answers one read of replica A with the earlier head; replica B's read a
 * moment later shows the current head; another read of A, 2 s after the first, is answered by a replica behind again.
 * GitHub did not show the earlier head all along, so the PR stays at the current head. The pr-service runs in this
 * process (twice) against the local GitHub, on the real PostgreSQL and NATS.
 */
describe('a head shown back to one replica and current to the other', () => {
  const owner = 'acme';
  const name = 'two-replicas';
  const world = inProcessPrService('pr_head_back_replicas');

  it('a read in between on the other replica showing the current head starts the 2 s again: the earlier head is not followed', async () => {
    const replicaB = await world.secondReplica();
    try {
      // The story has a second task not done: nothing is merged, and the PR only follows its head.
      const { repository, octokit, pr, h2, pullRequestId } = await world.storyPushedTwice(name, 'job-00000000-0000-4000-8000-0000000000c1', ['T-1', 'T-2'], { readAtFirstHead: true });
      await world.fake.control.setCheck(repository, { sha: h2, name: 'ci/test', status: 'completed', conclusion: 'success' });
      // GitHub shows H2, green: recorded, so GitHub has shown the current head.
      world.reconciler.ask(pullRequestId);
      await eventually(async () => (await world.log.load(pullRequestId)).checks?.headSha === h2, { what: 'H2\'s checks recorded', timeoutMs: 60_000 });
      await new Promise((resolve) => setTimeout(resolve, 1000));

      const prReads = world.prReads(repository, pr.number);
      const { path, all: reads, stale: staleReads } = prReads;

      // Replica A's read is answered by a replica of GitHub behind the push: H1.
      await world.fake.control.injectFault({ kind: 'stale_read', method: 'GET', path, count: 1 });
      world.reconciler.ask(pullRequestId);
      const [first] = await eventually(async () => ((await staleReads()).length === 1 ? staleReads() : null), { what: 'replica A\'s read answered with H1', timeoutMs: 30_000 });
      expect((await octokit.rest.pulls.get({ owner, repo: name, pull_number: pr.number })).data.head.sha).toBe(h2);

      // Replica B's read shows H2, the current head.
      const freshBefore = (await reads()).filter((r) => r.fault === null).length;
      replicaB.reconciler.ask(pullRequestId);
      await eventually(async () => (await reads()).filter((r) => r.fault === null).length > freshBefore, { what: 'replica B\'s read of H2', timeoutMs: 30_000 });
      // A reads again when its 2 s are up, answered by a replica behind once more: H1 again. The fault waits for the 2 s,
      // so that no read before them (another webhook's, a retry's after the PR's lock was held) takes it in A's place.
      await world.fake.control.injectFault({ kind: 'stale_read', method: 'GET', path, count: 1, notBefore: new Date(Date.parse(first!.at) + HEAD_BACK_CONFIRM_MS).toISOString() });
      const second = await eventually(async () => (await staleReads())[1] ?? null, { what: 'replica A\'s second read answered with H1', timeoutMs: 30_000 });
      expect(Date.parse(second.at) - Date.parse(first!.at)).toBeGreaterThanOrEqual(HEAD_BACK_CONFIRM_MS);
      await world.keptAtHead(pullRequestId, h2, prReads);
    } finally {
      await world.fake.control.clearFaults();
      await replicaB.close();
    }
  }, 180_000);

  it('a replica whose clock runs ahead follows the earlier head no sooner: how long GitHub has shown it is the database\'s time', async () => {
    const replicaB = await world.secondReplica({ clockAheadMs: 5000 });
    try {
      const { repository, pr, h2, pullRequestId } = await world.storyPushedTwice(`${name}-skew`, 'job-00000000-0000-4000-8000-0000000000c2', ['T-1', 'T-2'], { readAtFirstHead: true });
      await world.fake.control.setCheck(repository, { sha: h2, name: 'ci/test', status: 'completed', conclusion: 'success' });
      world.reconciler.ask(pullRequestId);
      await eventually(async () => (await world.log.load(pullRequestId)).checks?.headSha === h2, { what: 'H2\'s checks recorded', timeoutMs: 60_000 });
      await new Promise((resolve) => setTimeout(resolve, 1000));
      const prReads = world.prReads(repository, pr.number);

      // Replica A's read and, a moment later, replica B's are answered by a replica of GitHub behind the push: H1, shown
      // for well under 2 s — though B's clock, 5 s ahead of A's, says more.
      await world.fake.control.injectFault({ kind: 'stale_read', method: 'GET', path: prReads.path, count: 1 });
      world.reconciler.ask(pullRequestId);
      await eventually(async () => (await prReads.stale()).length === 1, { what: 'replica A\'s read answered with H1', timeoutMs: 30_000 });
      await world.fake.control.injectFault({ kind: 'stale_read', method: 'GET', path: prReads.path, count: 1 });
      replicaB.reconciler.ask(pullRequestId);
      const [first, second] = await eventually(async () => ((await prReads.stale()).length === 2 ? prReads.stale() : null), { what: 'replica B\'s read answered with H1', timeoutMs: 30_000 });
      expect(Date.parse(second!.at) - Date.parse(first!.at)).toBeLessThan(HEAD_BACK_CONFIRM_MS);

      // The read when the 2 s are up shows H2: the PR stays at it.
      await world.keptAtHead(pullRequestId, h2, prReads);
    } finally {
      await world.fake.control.clearFaults();
      await replicaB.close();
    }
  }, 180_000);
});
