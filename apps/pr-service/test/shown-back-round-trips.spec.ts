import pg from 'pg';
import { EventStore } from '@gantry/eventstore';
import { eventually } from '@gantry/testing';
import { inProcessPrService } from './in-process-world.js';

/*
 * PR-15: a read showing the PR where it is (no earlier head, no earlier base) ends a wait kept in
 * `pull_request_shown_back` — when there is one. A PR with no row sends no DELETE at each read; one with a row (written
 * by another replica's read, under the PR's lock) has it deleted by the next read showing the current head. The
 * pr-service runs in this process against the local GitHub, on the real PostgreSQL and NATS.
 */
describe('reads of a pull request not shown back', () => {
  const world = inProcessPrService('pr_shown_back_trips');

  it('send no DELETE of a shown-back row when there is none, and delete one another replica left', async () => {
    const { repository, h1, h2, pr, pullRequestId } = await world.storyPushedTwice('shown-back-trips', 'job-00000000-0000-4000-8000-0000000003a1', ['T-1', 'T-2']);
    await world.fake.control.setCheck(repository, { sha: h2, name: 'ci/test', status: 'completed', conclusion: 'success' });
    world.reconciler.ask(pullRequestId);
    await eventually(async () => (await world.log.load(pullRequestId)).checks?.verdict === 'GREEN', { what: 'H2\'s green checks recorded', timeoutMs: 60_000 });
    const reads = world.prReads(repository, pr.number);

    const deletes: unknown[][] = [];
    const send = pg.Client.prototype.query;
    pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
      if (typeof args[0] === 'string' && /DELETE FROM pull_request_shown_back/.test(args[0])) deletes.push(args[1] as unknown[]);
      return (send as (...a: unknown[]) => unknown).apply(this, args);
    } as typeof send;
    try {
      for (let i = 0; i < 3; i++) {
        const before = (await reads.all()).length;
        world.reconciler.ask(pullRequestId);
        await eventually(async () => (await reads.all()).length > before, { what: `read ${i + 1}`, timeoutMs: 30_000 });
        await new Promise((resolve) => setTimeout(resolve, 300));
      }
      expect(deletes).toEqual([]);

      // Another replica's read showed H1 back a moment ago: the next read here, showing H2, ends that wait.
      const pool = world.service.app.get(EventStore).pool;
      await pool.query(`INSERT INTO pull_request_shown_back (pull_request_id, shown, since, last_read) VALUES ($1, $2, now()::text, now()::text)`, [pullRequestId, `${h1} `]);
      world.reconciler.ask(pullRequestId);
      await eventually(async () => (await pool.query(`SELECT 1 FROM pull_request_shown_back WHERE pull_request_id = $1`, [pullRequestId])).rowCount === 0, {
        what: 'the shown-back row deleted by a read showing H2',
        timeoutMs: 30_000,
      });
      expect(deletes).toEqual([[pullRequestId]]);
      expect(await world.log.load(pullRequestId)).toMatchObject({ headSha: h2 });
    } finally {
      pg.Client.prototype.query = send;
    }
  }, 120_000);
});
