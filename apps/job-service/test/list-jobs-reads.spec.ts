import { listJobs } from '@gantry/contracts';
import { migrate } from '@gantry/eventstore';
import { testDatabaseUrl } from '@gantry/testing';
import { listJobsStatement } from '../src/application/queries.js';
import { jobServiceMigrations } from '../src/infrastructure/migrations.js';
import { createWorld, readingJobsView, type TestWorld } from './harness.js';

/** What a list_jobs page reads of a long history (docs/jobs.md, "Listing jobs"). */
describe('list_jobs on a long history', () => {
  let world: TestWorld;

  beforeAll(async () => {
    world = await createWorld('list-jobs-reads');
    await migrate({ url: testDatabaseUrl, schema: world.name, migrations: jobServiceMigrations });
    // 20,000 finished jobs, among them three claims of runner-x and one of runner-y (job-N at enqueue position N).
    await world.db.query(
      `INSERT INTO jobs (job_id, enqueue_position, status, kind, product_id, exclude_from_coalescing, created_at, attempt, max_attempts, runner_id, payloads, state)
       SELECT 'job-' || g, g, CASE WHEN g IN (100, 10000, 19990, 15000) THEN 'RUNNING' ELSE 'DONE' END, 'TASK_IMPLEMENTATION', 'p', false, now(), 1, 3,
              CASE WHEN g IN (100, 10000, 19990) THEN 'runner-x' WHEN g = 15000 THEN 'runner-y' END, '{}', '{}'
         FROM generate_series(1, 20000) AS g`,
    );
    await world.db.query('ANALYZE jobs');
  });

  afterAll(async () => {
    await world?.close();
  });

  /** The jobs a page answers, and the rows it read from the jobs view and its indexes. */
  const page = async (request: Record<string, unknown>) => {
    const { rows, read } = await readingJobsView<{ enqueue_position: string }>(world, listJobsStatement(listJobs.request.parse(request)));
    return { jobs: rows.map((r) => `job-${r.enqueue_position}`), read };
  };

  it("a runner's claims are read from the claims' index, whatever else the view holds: not the 20,000 finished jobs", async () => {
    for (const request of [{ runnerId: 'runner-x' }, { runnerId: 'runner-x', status: ['CLAIMED', 'RUNNING'] }, { runnerId: 'runner-x', limit: 2 }]) {
      const { jobs, read } = await page(request);
      // (a page of two reads one more, to know there is a next page)
      expect({ request, jobs }).toEqual({ request, jobs: ['job-100', 'job-10000', 'job-19990'] });
      expect({ request, tooMany: read > 64 }).toEqual({ request, tooMany: false });
    }
    expect((await page({ runnerId: 'runner-x', status: ['DONE'] })).jobs).toEqual([]);
    expect((await page({ runnerId: 'runner-none' })).jobs).toEqual([]);
    expect((await page({ runnerId: 'runner-none' })).read).toBeLessThanOrEqual(64);
  });
});
