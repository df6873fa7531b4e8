import type { INestApplication } from '@nestjs/common';
import type { QueryRunner } from 'typeorm';
import { enqueueJob } from '@gantry/contracts';
import { JobServiceStateCompression1780272000000 } from '../src/infrastructure/migrations.js';
import { createWorld, key, registerProducts, startInProcess, type TestWorld } from './harness.js';

/** How the views' rows are stored (docs/architecture.md, "What a command costs": rows written cheaply). */
describe('storage of the job service views', () => {
  let world: TestWorld;
  let app: INestApplication;
  let lz4: boolean;

  beforeAll(async () => {
    world = await createWorld('storage');
    app = await startInProcess(world);
    await registerProducts(world.client, ['product-s']);
    const { rows } = await world.db.query<{ lz4: boolean }>(`SELECT 'lz4' = ANY(enumvals) AS lz4 FROM pg_settings WHERE name = 'default_toast_compression'`);
    lz4 = rows[0]!.lz4;
  });

  afterAll(async () => {
    await app?.close();
    await world?.close();
  });

  /** The compression each view's state column is set to: l (lz4), p (pglz) or empty (the server's default). */
  const stateCompression = async () => {
    const { rows } = await world.db.query<{ table: string; method: string }>(
      `SELECT c.relname AS table, a.attcompression::text AS method FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
        WHERE c.relnamespace = current_schema()::regnamespace AND c.relname IN ('jobs', 'sprint_runs', 'products') AND a.attname = 'state'
        ORDER BY 1`,
    );
    return Object.fromEntries(rows.map((r) => [r.table, r.method]));
  };

  it("compresses a job's large state with lz4 where the server has it", async () => {
    const { jobId } = await world.client.request(enqueueJob, {
      kind: 'TASK_IMPLEMENTATION',
      productId: 'product-s',
      taskId: 'T-1',
      // Varied text, so that the row is over the size at which PostgreSQL compresses it and does not shrink to nothing.
      prompt: Array.from({ length: 400 }, (_, i) => `step ${i}: change ${(i * 7919) % 1013}`).join('\n'),
      idempotencyKey: key('enqueue'),
    });
    const { rows } = await world.db.query<{ method: string | null }>(`SELECT pg_column_compression(state) AS method FROM jobs WHERE job_id = $1`, [jobId]);
    expect(rows[0]!.method).toBe(lz4 ? 'lz4' : 'pglz');
    expect(await stateCompression()).toEqual(lz4 ? { jobs: 'l', products: 'l', sprint_runs: 'l' } : { jobs: '', products: '', sprint_runs: '' });
  });

  it('the migration reverts to pglz and applies again', async () => {
    const migration = new JobServiceStateCompression1780272000000();
    const runner = { query: async (sql: string, params?: unknown[]) => (await world.db.query(sql, params)).rows } as unknown as QueryRunner;
    await migration.down(runner);
    expect(await stateCompression()).toEqual({ jobs: 'p', products: 'p', sprint_runs: 'p' });
    await migration.up(runner);
    const method = lz4 ? 'l' : 'p'; // a server without lz4 keeps what it had
    expect(await stateCompression()).toEqual({ jobs: method, products: method, sprint_runs: method });
  });
});
