import { acquireWorktree, renewWorktreeLease } from '@gantry/contracts';
import { isTransient } from '@gantry/messaging';
import { eventually } from '@gantry/testing';
import { claimedJob, createWorld, type TestWorld } from './testing/world.js';
import { startServiceProcess, type ServiceProcess } from './testing/process.js';

/*
 * A start slower to serve than a whole lease (docs/worktrees.md, "When a lease ends"): no holder
 * can renew its lease while no worktree service serves, so a held lease's time counts again only
 * from the moment this one serves — not from an earlier point of its start (its reconciliation, its
 * other start-up work), which a slow start could leave more than a lease behind. Starts
 * apps/worktree-service/dist: build first.
 */
describe('a worktree service start slower to serve than a whole lease (real git, PostgreSQL and NATS)', () => {
  const HOLD = 'worktree-start:before-serving';
  let world: TestWorld;
  let service: ServiceProcess | null = null;

  beforeAll(async () => {
    world = await createWorld('wt-slowstart');
  });
  afterAll(async () => {
    await service?.kill('SIGKILL');
    await world?.close();
  });

  it('expires no held lease while it has not served yet, and the holder renews its lease once it serves', async () => {
    service = await startServiceProcess(world);
    const jobId = await claimedJob(world);
    const grant = await world.client.request(
      acquireWorktree,
      { jobId, jobLeaseToken: 1, repositoryUrl: world.git.origin, branch: 'feature/slow-start', baseRef: 'main', leaseDurationMs: 3_000, idempotencyKey: `acquire:${jobId}` },
      { timeoutMs: 60_000 },
    );
    await service.kill('SIGKILL');

    service = await startServiceProcess(world, { GANTRY_TEST_HOLD_AT: HOLD }, false);
    const held = service;
    await eventually(() => held.output().includes(`"testHold":"${HOLD}"`), { what: 'the start held before it serves', timeoutMs: 120_000 });
    // Held until the lease's expiry as the database has it now (resumed or not) is behind us, by more
    // than a few of the 200 ms sweeps: no renewal could reach a worktree service meanwhile. (A lease
    // expired meanwhile ends the wait too: then it is lost, as the renewal below says.)
    await eventually(
      async () => {
        const [lease] = (await world.db.query(`SELECT status, now() > expires_at + interval '1 second' AS past FROM worktree_leases WHERE lease_id = $1`, [grant.leaseId])).rows;
        return lease.status !== 'ready' || lease.past === true;
      },
      { what: "the lease's expiry passed while the start was held", timeoutMs: 60_000 },
    );
    held.process.kill('SIGUSR2');

    // The holder's next renewal, once a worktree service serves (until then: nobody answers), keeps the lease.
    const renewal = { leaseId: grant.leaseId, token: grant.token, idempotencyKey: `renew:${jobId}` };
    const renewed = await eventually(
      () => world.client.request(renewWorktreeLease, renewal, { timeoutMs: 5_000 }).catch((error: unknown) => (isTransient(error) ? false : { error })),
      { what: 'a renewal answered', timeoutMs: 120_000 },
    );
    expect(renewed).not.toHaveProperty('error');
    const { rows } = await world.db.query(`SELECT count(*)::int AS n FROM events WHERE type = 'WorktreeLeaseExpired' AND data->>'leaseId' = $1`, [grant.leaseId]);
    expect(rows[0].n).toBe(0);
  }, 300_000);
});
