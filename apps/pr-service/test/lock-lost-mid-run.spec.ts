import pg from 'pg';
import type { PinoLogger } from 'nestjs-pino';
import { eventually, testDatabaseUrl } from '@gantry/testing';
import { inProcessPrService } from './in-process-world.js';

const GITHUB_DELAY_MS = 5000;
/** The GraphQL mutations the service sends; its other GraphQL documents only read. */
const MUTATIONS = ['markPullRequestReadyForReview', 'enablePullRequestAutoMerge', 'disablePullRequestAutoMerge'];

/*
 * A run of a pull request holds the PR's advisory lock on a connection of its own for its whole length, GitHub's
 * answers included. When that connection is lost mid-run (here its backend is terminated while the run waits on a slow
 * GitHub), the lock is gone with its session and another replica may start a run of the PR: the run that lost it must
 * change nothing more on GitHub. It ends before its next change (a warning says the lock was lost), and the PR is
 * worked on again later, its due merge sent once. The test's own PostgreSQL session stands for the other replica. The
 * pr-service runs in this process against the local GitHub, on the real PostgreSQL and NATS.
 */
describe('a run whose lock connection is lost mid-run', () => {
  const world = inProcessPrService('pr_lock_lost');

  it('sends no change to GitHub once its lock is gone, and a later run merges the pull request once', async () => {
    const jobId = 'job-00000000-0000-4000-8000-0000000003a1';
    const { repository, pr, h2, pullRequestId, record, merges } = await world.storyPushedTwice('lock-lost', jobId, ['T-1']);
    const db = new pg.Client({ connectionString: testDatabaseUrl });
    db.on('error', () => undefined);
    await db.connect();
    const log = (world.reconciler as unknown as { log: PinoLogger }).log;
    const warnings: string[] = [];
    const warn = log.warn.bind(log);
    log.warn = ((fields: unknown, message?: string) => {
      warnings.push(typeof fields === 'string' ? fields : String(message));
      return warn(fields as object, message);
    }) as typeof log.warn;
    const prPath = `/repos/${repository}/pulls/${pr.number}`;
    const readsOfPr = async () => (await world.fake.control.requests({ method: 'GET', path: prPath })).filter((r) => r.path === prPath);
    // Every request that changes something on GitHub: a REST write, a GraphQL mutation.
    const changes = async () =>
      (await world.fake.control.requests()).filter((r) => (r.path === '/graphql' ? r.graphqlFields.some((f) => MUTATIONS.includes(f)) : r.method !== 'GET')).map((r) => `${r.method} ${r.path} ${r.graphqlFields.join(',')}`.trim());
    try {
      // H2 green, the story not done yet: recorded, nothing to merge. The runs its events asked for have ended.
      await world.fake.control.setCheck(repository, { sha: h2, name: 'ci/test', status: 'completed', conclusion: 'success' });
      world.reconciler.ask(pullRequestId);
      await eventually(async () => (await world.log.load(pullRequestId)).checks?.verdict === 'GREEN', { what: 'H2\'s green checks recorded', timeoutMs: 60_000 });
      let seen = -1;
      await eventually(
        async () => {
          const now = (await readsOfPr()).length;
          const quiet = now === seen;
          seen = now;
          if (!quiet) await new Promise((resolve) => setTimeout(resolve, 1500));
          return quiet;
        },
        { what: 'no run of the PR under way', timeoutMs: 30_000 },
      );

      const changesBefore = await changes();

      // The story is done: the run it asks for waits on GitHub's answer to its read of the PR, holding the PR's lock.
      await world.fake.control.injectFault({ kind: 'delayed_response', method: 'GET', path: prPath, count: 1, delayMs: GITHUB_DELAY_MS });
      await record('RecordTaskDone', { jobId, taskId: 'T-1' });
      await eventually(async () => (await readsOfPr()).some((r) => r.fault === 'delayed_response' && !r.answered), { what: 'the run waiting on GitHub', timeoutMs: 15_000 });

      // Its lock connection is lost: the backend holding the schema's advisory lock is terminated.
      const { rows: held } = await db.query<{ pid: number }>(
        `SELECT l.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = $1`,
        [`pr-service:${world.service.schema}:pr-locks`],
      );
      expect(held).toHaveLength(1);
      await db.query(`SELECT pg_terminate_backend($1)`, [held[0]!.pid]);

      // The lock is free: another replica takes it (this session) and may work on the PR from now on.
      await eventually(
        async () => (await db.query<{ locked: boolean }>(`SELECT pg_try_advisory_lock(hashtextextended($1, 0)) AS locked`, [pullRequestId])).rows[0]!.locked,
        { what: 'the PR\'s lock taken by another session', timeoutMs: 5000 },
      );

      // GitHub answers the read: the merge is due (auto-merge first, PR-6), and the run that lost the lock sends nothing.
      await eventually(async () => (await readsOfPr()).some((r) => r.fault === 'delayed_response' && r.answered), { what: 'the delayed read answered', timeoutMs: GITHUB_DELAY_MS + 10_000 });
      await new Promise((resolve) => setTimeout(resolve, 3000));
      expect(await changes()).toEqual(changesBefore);
      expect(await merges()).toBe(0);
      expect(warnings).toContain('the pull request\'s lock was lost; the run ends before its next change on GitHub, and the pull request is worked on again later');
      expect(world.failedRuns(pullRequestId)).toBe(1);

      // The other replica is done: a later run takes the lock and merges the PR, once.
      await db.query(`SELECT pg_advisory_unlock(hashtextextended($1, 0))`, [pullRequestId]);
      await eventually(async () => (await world.log.load(pullRequestId)).outcome?.kind === 'MERGED', { what: 'the PR merged by a later run', timeoutMs: 30_000 });
      expect(await merges()).toBe(1);
      expect((await world.fake.control.requests({ method: 'POST', graphqlField: 'enablePullRequestAutoMerge' })).length).toBe(1);
    } finally {
      log.warn = warn;
      await world.fake.control.clearFaults();
      await db.end();
    }
  }, 180_000);
});
