import pg from 'pg';
import type { PinoLogger } from 'nestjs-pino';
import { EventStore } from '@gantry/eventstore';
import { eventually, testDatabaseUrl } from '@gantry/testing';
import { PullRequestLocks, type UnderLock } from '../src/infrastructure/persistence/pull-request-locks.js';
import { inProcessPrService } from './in-process-world.js';

const GITHUB_DELAY_MS = 5000;
/** The GraphQL mutations the service sends; its other GraphQL documents only read. */
const MUTATIONS = ['markPullRequestReadyForReview', 'enablePullRequestAutoMerge', 'disablePullRequestAutoMerge'];

/*
 * A run of a pull request holds the PR's advisory lock on a connection of its own for its whole length, GitHub's
 * answers included. When that connection is lost mid-run (here its backend is terminated while the run waits on a slow
 * GitHub), the lock is gone with its session and another replica may start a run of the PR: the run that lost it must
 * change nothing more on GitHub, nor record what it read. It ends before its next change or record (a warning says the
 * lock was lost), and the PR is worked on again later, its due merge sent once. The test's own PostgreSQL session stands for the other replica. The
 * pr-service runs in this process against the local GitHub, on the real PostgreSQL and NATS.
 */
describe('a run whose lock connection is lost mid-run', () => {
  const world = inProcessPrService('pr_lock_lost');
  /** The sessions of the service's lock pool that hold the PR's lock (runs of the other tests' PRs may hold theirs). */
  const lockHolders = async (db: pg.Client, pullRequestId: string) =>
    (
      await db.query<{ pid: number }>(
        `SELECT l.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
          WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = $1 AND l.objsubid = 1
            AND l.classid::bigint = (hashtextextended($2, 0) >> 32) & 4294967295 AND l.objid::bigint = hashtextextended($2, 0) & 4294967295`,
        [`pr-service:${world.service.schema}:pr-locks`, pullRequestId],
      )
    ).rows.map((r) => r.pid);
  /** The session of the service holding the PR's lock is terminated, and `db` (another replica) takes the lock. */
  const takeOverLock = async (db: pg.Client, pullRequestId: string) => {
    const held = await lockHolders(db, pullRequestId);
    expect(held).toHaveLength(1);
    await db.query(`SELECT pg_terminate_backend($1)`, [held[0]]);
    await eventually(async () => (await db.query<{ locked: boolean }>(`SELECT pg_try_advisory_lock(hashtextextended($1, 0)) AS locked`, [pullRequestId])).rows[0]!.locked, {
      what: 'the PR\'s lock taken by another session',
      timeoutMs: 5000,
    });
  };
  /** H2 green, the story not done yet: recorded, nothing to merge; and the runs its events asked for have ended. */
  const greenAndQuiet = async (repository: string, h2: string, pullRequestId: string, readsOfPr: () => Promise<unknown[]>) => {
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
  };

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
      await greenAndQuiet(repository, h2, pullRequestId, readsOfPr);

      const changesBefore = await changes();

      // The story is done: the run it asks for waits on GitHub's answer to its read of the PR, holding the PR's lock.
      await world.fake.control.injectFault({ kind: 'delayed_response', method: 'GET', path: prPath, count: 1, delayMs: GITHUB_DELAY_MS });
      await record('RecordTaskDone', { jobId, taskId: 'T-1' });
      await eventually(async () => (await readsOfPr()).some((r) => r.fault === 'delayed_response' && !r.answered), { what: 'the run waiting on GitHub', timeoutMs: 15_000 });

      // Its lock connection is lost (its backend terminated), and another replica (this session) takes the lock and may
      // work on the PR from now on.
      await takeOverLock(db, pullRequestId);

      // GitHub answers the read: the merge is due (auto-merge first, PR-6), and the run that lost the lock sends nothing.
      await eventually(async () => (await readsOfPr()).some((r) => r.fault === 'delayed_response' && r.answered), { what: 'the delayed read answered', timeoutMs: GITHUB_DELAY_MS + 10_000 });
      await new Promise((resolve) => setTimeout(resolve, 3000));
      expect(await changes()).toEqual(changesBefore);
      expect(await merges()).toBe(0);
      expect(warnings).toContain('the pull request\'s lock was lost; the run ends before it changes or records anything more, and the pull request is worked on again later');
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

  /*
   * What the run read of GitHub before its lock was lost is no longer its to record: the other replica may have read
   * the PR since and recorded what it saw, and a record of the older read after it would undo it (say, checks red on a
   * read that came before a re-run the other replica saw green: a sprint run failed for nothing). Here the read shows
   * H2's checks red: the run ends before it records them, and a later run under the lock records them, once.
   */
  it('records nothing it read once its lock is gone, and a later run records the read', async () => {
    const jobId = 'job-00000000-0000-4000-8000-0000000003a2';
    const { repository, pr, h2, pullRequestId } = await world.storyPushedTwice('lock-lost-records', jobId, ['T-1']);
    const db = new pg.Client({ connectionString: testDatabaseUrl });
    db.on('error', () => undefined);
    await db.connect();
    const store = world.service.app.get(EventStore);
    const checksFailed = async () => (await store.readStream(pullRequestId)).filter((e) => e.type === 'PullRequestChecksFailed').length;
    const prPath = `/repos/${repository}/pulls/${pr.number}`;
    const readsOfPr = async () => (await world.fake.control.requests({ method: 'GET', path: prPath })).filter((r) => r.path === prPath);
    try {
      await greenAndQuiet(repository, h2, pullRequestId, readsOfPr);

      // H2's check is run again and fails; a run of the PR waits on GitHub's answer to its read, holding the PR's lock.
      await world.fake.control.setCheck(repository, { sha: h2, name: 'ci/test', status: 'completed', conclusion: 'failure' });
      await world.fake.control.injectFault({ kind: 'delayed_response', method: 'GET', path: prPath, count: 1, delayMs: GITHUB_DELAY_MS });
      world.reconciler.ask(pullRequestId);
      await eventually(async () => (await readsOfPr()).some((r) => r.fault === 'delayed_response' && !r.answered), { what: 'the run waiting on GitHub', timeoutMs: 15_000 });

      // Its lock connection is lost, and another replica (this session) takes the PR's lock.
      await takeOverLock(db, pullRequestId);

      // GitHub answers the read (the head red): the run ends — by recording the red checks, or without a record as a run
      // that lost its lock.
      await eventually(async () => world.failedRuns(pullRequestId) === 1 || (await checksFailed()) > 0, { what: 'the run that lost its lock ended', timeoutMs: GITHUB_DELAY_MS + 30_000 });
      expect(await checksFailed()).toBe(0);
      expect(world.failedRuns(pullRequestId)).toBe(1);

      // The other replica is done: a later run reads the PR again under the lock and records the red checks, once.
      await db.query(`SELECT pg_advisory_unlock(hashtextextended($1, 0))`, [pullRequestId]);
      await eventually(async () => (await world.log.load(pullRequestId)).checks?.verdict === 'RED', { what: 'the red checks recorded by a later run', timeoutMs: 30_000 });
      expect(await checksFailed()).toBe(1);
    } finally {
      await world.fake.control.clearFaults();
      await db.end();
    }
  }, 180_000);

  /*
   * The run's records check the lock in PostgreSQL's lock table, not only in what the lock's connection has reported: a
   * connection lost without a word yet (its session ended on the server, its socket not closed here) holds nothing.
   */
  it('tells a write on another connection whether the run\'s session holds the lock, whatever its connection has reported', async () => {
    const locks = world.service.app.get(PullRequestLocks);
    const pool = world.service.app.get(EventStore).pool;
    const pullRequestId = 'pr-lock-held-condition';
    const db = new pg.Client({ connectionString: testDatabaseUrl });
    db.on('error', () => undefined);
    await db.connect();
    const heldOn = async (underLock: UnderLock) => (await pool.query<{ held: boolean }>(`SELECT ${underLock.held} AS held`)).rows[0]!.held;
    try {
      // Held, then let go: the session goes back to the pool alive, holding nothing.
      let first: UnderLock | undefined;
      await locks.whileHeld(pullRequestId, async (underLock) => {
        first = underLock;
        expect(await heldOn(underLock)).toBe(true);
      }, () => undefined);
      expect(await heldOn(first!)).toBe(false);

      // Held, then its session ended and the lock taken by another: not held, whether or not the connection has said so.
      const outcome = await locks.whileHeld(pullRequestId, async (underLock) => {
        await takeOverLock(db, pullRequestId);
        expect(await heldOn(underLock)).toBe(false);
      }, () => undefined);
      expect(outcome).toBe('ran');
    } finally {
      await db.end();
    }
  }, 60_000);
});
