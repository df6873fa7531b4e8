import { randomUUID } from 'node:crypto';
import type { INestApplication } from '@nestjs/common';
import { ErrorCode, listWorktreeLeases, listWorktrees, type RequestOf, type WorktreeLeaseView, type WorktreeView } from '@gantry/contracts';
import { readAllPages } from '@gantry/messaging';
import { acquireForClaimedJob, createWorld, newJobId, startInProcess, type TestWorld } from './testing/world.js';

/*
 * list_worktree_leases and list_worktrees answer in pages bounded by count and by bytes, read on
 * with a cursor (docs/worktrees.md, "Queries"; docs/architecture.md, "Paged queries"). Real
 * PostgreSQL, NATS and git; the leases are rows of the service's read model, written here so that a
 * test can hold hundreds of them (a lease's columns are what a grant writes).
 */
describe('paged worktree queries (real git, PostgreSQL and NATS)', () => {
  let world: TestWorld;
  let app: INestApplication;

  beforeAll(async () => {
    world = await createWorld('wt-paging');
    app = await startInProcess(world, { GANTRY_WORKTREE_MAX_PER_REPOSITORY: '50' });
  });
  afterAll(async () => {
    await app?.close();
    await world?.close();
  });

  const cursorOf = (key: Record<string, unknown>) => Buffer.from(JSON.stringify(key)).toString('base64url');

  /**
   * `count` released leases of one job; three share each requested_at (to the microsecond), so the
   * order rests on lease_id too. `at` is the first requested_at, `text` pads the URL and branch.
   */
  async function insertLeases(jobId: string, count: number, options: { at?: string; text?: number } = {}): Promise<string[]> {
    const pad = 'x'.repeat(options.text ?? 8);
    const { rows } = await world.db.query<{ lease_id: string }>(
      `INSERT INTO worktree_leases (lease_id, worktree_key, job_id, job_lease_token, repository_url, branch, base_ref, status,
                                    lock_deadline, requested_at, updated_at)
       SELECT gen_random_uuid(), 'paging-' || i, $1, 1, 'https://github.com/acme/' || $2 || '.git', 'feature/' || $2, 'main', 'released',
              now(), $3::timestamptz + (i / 3) * interval '1 microsecond', now()
         FROM generate_series(0, $4 - 1) AS i
       RETURNING lease_id::text`,
      [jobId, pad, options.at ?? '2026-01-01T00:00:00.000001Z', count],
    );
    return rows.map((r) => r.lease_id);
  }

  const leasePage = (request: RequestOf<typeof listWorktreeLeases>) => world.client.request(listWorktreeLeases, request, { timeoutMs: 30_000 });

  async function allLeases(request: RequestOf<typeof listWorktreeLeases>): Promise<{ leases: WorktreeLeaseView[]; pages: number }> {
    let pages = 0;
    const leases = await readAllPages(
      (cursor) => {
        pages++;
        return leasePage({ ...request, ...(cursor ? { cursor } : {}) });
      },
      (page) => page.leases,
    );
    return { leases, pages };
  }

  it('answers a request without a cursor with the first page, and reads on to every lease exactly once, in the order requested', async () => {
    const jobId = newJobId();
    const ids = await insertLeases(jobId, 250);
    const first = await leasePage({ jobId } as RequestOf<typeof listWorktreeLeases>);
    expect(first.leases).toHaveLength(100);
    expect(first.nextCursor).toEqual(expect.any(String));

    const { leases, pages } = await allLeases({ jobId, limit: 100 });
    expect(pages).toBe(3);
    expect(leases.map((l) => l.leaseId).sort()).toEqual([...ids].sort());
    const { rows } = await world.db.query<{ lease_id: string }>(`SELECT lease_id::text FROM worktree_leases WHERE job_id = $1 ORDER BY requested_at, lease_id`, [jobId]);
    expect(leases.map((l) => l.leaseId)).toEqual(rows.map((r) => r.lease_id));
  });

  it('ends a page at 512 KiB of leases, however many the limit allows', async () => {
    const jobId = newJobId();
    // about 2.3 KB each as JSON: 600 of them are well over one NATS message (1 MiB)
    const ids = await insertLeases(jobId, 600, { text: 1000 });
    const first = await leasePage({ jobId, limit: 1000 });
    expect(first.leases.length).toBeGreaterThan(0);
    expect(first.leases.length).toBeLessThan(600);
    expect(Buffer.byteLength(JSON.stringify(first.leases))).toBeLessThanOrEqual(512 * 1024);
    expect(first.nextCursor).toEqual(expect.any(String));

    const { leases, pages } = await allLeases({ jobId, limit: 1000 });
    expect(pages).toBeGreaterThan(1);
    expect(leases).toHaveLength(600);
    expect(new Set(leases.map((l) => l.leaseId))).toEqual(new Set(ids));
  });

  it('neither skips nor repeats a lease that existed when paging began, while leases are added before, between and after the pages', async () => {
    const jobId = newJobId();
    const existing = await insertLeases(jobId, 30, { at: '2026-02-01T00:00:00.000500Z' });
    const seen: string[] = [];
    let page = await leasePage({ jobId, limit: 10 });
    seen.push(...page.leases.map((l) => l.leaseId));
    // added while the caller reads: one before everything read, twenty at the very times of existing ones (the cursor's among them), five after the end
    await insertLeases(jobId, 1, { at: '2026-01-31T00:00:00.000000Z' });
    await world.db.query(
      `INSERT INTO worktree_leases (lease_id, worktree_key, job_id, job_lease_token, repository_url, branch, base_ref, status, lock_deadline, requested_at, updated_at)
       SELECT gen_random_uuid(), 'paging-late', $1, 1, 'https://github.com/acme/late.git', 'feature/late', 'main', 'released', now(), r.requested_at, now()
         FROM worktree_leases r WHERE r.job_id = $1 AND r.worktree_key <> 'paging-late' ORDER BY r.requested_at LIMIT 20`,
      [jobId],
    );
    await insertLeases(jobId, 5, { at: '2026-03-01T00:00:00.000000Z' });
    while (page.nextCursor) {
      page = await leasePage({ jobId, limit: 10, cursor: page.nextCursor });
      seen.push(...page.leases.map((l) => l.leaseId));
    }
    expect(new Set(seen).size).toBe(seen.length);
    for (const id of existing) expect(seen.filter((s) => s === id)).toEqual([id]);
  });

  it('refuses a cursor it did not hand out with INVALID_COMMAND', async () => {
    const jobId = newJobId();
    await insertLeases(jobId, 3);
    const before = await world.count(`SELECT count(*) AS n FROM worktree_leases`);
    const foreign = [
      'not a cursor',
      cursorOf({}),
      cursorOf({ after: '5' }), // a list_jobs cursor
      cursorOf({ q: 'list_worktrees', key: 'shop-main-1a2b3c4d5e6f' }),
      cursorOf({ q: 'list_worktree_leases', at: '2026-02-30T00:00:00.000000Z', id: randomUUID() }),
      cursorOf({ q: 'list_worktree_leases', at: '2026-01-01T00:00:00.000Z', id: randomUUID() }),
      cursorOf({ q: 'list_worktree_leases', at: '2026-01-01T00:00:00.000000Z', id: "'; DROP TABLE worktree_leases; --" }),
    ];
    for (const cursor of foreign) {
      await expect(leasePage({ jobId, limit: 10, cursor })).rejects.toMatchObject({ code: ErrorCode.INVALID_COMMAND, issues: [{ path: ['cursor'] }] });
    }
    expect(await world.count(`SELECT count(*) AS n FROM worktree_leases`)).toBe(before);
  });

  it('pages list_worktrees by key, neither skipping nor repeating a worktree while others are added, and refuses a foreign cursor', async () => {
    const acquire = (branch: string) => acquireForClaimedJob(world, branch);
    for (const branch of ['feature/page-b', 'feature/page-d', 'feature/page-f', 'feature/page-h', 'feature/page-j']) await acquire(branch);
    const existing = (await readAllPages((cursor) => world.client.request(listWorktrees, { limit: 1000, ...(cursor ? { cursor } : {}) }), (p) => p.worktrees)).map((w) => w.worktreeKey);
    expect(existing).toHaveLength(5);
    expect(existing).toEqual([...existing].sort());

    const old = await world.client.request(listWorktrees, {} as RequestOf<typeof listWorktrees>);
    expect(old.worktrees.map((w) => w.worktreeKey)).toEqual(existing);
    expect(old.nextCursor).toBeNull();

    const seen: WorktreeView[] = [];
    let page = await world.client.request(listWorktrees, { limit: 2 });
    expect(page.worktrees).toHaveLength(2);
    seen.push(...page.worktrees);
    // added while the caller reads: keys that sort before the cursor and after it
    await acquire('feature/page-a');
    await acquire('feature/page-z');
    while (page.nextCursor) {
      page = await world.client.request(listWorktrees, { limit: 2, cursor: page.nextCursor });
      seen.push(...page.worktrees);
    }
    const keys = seen.map((w) => w.worktreeKey);
    expect(new Set(keys).size).toBe(keys.length);
    for (const key of existing) expect(keys.filter((k) => k === key)).toEqual([key]);
    expect(seen.every((w) => w.dirty === false && w.heldBy !== null)).toBe(true);

    for (const cursor of ['%%%', cursorOf({ q: 'list_worktree_leases', at: '2026-01-01T00:00:00.000000Z', id: randomUUID() }), cursorOf({ q: 'list_worktrees', key: '../../etc' })]) {
      await expect(world.client.request(listWorktrees, { limit: 2, cursor })).rejects.toMatchObject({ code: ErrorCode.INVALID_COMMAND, issues: [{ path: ['cursor'] }] });
    }
  });
});
