import 'reflect-metadata';
import { eventually } from '@gantry/testing';
import type { PullRequestState } from '../domain/index.js';
import type { PullRequestOnGitHub } from './github.js';
import { LOCKED_ELSEWHERE_MAX_WAIT_MS, lockedElsewhereWaitMs, PullRequestReconciler, REMEMBERED_COUNTS } from './reconciler.js';

/*
 * What the reconciler remembers per pull request in its process: the count of reads that found
 * mergeability unknown (it sets the wait before the next read) is left behind by a PR that settles
 * before GitHub answers — merged meanwhile — so a long-running service would keep one per PR ever
 * tracked. GitHub, the log and the lock are stand-ins: only the reconciler's own memory is looked at.
 */
describe('the pull request reconciler\'s memory', () => {
  it('keeps at most REMEMBERED_COUNTS mergeability counts, however many pull requests settled while GitHub was computing', async () => {
    const prs = REMEMBERED_COUNTS + 500;
    let settled = false;
    let loads = 0;
    const stateOf = (pullRequestId: string) =>
      ({
        pullRequestId,
        repository: 'acme/widgets',
        branch: `feat/${pullRequestId}`,
        flow: { strategy: 'STORY', baseBranch: 'main', title: 't' },
        pr: { number: 1 },
        headSha: null,
        conflict: null,
        outcome: settled ? { kind: 'MERGED' } : null,
      }) as unknown as PullRequestState;
    const log = {
      load: async (id: string) => {
        loads++;
        return stateOf(id);
      },
      record: async (command: { data: { pullRequestId: string } }) => ({ state: stateOf(command.data.pullRequestId) }),
      now: () => new Date().toISOString(),
    };
    const computing: PullRequestOnGitHub = {
      number: 1, url: 'https://github.test/acme/widgets/pull/1', nodeId: 'PR_1', state: 'open', merged: false, mergeCommitSha: null, draft: false,
      headSha: 'a'.repeat(40), headBranch: 'feat/x', baseBranch: 'main', mergeable: null, mergeableState: 'unknown', autoMergeEnabled: false, updatedAt: null,
    };
    const github = { read: async () => computing, checks: async () => [] };
    const store = { pool: { query: async () => ({ rows: [] }) } };
    const locks = { whileHeld: async (_id: string, work: (underLock: { shownBackRow: boolean }) => Promise<void>) => (await work({ shownBackRow: false }), 'ran') };
    const quiet = { warn: () => undefined, info: () => undefined, error: () => undefined };
    const reconciler = new PullRequestReconciler(
      log as never,
      store as never,
      github as never,
      {} as never,
      { reconcileConcurrency: 64, resyncIntervalMs: 3_600_000 } as never,
      { waitMs: async () => 0 } as never,
      locks as never,
      quiet as never,
    );
    const remembered = () => (reconciler as unknown as { unknownMergeability: { size: number } }).unknownMergeability.size;

    for (let i = 0; i < prs; i++) reconciler.ask(`pr-${i}`);
    await eventually(async () => loads >= prs, { what: 'every pull request read once', timeoutMs: 120_000 });
    // Each is merged before GitHub has computed its mergeability: the next read finds it settled.
    settled = true;
    for (let i = 0; i < prs; i++) reconciler.ask(`pr-${i}`);
    await eventually(async () => loads >= 2 * prs, { what: 'every pull request read again, settled', timeoutMs: 120_000 });
    await reconciler.beforeApplicationShutdown();
    expect(remembered()).toBeGreaterThan(0);
    expect(remembered()).toBeLessThanOrEqual(REMEMBERED_COUNTS);
  }, 300_000);
});

describe('the wait before a pull request whose lock is held elsewhere is looked at again', () => {
  it('doubles from 500 ms up to its bound, each a random point in the upper half of its step', () => {
    expect([1, 2, 3, 4, 5, 6, 50].map((n) => lockedElsewhereWaitMs(n, () => 1))).toEqual([500, 1000, 2000, 4000, 5000, 5000, 5000]);
    expect([1, 2, 3, 4, 5, 50].map((n) => lockedElsewhereWaitMs(n, () => 0))).toEqual([250, 500, 1000, 2000, 2500, 2500]);
    const waits = Array.from({ length: 50 }, () => lockedElsewhereWaitMs(8));
    expect(new Set(waits).size).toBeGreaterThan(1);
    expect(waits.every((w) => w >= LOCKED_ELSEWHERE_MAX_WAIT_MS / 2 && w <= LOCKED_ELSEWHERE_MAX_WAIT_MS)).toBe(true);
  });
});
