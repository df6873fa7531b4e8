import { migrate } from '@gantry/eventstore';
import { testDatabaseUrl } from '@gantry/testing';
import { PICK } from '../src/application/claim-picker.js';
import type { QueryRunner } from 'typeorm';
import { JobServicePausedJobsOutOfPick1782700000000, JobServiceQueueIndex1780358400000, JobServiceQueuePick1781050000000, jobServiceMigrations } from '../src/infrastructure/migrations.js';
import { createWorld, readingJobsView, type TestWorld } from './harness.js';

/** The statement a claim picks its job with, on a long history and a deep queue (docs/jobs.md, "Claims"). */
describe('the claim pick on a deep queue', () => {
  let world: TestWorld;

  beforeAll(async () => {
    world = await createWorld('claim-pick');
    await migrate({ url: testDatabaseUrl, schema: world.name, migrations: jobServiceMigrations });
    // In the jobs view only (the pick reads nothing else): 40,000 finished jobs, then 4,000 queued
    // ones of two kinds, alternating; job-N is at enqueue position N.
    await world.db.query(
      `INSERT INTO jobs (job_id, enqueue_position, status, kind, product_id, exclude_from_coalescing, created_at, attempt, max_attempts, payloads, state)
       SELECT 'job-' || g, g, CASE WHEN g <= 40000 THEN 'DONE' ELSE 'QUEUED' END,
              CASE WHEN g % 2 = 0 THEN 'TASK_IMPLEMENTATION' ELSE 'REVIEW' END, 'p', false, now(), 1, 3, '{}', '{}'
         FROM generate_series(1, 44000) AS g`,
    );
    await world.db.query('ANALYZE jobs');
  });

  afterAll(async () => {
    await world?.close();
  });

  const pick = async (kinds: string[], passed: string[], count: number, at = new Date()) =>
    (await world.db.query<{ job_id: string }>(PICK.text, [kinds, passed, count, at])).rows.map((r) => r.job_id);

  it('answers the oldest queued jobs of the kinds asked, but those passed over, oldest first', async () => {
    expect(await pick(['REVIEW', 'TASK_IMPLEMENTATION', 'REVIEW'], ['job-40001', 'job-40004'], 5)).toEqual(['job-40002', 'job-40003', 'job-40005', 'job-40006', 'job-40007']);
    expect(await pick(['TASK_IMPLEMENTATION'], [], 2)).toEqual(['job-40002', 'job-40004']);
    expect(await pick(['MERGE_CONFLICT_RESOLUTION'], [], 2)).toEqual([]);
  });

  it('leaves out a job whose hand-back pause has not ended by the time it is asked at, and takes it from that moment on', async () => {
    const due = new Date(Date.now() + 60_000);
    await world.db.query(`UPDATE jobs SET offer_not_before = $1 WHERE job_id = 'job-40002'`, [due]);
    try {
      expect(await pick(['TASK_IMPLEMENTATION'], [], 2)).toEqual(['job-40004', 'job-40006']);
      expect(await pick(['TASK_IMPLEMENTATION'], [], 2, new Date(due.getTime() - 1))).toEqual(['job-40004', 'job-40006']);
      expect(await pick(['TASK_IMPLEMENTATION'], [], 2, due)).toEqual(['job-40002', 'job-40004']);
    } finally {
      await world.db.query(`UPDATE jobs SET offer_not_before = NULL WHERE job_id = 'job-40002'`);
    }
  });

  /** The rows a pick reads from the jobs view and its indexes. */
  const rowsRead = async (kinds: string[], passed: string[], count: number) => {
    const { rows, read } = await readingJobsView<{ job_id: string }>(world, { text: PICK.text, values: [kinds, passed, count, new Date()] });
    return { picked: rows.length, read };
  };

  it('reads each kind in order from the queue index, only as far as the claims need, however long the history and deep the queue', async () => {
    for (const kinds of [['TASK_IMPLEMENTATION'], ['TASK_IMPLEMENTATION', 'REVIEW']]) {
      const { picked, read } = await rowsRead(kinds, ['job-40002'], 16);
      expect(picked).toBe(16);
      // Per kind about the 16 it answers and the one passed over, read and dropped (PostgreSQL counts a
      // few more rows while it plans) — not the 40,000 finished jobs before the queue (a read in enqueue
      // order that filters by status) nor the kind's 2,000 queued ones (a sort).
      expect({ kinds, tooMany: read > 64 * kinds.length }).toEqual({ kinds, tooMany: false });
    }
  });

  it('the queue index migration reverts to the index without the job id and applies again; the pick answers the same on both', async () => {
    const indexDefinition = async () =>
      (await world.db.query<{ def: string }>(`SELECT indexdef AS def FROM pg_indexes WHERE schemaname = current_schema() AND indexname = 'jobs_queue'`)).rows[0]?.def;
    const runner = { query: async (sql: string, params?: unknown[]) => (await world.db.query(sql, params)).rows } as unknown as QueryRunner;
    const migration = new JobServiceQueueIndex1780358400000();
    const answer = await pick(['REVIEW', 'TASK_IMPLEMENTATION'], ['job-40001'], 4);
    await migration.down(runner);
    expect(await indexDefinition()).toMatch(/\(kind, enqueue_position\) WHERE/);
    expect(await pick(['REVIEW', 'TASK_IMPLEMENTATION'], ['job-40001'], 4)).toEqual(answer);
    await migration.up(runner);
    expect(await indexDefinition()).toMatch(/\(kind, enqueue_position, job_id\) WHERE/);
    expect(await pick(['REVIEW', 'TASK_IMPLEMENTATION'], ['job-40001'], 4)).toEqual(answer);
  });

  it('the pick function migration reverts (the pick then has no function to call) and applies again', async () => {
    const runner = { query: async (sql: string, params?: unknown[]) => (await world.db.query(sql, params)).rows } as unknown as QueryRunner;
    const migration = new JobServiceQueuePick1781050000000();
    // The pick of the version before, without the time it is made at.
    const pickOfBefore = async (kinds: string[], passed: string[], count: number) =>
      (await world.db.query<{ job_id: string }>(`SELECT job_id FROM gantry_pick_queued($1::text[], $2::text[], $3::integer) AS job_id`, [kinds, passed, count])).rows.map((r) => r.job_id);
    const answer = await pickOfBefore(['REVIEW', 'TASK_IMPLEMENTATION'], ['job-40001'], 4);
    expect(await pick(['REVIEW', 'TASK_IMPLEMENTATION'], ['job-40001'], 4)).toEqual(answer);
    await migration.down(runner);
    await expect(pickOfBefore(['REVIEW'], [], 1)).rejects.toThrow(/gantry_pick_queued/);
    await migration.up(runner);
    expect(await pickOfBefore(['REVIEW', 'TASK_IMPLEMENTATION'], ['job-40001'], 4)).toEqual(answer);
  });

  it('the migration that leaves paused jobs out of the pick reverts (no pick with a time, no column) and applies again, taking the pauses of the queued jobs from their state', async () => {
    const runner = { query: async (sql: string, params?: unknown[]) => (await world.db.query(sql, params)).rows } as unknown as QueryRunner;
    const migration = new JobServicePausedJobsOutOfPick1782700000000();
    const answer = await pick(['REVIEW', 'TASK_IMPLEMENTATION'], ['job-40001'], 4);
    await migration.down(runner);
    await expect(pick(['REVIEW'], [], 1)).rejects.toThrow(/gantry_pick_queued/);
    // A job handed back by the version before: its pause is in its state only.
    const due = new Date(Date.now() + 60_000);
    await world.db.query(`UPDATE jobs SET state = json_build_object('offerNotBefore', $1::text) WHERE job_id = 'job-40002'`, [due.toISOString()]);
    try {
      await migration.up(runner);
      expect(await pick(['REVIEW', 'TASK_IMPLEMENTATION'], ['job-40001'], 4)).toEqual(answer.filter((jobId) => jobId !== 'job-40002').concat('job-40006'));
      expect(await pick(['REVIEW', 'TASK_IMPLEMENTATION'], ['job-40001'], 4, due)).toEqual(answer);
    } finally {
      await world.db.query(`UPDATE jobs SET state = '{}', offer_not_before = NULL WHERE job_id = 'job-40002'`);
    }
  });
});
