import pg from 'pg';
import { eventually, testDatabaseUrl } from '@gantry/testing';
import { PullRequestLocks } from '../src/infrastructure/persistence/pull-request-locks.js';
import { inProcessPrService } from './in-process-world.js';

const HELD_MS = 8000;

/*
 * A pull request whose lock another run holds (another replica's) is looked at again later, not every 500 ms: the waits
 * grow (with jitter, so that replicas waiting on one PR do not ask in step) up to a bound, and the PR is worked on soon
 * after the lock is free. Here the test's own PostgreSQL session holds the PR's lock, as another replica would; the
 * pr-service runs in this process against the local GitHub, on the real PostgreSQL and NATS.
 */
describe('a pull request whose lock is held elsewhere', () => {
  const world = inProcessPrService('pr_lock_held');

  it('is asked for again with growing waits, bounded, and worked on soon after the lock is free', async () => {
    const { repository, h2, pullRequestId } = await world.storyPushedTwice('lock-held', 'job-00000000-0000-4000-8000-0000000002a1', ['T-1', 'T-2']);
    await world.fake.control.setCheck(repository, { sha: h2, name: 'ci/test', status: 'completed', conclusion: 'success' });
    const locks = world.service.app.get(PullRequestLocks);
    const tries: number[] = [];
    const whileHeld = locks.whileHeld.bind(locks);
    locks.whileHeld = (...args) => {
      tries.push(Date.now());
      return whileHeld(...args);
    };
    const other = new pg.Client({ connectionString: testDatabaseUrl });
    await other.connect();
    try {
      await other.query(`SELECT pg_advisory_lock(hashtextextended($1, 0))`, [pullRequestId]);
      world.reconciler.ask(pullRequestId);
      await new Promise((resolve) => setTimeout(resolve, HELD_MS));
      // Every 500 ms would be 16 tries; 0.25–0.5, 0.5–1, 1–2, 2–4 s apart are at most 6.
      expect(tries.length).toBeGreaterThanOrEqual(3);
      expect(tries.length).toBeLessThanOrEqual(6);
      const gaps = tries.slice(1).map((at, i) => at - tries[i]!);
      expect(gaps.slice(1).every((gap, i) => gap >= gaps[i]! * 0.5)).toBe(true);
      await other.query(`SELECT pg_advisory_unlock(hashtextextended($1, 0))`, [pullRequestId]);
      const freedAt = Date.now();
      await eventually(async () => (await world.log.load(pullRequestId)).checks?.verdict === 'GREEN', { what: 'H2\'s green checks recorded once the lock is free', timeoutMs: 15_000 });
      // The waits are bounded: the PR is worked on within the longest wait (5 s) of the lock's release.
      expect(Date.now() - freedAt).toBeLessThan(5000 + 1500);
    } finally {
      await other.end();
    }
  }, 120_000);
});
