import pg from 'pg';
import { eventually, testDatabaseUrl } from '@gantry/testing';
import { inProcessPrService } from './in-process-world.js';

/*
 * A run of a pull request holds the PR's advisory lock on a pooled connection of its own. When the unlock fails on
 * that connection while its session lives (a client-side query timeout, a cancelled statement — here the service's
 * test fault point, GANTRY_TEST_FAIL_AT), the connection must not go back to the pool still holding the lock: every
 * other replica would skip the PR for as long as it is kept alive in the pool. The pr-service runs in this process
 * (twice) against the local GitHub, on the real PostgreSQL and NATS.
 */
describe('a run whose advisory unlock failed', () => {
  const world = inProcessPrService('pr_unlock_failed');

  it('leaves the pull request unlocked: another session can take its lock, and another replica works on it', async () => {
    const replicaB = await world.secondReplica();
    const db = new pg.Pool({ connectionString: testDatabaseUrl, max: 1 });
    try {
      const { repository, h2, pullRequestId } = await world.storyPushedTwice('unlock-failed', 'job-00000000-0000-4000-8000-0000000000d1', ['T-1', 'T-2']);
      await world.fake.control.setCheck(repository, { sha: h2, name: 'ci/test', status: 'completed', conclusion: 'success' });

      // Replica A's run reads the PR (H2 green, recorded), then its unlock fails.
      process.env.GANTRY_TEST_FAIL_AT = 'pr-service:advisory-unlock';
      world.reconciler.ask(pullRequestId);
      await eventually(async () => (await world.log.load(pullRequestId)).checks?.verdict === 'GREEN', { what: 'H2\'s green checks recorded by replica A', timeoutMs: 60_000 });
      const recordedAt = Date.now();

      // The lock is free well before the pool would close an idle connection (10 s): only a session gone frees it.
      await eventually(
        async () => {
          const { rows } = await db.query<{ locked: boolean }>(`SELECT pg_try_advisory_lock(hashtextextended($1, 0)) AS locked`, [pullRequestId]);
          if (rows[0]!.locked) await db.query(`SELECT pg_advisory_unlock(hashtextextended($1, 0))`, [pullRequestId]);
          return rows[0]!.locked;
        },
        { what: 'the PR\'s advisory lock free again', timeoutMs: 6000 },
      );
      expect(Date.now() - recordedAt).toBeLessThan(10_000);

      // GitHub shows H2 red now: replica B works on the PR and records it.
      await world.fake.control.setCheck(repository, { sha: h2, name: 'ci/test', status: 'completed', conclusion: 'failure' });
      replicaB.reconciler.ask(pullRequestId);
      await eventually(async () => (await world.log.load(pullRequestId)).checks?.verdict === 'RED', { what: 'H2\'s red checks recorded by replica B', timeoutMs: 30_000 });
    } finally {
      delete process.env.GANTRY_TEST_FAIL_AT;
      await db.end();
      await replicaB.close();
    }
  }, 180_000);
});
