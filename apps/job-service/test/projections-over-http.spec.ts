import type { INestApplication } from '@nestjs/common';
import { enqueueJob } from '@gantry/contracts';
import { createWorld, key, registerProducts, startInProcess, type TestWorld } from './harness.js';

const TOKEN = 'projections-test-token';

/** The job service's views rebuilt from its log by an operator, over HTTP (docs/operations.md, "Rebuilding the views"). */
describe('the job service\'s views over HTTP: GET /projections, POST /projections/rebuild', () => {
  let world: TestWorld;
  let app: INestApplication;
  let url: string;

  beforeAll(async () => {
    world = await createWorld('projections-http');
    app = await startInProcess(world, { GANTRY_HTTP_TOKEN: TOKEN });
    await app.listen(0, '127.0.0.1');
    url = (await app.getUrl()).replace('[::1]', '127.0.0.1').replace('localhost', '127.0.0.1');
    await registerProducts(world.client, ['product-rebuild']);
  });

  afterAll(async () => {
    await app?.close();
    await world?.close();
  });

  const call = async (method: 'GET' | 'POST', path: string, body?: unknown, token: string | null = TOKEN) => {
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (token) headers['authorization'] = `Bearer ${token}`;
    const response = await fetch(`${url}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    return { status: response.status, body: (await response.json()) as { ok: boolean; result?: Record<string, unknown>; error?: { code: string } } };
  };
  const enqueue = (taskId: string) =>
    world.client.request(enqueueJob, { kind: 'PLAN_CHAT', productId: 'product-rebuild', taskId, prompt: 'plan it', payload: {}, idempotencyKey: key('enqueue') });
  /** The views as readers see them: the jobs (the state row and the columns the queue and listings use) and the products. */
  const views = async () => ({
    jobs: (await world.db.query(`SELECT job_id, status, kind, product_id, task_id, attempt, enqueue_position, state FROM jobs ORDER BY job_id`)).rows,
    products: (await world.db.query(`SELECT * FROM products ORDER BY product_id`)).rows,
  });

  it('names the projections it keeps and their tables', async () => {
    const listed = (await call('GET', '/projections')).body.result!['projections'] as Array<{ name: string; tables: string[] }>;
    expect(listed.map((p) => p.name)).toEqual(['jobs_view', 'sprint_runs_view', 'products_view']);
    expect(listed.find((p) => p.name === 'jobs_view')!.tables).toContain('jobs');
  });

  it('puts views that went wrong back as the log has them, while commands keep arriving', async () => {
    for (let i = 0; i < 5; i++) await enqueue(`T-${i}`);
    const before = await views();
    expect(before.jobs).toHaveLength(5);
    // The views go wrong: a row lost, another changed behind the log's back.
    await world.db.query(`DELETE FROM jobs WHERE job_id = $1`, [before.jobs[0].job_id]);
    await world.db.query(`UPDATE jobs SET status = 'DONE', attempt = 9 WHERE job_id = $1`, [before.jobs[1].job_id]);

    const [rebuilt, during] = await Promise.all([call('POST', '/projections/rebuild', {}), enqueue('T-during')]);
    expect(rebuilt.status).toBe(200);
    expect(rebuilt.body.result).toMatchObject({ projections: ['jobs_view', 'sprint_runs_view', 'products_view'], events: expect.any(Number), seconds: expect.any(Number) });
    const after = await views();
    expect(after.products).toEqual(before.products);
    expect(after.jobs.filter((row) => row.job_id !== during.jobId)).toEqual(before.jobs);
    expect(after.jobs.find((row) => row.job_id === during.jobId)).toMatchObject({ status: 'QUEUED', task_id: 'T-during' });
  });

  it('refuses a request without the token or with options it does not take, and changes nothing', async () => {
    const before = await views();
    await world.db.query(`UPDATE jobs SET attempt = 7 WHERE job_id = $1`, [before.jobs[0].job_id]);
    const tampered = await views();
    for (const body of [{ projections: ['jobs_view'] }, { all: true }, []]) {
      const refused = await call('POST', '/projections/rebuild', body);
      expect({ body, status: refused.status, code: refused.body.error?.code }).toEqual({ body, status: 400, code: 'INVALID_COMMAND' });
    }
    expect((await call('POST', '/projections/rebuild', {}, null)).status).toBe(401);
    expect((await call('GET', '/projections', undefined, 'wrong-token')).status).toBe(401);
    expect(await views()).toEqual(tampered);
    expect((await call('POST', '/projections/rebuild')).status).toBe(200);
    expect(await views()).toEqual(before);
  });

  /** The jobs view's indexes and storage settings: what a rebuild drops and sets for its length, and puts back. */
  const tableShape = async () => ({
    indexes: (await world.db.query(`SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'jobs' ORDER BY indexname`)).rows,
    options: (await world.db.query(`SELECT reloptions FROM pg_class WHERE oid = 'jobs'::regclass`)).rows,
  });

  it('a rebuild that fails part-way answers 500 INTERNAL and leaves every view, index and setting as it was; commands go on', async () => {
    // A view that cannot hold what the log says: a constraint added after the job it refuses was written.
    await enqueue('T-refused');
    const before = await views();
    const shape = await tableShape();
    await world.db.query(`UPDATE jobs SET attempt = 5 WHERE job_id = $1`, [before.jobs[0].job_id]);
    const tampered = await views();
    await world.db.query(`ALTER TABLE jobs ADD CONSTRAINT jobs_refuse_test CHECK (task_id IS DISTINCT FROM 'T-refused') NOT VALID`);
    try {
      const refused = await call('POST', '/projections/rebuild', {});
      expect(refused).toEqual({ status: 500, body: { ok: false, error: { code: 'INTERNAL', message: expect.stringContaining('rolled back') } } });
      expect(JSON.stringify(refused.body)).not.toContain('jobs_refuse_test');
      expect(await views()).toEqual(tampered);
      expect(await tableShape()).toEqual(shape);
      const after = await enqueue('T-after-the-failure');
      expect((await views()).jobs.find((row) => row.job_id === after.jobId)).toMatchObject({ status: 'QUEUED' });
    } finally {
      await world.db.query(`ALTER TABLE jobs DROP CONSTRAINT jobs_refuse_test`);
    }
    expect((await call('POST', '/projections/rebuild', {})).status).toBe(200);
    const rebuilt = await views();
    expect(rebuilt.jobs.filter((row) => before.jobs.some((b) => b.job_id === row.job_id))).toEqual(before.jobs);
    expect(await tableShape()).toEqual(shape);
  });

  it('two rebuilds at once, with commands arriving, both finish and leave the views as the log has them', async () => {
    const before = await views();
    await world.db.query(`UPDATE jobs SET attempt = 8 WHERE job_id = $1`, [before.jobs[0].job_id]);
    const [first, second, during] = await Promise.all([call('POST', '/projections/rebuild', {}), call('POST', '/projections/rebuild', {}), enqueue('T-between-rebuilds')]);
    expect([first.status, second.status]).toEqual([200, 200]);
    const after = await views();
    expect(after.jobs.filter((row) => row.job_id !== during.jobId)).toEqual(before.jobs);
    expect(after.jobs.find((row) => row.job_id === during.jobId)).toMatchObject({ status: 'QUEUED', task_id: 'T-between-rebuilds' });
  });
});
