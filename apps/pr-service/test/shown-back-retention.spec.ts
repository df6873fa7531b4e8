import 'reflect-metadata';
import type { INestApplication } from '@nestjs/common';
import { pullRequestIdFor } from '@gantry/contracts';
import { RetentionPruner } from '@gantry/service-runtime';
import { createTestWorld, startInProcess, type TestWorld } from '@gantry/service-runtime/testing';
import { AppModule } from '../src/app.module.js';

/*
 * PR-15, PR-18: `pull_request_shown_back` keeps, per pull request, since when GitHub's reads have shown it back at an
 * earlier head or base. A row of a PR that settled (merged, closed), or whose last read showing it back is older than
 * SHOWN_BACK_READ_GAP_MS (the next read starts the wait again anyway), is of no use: the service's pruning job deletes
 * it; a row of an open PR read lately is kept. The service runs in this process on the real PostgreSQL and NATS; the
 * pass is the pruning job's own (`RetentionPruner.pruneOnce`), at the real time.
 */
describe('retention of pull_request_shown_back', () => {
  let world: TestWorld;
  let app: INestApplication;

  beforeAll(async () => {
    world = await createTestWorld('pr_shown_back_retention');
    app = await startInProcess(AppModule, world, { GANTRY_GITHUB_WEBHOOK_SECRETS: 'unused', GANTRY_GITHUB_API_URL: 'http://127.0.0.1:9', GANTRY_GITHUB_TOKEN: 'unused' });
  }, 60_000);
  afterAll(async () => {
    await app?.close();
    await world?.close();
  });

  /** A pull request's view row (when `settled` is given) and its shown-back row, last read `agoMs` before now (null: never). */
  async function shownBack(branch: string, o: { settled?: boolean; agoMs: number | null }): Promise<string> {
    const id = pullRequestIdFor('acme/shop', branch);
    if (o.settled !== undefined) {
      await world.db.query(`INSERT INTO pull_requests (pull_request_id, repository, branch, phase, settled, state, updated_at) VALUES ($1, 'acme/shop', $2, $3, $4, '{}', now())`, [
        id,
        branch,
        o.settled ? 'merged' : 'waiting_for_checks',
        o.settled,
      ]);
    }
    await world.db.query(
      `INSERT INTO pull_request_shown_back (pull_request_id, shown, since, last_read)
       VALUES ($1, 'h1 ', (now() - interval '1 second')::text, CASE WHEN $2::double precision IS NULL THEN NULL ELSE (now() - make_interval(secs => $2 / 1000))::text END)`,
      [id, o.agoMs],
    );
    return id;
  }
  const kept = async () => (await world.db.query<{ pull_request_id: string }>(`SELECT pull_request_id FROM pull_request_shown_back`)).rows.map((r) => r.pull_request_id).sort();

  it('deletes the rows of settled pull requests and those not read lately; keeps an open one\'s read lately', async () => {
    const merged = await shownBack('story/merged', { settled: true, agoMs: 500 });
    const openNow = await shownBack('story/open-now', { settled: false, agoMs: 500 });
    const openLongAgo = await shownBack('story/open-long-ago', { settled: false, agoMs: 60_000 });
    const neverRead = await shownBack('story/never-read', { settled: false, agoMs: null });
    const noView = await shownBack('story/no-view', { agoMs: 60_000 });
    expect(await kept()).toEqual([merged, openNow, openLongAgo, neverRead, noView].sort());

    const result = await app.get(RetentionPruner).pruneOnce();
    expect(await kept()).toEqual([openNow]);
    expect(result).toMatchObject({ pullRequestShownBack: 4 });
  });
});
