import pg from 'pg';
import { eventually, testDatabaseUrl } from '@gantry/testing';
import { SHOWN_BACK_READ_GAP_MS } from '../src/domain/index.js';
import { inProcessPrService } from './in-process-world.js';

/*
 * PR-15: an earlier head is followed only once GitHub has shown it for 2 s, every read in between showing it too. A
 * read showing it is remembered (`pull_request_shown_back`), and the reads that follow are 2 s later at most — unless
 * the service stops. After a long gap with no reads (the service down, here longer than SHOWN_BACK_READ_GAP_MS), a read
 * showing that head again is no read "in between": the 2 s start again, and a read of the current head within them
 * keeps the PR where it is. The pr-service runs in this process against the local GitHub, on the real PostgreSQL and NATS.
 */
describe('an earlier head shown again after a long gap with no reads', () => {
  const world = inProcessPrService('pr_head_back_gap');

  it('is not followed at once: the 2 s start again, and a read of the current head within them keeps the PR at it', async () => {
    const { repository, pr, h2, pullRequestId } = await world.storyPushedTwice('gap', 'job-00000000-0000-4000-8000-0000000000f1', ['T-1', 'T-2'], { readAtFirstHead: true });
    await world.fake.control.setCheck(repository, { sha: h2, name: 'ci/test', status: 'completed', conclusion: 'success' });
    world.reconciler.ask(pullRequestId);
    await eventually(async () => (await world.log.load(pullRequestId)).checks?.headSha === h2, { what: 'H2\'s checks recorded', timeoutMs: 60_000 });
    await new Promise((resolve) => setTimeout(resolve, 1000));

    const prReads = world.prReads(repository, pr.number);
    const { path, stale: staleReads } = prReads;
    const db = new pg.Pool({ connectionString: testDatabaseUrl, options: `-c search_path=${world.service.schema}`, max: 1 });
    const shownBack = async () => (await db.query(`SELECT shown FROM pull_request_shown_back WHERE pull_request_id = $1`, [pullRequestId])).rows;
    try {
      // A read is answered by a replica of GitHub behind the push (H1), and the service stops before the read 2 s later.
      await world.fake.control.injectFault({ kind: 'stale_read', method: 'GET', path, count: 1 });
      world.reconciler.ask(pullRequestId);
      await eventually(async () => (await staleReads()).length === 1 && (await shownBack()).length === 1, { what: 'H1 read and remembered', timeoutMs: 30_000 });
      await world.restart({
        whileStopped: async () => {
          // Nothing read H2 before the stop: the row of the H1 read stands.
          expect(await shownBack()).toHaveLength(1);
          await new Promise((resolve) => setTimeout(resolve, SHOWN_BACK_READ_GAP_MS + 1000));
          // The first read after the restart is answered by a replica behind again: H1.
          await world.fake.control.injectFault({ kind: 'stale_read', method: 'GET', path, count: 1 });
        },
      });
      await eventually(async () => (await staleReads()).length === 2, { what: 'the read after the restart answered with H1', timeoutMs: 60_000 });
      // The read of H2 within the 2 s keeps the PR at H2.
      await world.keptAtHead(pullRequestId, h2, prReads);
    } finally {
      await world.fake.control.clearFaults();
      await db.end();
    }
  }, 240_000);
});
