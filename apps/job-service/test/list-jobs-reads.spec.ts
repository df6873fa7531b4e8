import type { QueryRunner } from 'typeorm';
import { listJobs } from '@gantry/contracts';
import { migrate } from '@gantry/eventstore';
import { encodeCursor } from '@gantry/service-runtime';
import { mostRowsReadByAStep, testDatabaseUrl } from '@gantry/testing';
import { listJobsStatement } from '../src/application/queries.js';
import { JobServiceListingByKind1782600000000, jobServiceMigrations } from '../src/infrastructure/migrations.js';
import { createWorld, readingJobsView, type TestWorld } from './harness.js';

/** The cursor of a page whose last job was enqueued at `position`. */
const cursorAfter = (position: string) => encodeCursor({ after: position });

/** What a list_jobs page reads of a long history (docs/jobs.md, "Listing jobs"). */
describe('list_jobs on a long history', () => {
  let world: TestWorld;

  beforeAll(async () => {
    world = await createWorld('list-jobs-reads');
    await migrate({ url: testDatabaseUrl, schema: world.name, migrations: jobServiceMigrations });
    // 20,000 jobs (job-N at enqueue position N), nearly all DONE, of product p and a task each (T-N):
    // three claims of runner-x and one of runner-y; three jobs of product p-rare and two of task T-rare;
    // three CANCELLED jobs and two FAILED ones; one in fifty SKIPPED (job-25, job-75, …: 400); every
    // tenth job of p-often; three REVIEW jobs, one in fifty an IDEA_GRILL (job-30, job-80, …: 400), the
    // others TASK_IMPLEMENTATION, and no PLAN_CHAT job.
    await world.db.query(
      `INSERT INTO jobs (job_id, enqueue_position, status, kind, product_id, task_id, exclude_from_coalescing, created_at, attempt, max_attempts, runner_id, payloads, state)
       SELECT 'job-' || g, g,
              CASE WHEN g IN (100, 10000, 19990, 15000) THEN 'RUNNING' WHEN g IN (50, 12000, 19999) THEN 'CANCELLED' WHEN g IN (7000, 17000) THEN 'FAILED' WHEN g % 50 = 25 THEN 'SKIPPED' ELSE 'DONE' END,
              CASE WHEN g IN (400, 8000, 19000) THEN 'REVIEW' WHEN g % 50 = 30 THEN 'IDEA_GRILL' ELSE 'TASK_IMPLEMENTATION' END,
              CASE WHEN g IN (300, 9000, 18000) THEN 'p-rare' WHEN g % 10 = 0 THEN 'p-often' ELSE 'p' END,
              CASE WHEN g IN (2500, 16000) THEN 'T-rare' ELSE 'T-' || g END, false, now(), 1, 3,
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

  /**
   * Each request's page, and 'only those' when no step of its statement read more than the jobs it
   * answers and one more (a page of `limit` reads one more to know there is a next), else the rows read.
   */
  const answersOf = async (cases: [Record<string, unknown>, string[]][]) => {
    const answered = [];
    for (const [request, jobs] of cases) {
      const statement = listJobsStatement(listJobs.request.parse(request));
      const { rows } = await world.db.query<{ enqueue_position: string }>(statement.text, statement.values);
      const read = await mostRowsReadByAStep(world.db, statement.text, statement.values);
      answered.push({ request, jobs: rows.map((r) => `job-${r.enqueue_position}`), read: read <= jobs.length + 1 ? 'only those' : read });
    }
    return answered;
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

  it('a filter by product, by task or by a finished status reads the matching jobs only, in enqueue order, a page at a time', async () => {
    const cases: [Record<string, unknown>, string[]][] = [
      [{ productId: 'p-rare' }, ['job-300', 'job-9000', 'job-18000']],
      [{ productId: 'p-none' }, []],
      [{ productId: 'p-rare', limit: 1 }, ['job-300', 'job-9000']],
      [{ taskId: 'T-rare' }, ['job-2500', 'job-16000']],
      [{ taskId: 'T-none' }, []],
      [{ status: ['CANCELLED'] }, ['job-50', 'job-12000', 'job-19999']],
      [{ status: ['SKIPPED'], cursor: cursorAfter('19975') }, []],
      [{ status: ['FAILED', 'CANCELLED'] }, ['job-50', 'job-7000', 'job-12000', 'job-17000', 'job-19999']],
      [{ status: ['CANCELLED'], limit: 1 }, ['job-50', 'job-12000']],
      [{ status: ['CANCELLED'], cursor: cursorAfter('50') }, ['job-12000', 'job-19999']],
      [{ productId: 'p-rare', cursor: cursorAfter('300') }, ['job-9000', 'job-18000']],
      [{ productId: 'p-rare', status: ['DONE'], limit: 1 }, ['job-300', 'job-9000']],
      [{ taskId: 'T-rare', status: ['DONE'] }, ['job-2500', 'job-16000']],
    ];
    expect(await answersOf(cases)).toEqual(cases.map(([request, jobs]) => ({ request, jobs, read: 'only those' })));
  });

  const byKind = (from: number, n: number) => Array.from({ length: n }, (_, i) => `job-${from + 50 * i}`);
  const kindCases: [Record<string, unknown>, string[]][] = [
    [{ kind: ['PLAN_CHAT'] }, []],
    [{ kind: ['REVIEW'] }, ['job-400', 'job-8000', 'job-19000']],
    [{ kind: ['REVIEW'], limit: 1 }, ['job-400', 'job-8000']],
    [{ kind: ['REVIEW'], cursor: cursorAfter('400') }, ['job-8000', 'job-19000']],
    [{ kind: ['IDEA_GRILL'], limit: 10 }, byKind(30, 11)],
    [{ kind: ['IDEA_GRILL'], limit: 10, cursor: cursorAfter('10030') }, byKind(10080, 11)],
    [{ kind: ['TASK_IMPLEMENTATION'], limit: 10 }, Array.from({ length: 11 }, (_, i) => `job-${i + 1}`)],
    [{ kind: ['REVIEW', 'PLAN_CHAT'] }, ['job-400', 'job-8000', 'job-19000']],
    [{ kind: ['REVIEW', 'IDEA_GRILL'], limit: 5 }, ['job-30', 'job-80', 'job-130', 'job-180', 'job-230', 'job-280']],
    [{ kind: ['REVIEW', 'IDEA_GRILL'], limit: 5, cursor: cursorAfter('7990') }, ['job-8000', 'job-8030', 'job-8080', 'job-8130', 'job-8180', 'job-8230']],
    [{ kind: ['REVIEW', 'REVIEW'], limit: 2 }, ['job-400', 'job-8000', 'job-19000']],
  ];

  it('a filter by kind reads the jobs of its kinds only, a page at a time: a kind without jobs reads nothing, several kinds a page of each', async () => {
    expect(await answersOf(kindCases)).toEqual(kindCases.map(([request, jobs]) => ({ request, jobs, read: 'only those' })));
  });

  it('the kind index migration reverts (a kind without jobs then reads every job) and applies again', async () => {
    const runner = { query: async (sql: string, params?: unknown[]) => (await world.db.query(sql, params)).rows } as unknown as QueryRunner;
    const migration = new JobServiceListingByKind1782600000000();
    const answers = kindCases.map(([request, jobs]) => ({ request, jobs, read: 'only those' }));
    await migration.down(runner);
    const without = await answersOf(kindCases);
    expect(without.map((a) => a.jobs)).toEqual(kindCases.map(([, jobs]) => jobs));
    expect(without[0]).toEqual({ request: { kind: ['PLAN_CHAT'] }, jobs: [], read: 20_000 });
    await migration.up(runner);
    expect(await answersOf(kindCases)).toEqual(answers);
  });

  it('a filter by several finished statuses, or by one that one job in fifty has, reads about its page, not every matching job nor the listing between them', async () => {
    const skipped = (from: number, n: number) => Array.from({ length: n }, (_, i) => `job-${from + 50 * i}`);
    const cases: [Record<string, unknown>, string[]][] = [
      [{ status: ['SKIPPED'], limit: 10 }, skipped(25, 11)],
      [{ status: ['SKIPPED'], limit: 10, cursor: cursorAfter('10025') }, skipped(10075, 11)],
      [{ status: ['SKIPPED'], productId: 'p', limit: 10 }, skipped(25, 11)],
      [{ status: ['DONE', 'SKIPPED'], limit: 10 }, Array.from({ length: 11 }, (_, i) => `job-${i + 1}`)],
      [{ status: ['DONE', 'SKIPPED'], limit: 10, cursor: cursorAfter('19970') }, Array.from({ length: 11 }, (_, i) => `job-${19971 + i}`)],
      [{ status: ['FAILED', 'SKIPPED', 'CANCELLED'], limit: 5 }, ['job-25', 'job-50', 'job-75', 'job-125', 'job-175', 'job-225']],
      [{ status: ['FAILED', 'SKIPPED', 'CANCELLED'], limit: 5, cursor: cursorAfter('6990') }, ['job-7000', 'job-7025', 'job-7075', 'job-7125', 'job-7175', 'job-7225']],
      [{ status: ['DONE', 'FAILED', 'SKIPPED', 'CANCELLED'], limit: 20, cursor: cursorAfter('19990') }, Array.from({ length: 10 }, (_, i) => `job-${19991 + i}`)],
      [{ status: ['FAILED', 'CANCELLED'], limit: 2 }, ['job-50', 'job-7000', 'job-12000']],
      [{ status: ['SKIPPED', 'SKIPPED'], limit: 3 }, skipped(25, 4)],
    ];
    // With several statuses, no step reads more either: each status's page, before they are merged.
    expect(await answersOf(cases)).toEqual(cases.map(([request, jobs]) => ({ request, jobs, read: 'only those' })));
  });
});
