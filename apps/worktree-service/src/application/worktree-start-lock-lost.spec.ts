import type { INestApplication } from '@nestjs/common';
import { eventually } from '@gantry/testing';
import { WorktreeRecovery } from './recovery.js';
import { acquireForClaimedJob, createWorld, startInProcess, type TestWorld } from './testing/world.js';

/*
 * A start whose lock of the schema (`whileStarting`) is lost half-way through its resumption of the
 * held leases (docs/worktrees.md, "A lock whose connection is lost"): the PostgreSQL backend holding
 * it is terminated after the first key was resumed. Real PostgreSQL, NATS and git; the service in
 * this process, its start's resumption run again by the test with no other replica running.
 */
describe("a start whose lock is lost during its resumption of held leases (real git, PostgreSQL and NATS)", () => {
  const HOLD = 'worktree-start:resumed-key';
  let world: TestWorld;
  let app: INestApplication;

  beforeAll(async () => {
    world = await createWorld('wt-startlost');
    app = await startInProcess(world);
  });
  afterAll(async () => {
    delete process.env.GANTRY_TEST_HOLD_AT;
    // A test that failed while the start was held keeps the start's lock connection checked out of
    // its pool, and the stop would wait for it for good (the hook's timeout then skips the world's
    // removal, and its schema stays behind): the hold is released first, as at the test's end.
    process.emit('SIGUSR2', 'SIGUSR2');
    try {
      await app?.close();
    } finally {
      await world?.close();
    }
  });

  const acquire = (branch: string) => acquireForClaimedJob(world, branch);

  /** The resumptions at start recorded for the key's leases. */
  const resumptions = (worktreeKey: string) =>
    world.count(`SELECT count(*) AS n FROM events WHERE stream_id = $1 AND type = 'WorktreeLeaseRenewed' AND (data->>'resumedAtStart')::boolean`, [`worktree-${worktreeKey}`]);

  it('is not failed: it takes the lock again and resumes every held lease under it', async () => {
    const grants = [await acquire('feature/start-a'), await acquire('feature/start-b')];
    const keys = grants.map((g) => g.worktreeKey);
    const listening = process.listenerCount('SIGUSR2');
    process.env.GANTRY_TEST_HOLD_AT = HOLD;
    const starting = app
      .get(WorktreeRecovery)
      .resumeAtStart()
      .then(
        () => ({ started: true }),
        (error: unknown) => ({ error }),
      );
    // Held after the first key's resumption, under the start's lock.
    await eventually(() => process.listenerCount('SIGUSR2') > listening, { what: `the start held at ${HOLD}`, timeoutMs: 30_000 });
    delete process.env.GANTRY_TEST_HOLD_AT;
    const counts = await Promise.all(keys.map(resumptions));
    expect(counts.sort()).toEqual([0, 1]);
    const holder = (
      await world.db.query<{ pid: number }>(
        `SELECT a.pid FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid
          WHERE a.application_name = $1 AND l.locktype = 'advisory' AND l.granted`,
        [`gantry-${world.name}-key-locks`],
      )
    ).rows.map((r) => r.pid);
    // Nothing else holds a key lock now: the leases are ready, no effect runs.
    expect(holder).toHaveLength(1);
    await world.db.query(`SELECT pg_terminate_backend($1)`, [holder[0]]);
    // The hold's release, as its SIGUSR2 would (a listener of this process object: under Jest, not a handler of the real signal).
    process.emit('SIGUSR2', 'SIGUSR2');

    expect(await starting).toEqual({ started: true });
    // Both held leases resumed; the one the lost run had reached, again under the lock taken anew.
    for (const key of keys) expect(await resumptions(key)).toBeGreaterThanOrEqual(1);
    expect(Math.max(...(await Promise.all(keys.map(resumptions))))).toBeGreaterThanOrEqual(2);
  }, 120_000);
});
