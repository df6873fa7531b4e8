import { migrate } from '@gantry/eventstore';
import { testDatabaseUrl } from '@gantry/testing';
import type { QueryRunner } from 'typeorm';
import { JobServiceOneOpenRunPerBranch1782200000000, jobServiceMigrations } from '../src/infrastructure/migrations.js';
import { createWorld, type TestWorld } from './harness.js';

/** The index that keeps one open sprint run per branch, made on a log from before it (docs/jobs.md, "Sprint runs"). */
describe('the one-open-run-per-branch migration on runs that already share a branch', () => {
  let world: TestWorld;

  beforeAll(async () => {
    world = await createWorld('open-run-branch');
    await migrate({ url: testDatabaseUrl, schema: world.name, migrations: jobServiceMigrations });
  });

  afterAll(async () => {
    await world?.close();
  });

  const runner = () => ({ query: async (sql: string, params?: unknown[]) => (await world.db.query(sql, params)).rows }) as unknown as QueryRunner;
  const insertRun = (id: string, status: string, createdAt: string, branch = 'sprint/shared') =>
    world.db.query(
      `INSERT INTO sprint_runs (sprint_run_id, sprint_id, product_id, status, branch, created_at, state, repository) VALUES ($1, 'SP', 'p', $2, $3, $4, '{}', 'acme/shop')`,
      [id, status, branch, createdAt],
    );

  it('is made all the same, leaving out all but the newest open run of a shared branch, and holds the branch for that one', async () => {
    const migration = new JobServiceOneOpenRunPerBranch1782200000000();
    await migration.down(runner());
    await insertRun('sprintrun-older', 'RUNNING', '2026-12-01T10:00:00Z');
    await insertRun('sprintrun-old-paused', 'PAUSED', '2026-12-01T11:00:00Z');
    await insertRun('sprintrun-newest', 'QUEUED', '2026-12-01T12:00:00Z');
    await insertRun('sprintrun-ended', 'DONE', '2026-12-01T13:00:00Z');

    await migration.up(runner());

    // a new open run on the branch is refused by the index while the newest holds it
    await expect(insertRun('sprintrun-next', 'QUEUED', '2026-12-02T10:00:00Z')).rejects.toMatchObject({ code: '23505', constraint: 'sprint_runs_open_branch' });
    await world.db.query(`UPDATE sprint_runs SET status = 'CANCELLED' WHERE sprint_run_id = 'sprintrun-newest'`);
    await insertRun('sprintrun-next', 'QUEUED', '2026-12-02T10:00:00Z');
    // the runs left out do not hold it: one of them going on changes nothing
    await world.db.query(`UPDATE sprint_runs SET status = 'RUNNING' WHERE sprint_run_id = 'sprintrun-old-paused'`);
    expect((await world.db.query(`SELECT count(*)::int AS n FROM sprint_runs WHERE status IN ('QUEUED', 'RUNNING', 'PAUSED')`)).rows[0].n).toBe(3);
  });
});
