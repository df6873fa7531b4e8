import { randomUUID } from 'node:crypto';
import type { INestApplication } from '@nestjs/common';
import { register } from 'prom-client';
import { acquireWorktree, listWorktreeLeases, renewWorktreeLease, type WorktreeLeaseGrant } from '@gantry/contracts';
import { eventually } from '@gantry/testing';
import { streamIdOf } from './lease-log.js';
import { LeaseSweep } from './lease-sweep.js';
import { claimedJob, createWorld, startInProcess, type TestWorld } from './testing/world.js';

/**
 * A key the sweep cannot handle does not keep the others from expiring (docs/worktrees.md, "When a
 * lease ends"): here a key whose log holds an event this version of the service cannot read (written
 * by a newer one, or damaged by hand) — every load of it fails, at every pass.
 */
describe('the lease sweep past a key that fails', () => {
  let world: TestWorld;
  let app: INestApplication;
  let n = 0;

  beforeAll(async () => {
    world = await createWorld('wt-sweep-faulty');
    // No pass of its own: the test runs each one.
    app = await startInProcess(world, { GANTRY_WORKTREE_SWEEP_INTERVAL_MS: '3600000' });
  });
  afterAll(async () => {
    await app?.close();
    await world?.close();
  });

  const shortLease = async (branch: string): Promise<WorktreeLeaseGrant> => {
    const grant = await world.client.request(
      acquireWorktree,
      { jobId: await claimedJob(world), jobLeaseToken: 1, repositoryUrl: world.git.origin, branch, baseRef: 'main', leaseDurationMs: 600_000, idempotencyKey: `acquire:${randomUUID()}` },
      { timeoutMs: 60_000 },
    );
    const renewed = await world.client.request(renewWorktreeLease, { leaseId: grant.leaseId, token: grant.token, leaseDurationMs: 1_000, idempotencyKey: `renew:${++n}` });
    return { ...grant, expiresAt: renewed.expiresAt };
  };
  const statusOf = async (grant: WorktreeLeaseGrant) =>
    (await world.client.request(listWorktreeLeases, { worktreeKey: grant.worktreeKey })).leases.find((l) => l.leaseId === grant.leaseId)?.status;
  const failures = async () => (await register.getSingleMetric('gantry_lease_sweep_failures_total')?.get())?.values.find((v) => v.labels.sweep === 'worktree-lease')?.value ?? 0;

  it('goes on past a key whose log it cannot read: the other expired leases are released, the failure logged and counted', async () => {
    const broken = await shortLease('feature/sweep-unreadable');
    const fine = await shortLease('feature/sweep-fine');
    const streamId = streamIdOf(broken.worktreeKey);
    await world.db.query(
      `INSERT INTO events (event_id, stream_id, stream_version, type, schema_version, data, metadata, occurred_at)
       SELECT $1, stream_id, stream_version + 1, 'WorktreeLeaseHandedAcross', 1, '{}', '{}', now() FROM events
        WHERE stream_id = $2 ORDER BY stream_version DESC LIMIT 1`,
      [randomUUID(), streamId],
    );
    await eventually(() => Date.now() > Math.max(Date.parse(broken.expiresAt), Date.parse(fine.expiresAt)), { what: 'both leases ran out' });
    const failedBefore = await failures();

    const sweep = app.get(LeaseSweep);
    // Whatever order the pass takes the keys in, the broken one does not end it.
    expect(await sweep.sweep()).toBe(1);
    await eventually(async () => (await statusOf(fine)) === 'stale_released', { what: 'the fine key\'s lease expired' });
    expect(await statusOf(broken)).toBe('ready');
    expect((await failures()) - failedBefore).toBe(1);
    // Every pass tries it again and counts the try (logged when first found, then at growing intervals: worktree-sweep-faulty-log.spec.ts).
    expect(await sweep.sweep()).toBe(0);
    expect((await failures()) - failedBefore).toBe(2);
  });
});
