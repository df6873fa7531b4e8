import { randomUUID } from 'node:crypto';
import { acquireWorktree, listWorktreeLeases, renewWorktreeLease } from '@gantry/contracts';
import { eventually, metricOf, refuseAppends } from '@gantry/testing';
import { streamIdOf } from './lease-log.js';
import { startServiceProcess, type ServiceProcess } from './testing/process.js';
import { claimedJob, createWorld, type TestWorld } from './testing/world.js';

/**
 * A key whose lease's expiry the database refuses, met by a sweep every 20 ms (docs/worktrees.md,
 * "When a lease ends"; docs/operations.md, "Periodic sweeps"): logged when first found and then at
 * growing intervals, the first a minute on, counted on /metrics at every try, and tried again at
 * every pass. These start the compiled service (apps/worktree-service/dist): build first.
 */
describe('a worktree key the sweep cannot handle, pass after pass', () => {
  let world: TestWorld;
  let service: ServiceProcess | undefined;

  beforeAll(async () => {
    world = await createWorld('wt-sweep-faulty-log');
    service = await startServiceProcess(world, { GANTRY_WORKTREE_SWEEP_INTERVAL_MS: '20', LOG_LEVEL: 'info' });
  }, 180_000);

  afterAll(async () => {
    await service?.kill('SIGKILL');
    await world?.close();
  });

  const tries = () => metricOf(service!, 'gantry_lease_sweep_failures_total{sweep="worktree-lease"}');
  const standing = () => metricOf(service!, 'gantry_lease_sweep_faulty_leases{sweep="worktree-lease"}');
  const lines = (worktreeKey: string, message: string) => service!.output().split('\n').filter((l) => l.includes(`"${message}"`) && l.includes(worktreeKey));

  it('hundreds of passes log it once and count every try; once the database takes it, the next passes expire its lease and say so', async () => {
    const grant = await world.client.request(
      acquireWorktree,
      { jobId: await claimedJob(world), jobLeaseToken: 1, repositoryUrl: world.git.origin, branch: 'feature/sweep-refused', baseRef: 'main', leaseDurationMs: 600_000, idempotencyKey: `acquire:${randomUUID()}` },
      { timeoutMs: 60_000 },
    );
    const { worktreeKey } = grant;
    const statusOf = async () => (await world.client.request(listWorktreeLeases, { worktreeKey })).leases.find((l) => l.leaseId === grant.leaseId)?.status;
    const allowExpiry = await refuseAppends(world.db, streamIdOf(worktreeKey), 'WorktreeLeaseExpired');
    try {
      const before = await tries();
      await world.client.request(renewWorktreeLease, { leaseId: grant.leaseId, token: grant.token, leaseDurationMs: 1_000, idempotencyKey: `renew:${randomUUID()}` });
      await eventually(async () => (await tries()) - before >= 200, { timeoutMs: 60_000, what: '200 passes that could not sweep the key' });
      // Every try counted and the lease still held; one line, under the minute before the next.
      const failed = lines(worktreeKey, 'a worktree key could not be swept; the pass goes on without it');
      expect(failed).toHaveLength(1);
      expect(JSON.parse(failed[0]!)).toMatchObject({ worktreeKey, failedTries: 1, error: expect.stringMatching(/an operator trigger refuses this row/) });
      expect(await standing()).toBe(1);
      expect(await statusOf()).toBe('ready');
    } finally {
      await allowExpiry();
    }
    // Tried at every pass: expired within a few, not a backoff's wait later.
    await eventually(async () => (await statusOf()) !== 'ready', { timeoutMs: 5_000, what: 'the lease expired once the database took it' });
    const swept = await eventually(() => lines(worktreeKey, 'a worktree key that could not be swept has been swept')[0], { what: 'its sweep logged' });
    expect(JSON.parse(swept).failedTries).toBeGreaterThanOrEqual(200);
    expect(await standing()).toBe(0);
    await eventually(async () => (await statusOf()) === 'stale_released', { what: 'its worktree released' });
  }, 180_000);
});
