import { randomUUID } from 'node:crypto';
import type { INestApplication } from '@nestjs/common';
import { acquireWorktree, renewWorktreeLease } from '@gantry/contracts';
import { Bus } from '@gantry/messaging';
import { CutOff, eventually, testNatsUrl, type CuttableProxy } from '@gantry/testing';
import { claimedJob, createWorld, startInProcess, type TestWorld } from './testing/world.js';

/** A worktree service in this process whose bus goes through a proxy the test cuts. */
const worktreeServiceCutOff = (label: string, env: Record<string, string> = {}) =>
  CutOff.start(testNatsUrl, async (natsUrl, onClose) => {
    const world = await createWorld(label);
    onClose(() => world.close());
    const app = await startInProcess(world, { GANTRY_NATS_URL: natsUrl, ...env });
    onClose(() => app.close());
    return { world, app };
  });

/**
 * The worktree service cut off from NATS while its PostgreSQL and its disk are fine (docs/worktrees.md,
 * "When a lease ends"): its bus goes through a proxy the test cuts. The holder (this test's client,
 * on NATS directly) cannot reach a worktree service meanwhile — its renewals find nobody serving —
 * so that time does not count against the lease, although the service still runs its sweep.
 */
describe('a worktree service cut off from NATS for longer than a lease (real git, PostgreSQL and NATS)', () => {
  let cut: CutOff<{ world: TestWorld; app: INestApplication }> | undefined;
  let proxy: CuttableProxy;
  let world: TestWorld;
  let app: INestApplication | undefined;

  beforeAll(async () => {
    cut = await worktreeServiceCutOff('wt-bus-cut');
    ({ proxy, started: { world, app } } = cut);
  });
  afterAll(() => cut?.close());

  it('expires no lease while its bus is down and resumes the held ones when it is back: the holder\'s renewal is obeyed, the worktree stays its', async () => {
    const grant = await world.client.request(
      acquireWorktree,
      { jobId: await claimedJob(world), jobLeaseToken: 1, repositoryUrl: world.git.origin, branch: 'feature/bus-cut', baseRef: 'main', leaseDurationMs: 5000, idempotencyKey: `acquire:${randomUUID()}` },
      { timeoutMs: 60_000 },
    );
    const bus = app!.get(Bus);
    proxy.cut();
    await eventually(() => !bus.connected, { what: 'the worktree service seeing its bus gone', timeoutMs: 30_000 });
    // Cut off until well past the lease's expiry, its sweep running every 200 ms all along.
    await eventually(() => Date.now() > Date.parse(grant.expiresAt) + 3000, { what: 'the lease expiry passed while cut off', timeoutMs: 30_000 });
    const status = async () => (await world.db.query<{ status: string }>(`SELECT status FROM worktree_leases WHERE lease_id = $1`, [grant.leaseId])).rows[0]!.status;
    expect(await status()).toBe('ready');
    proxy.restore();

    const renewed = await world.client.request(
      renewWorktreeLease,
      { leaseId: grant.leaseId, token: grant.token, idempotencyKey: `renew:${randomUUID()}` },
      { retryUntil: Date.now() + 60_000 },
    );
    expect(Date.parse(renewed.expiresAt)).toBeGreaterThan(Date.now());
    expect(await status()).toBe('ready');
    const resumed = await world.count(
      `SELECT count(*) AS n FROM events WHERE stream_id = $1 AND type = 'WorktreeLeaseRenewed' AND (data->>'resumedAfterBusLoss')::boolean`,
      [`worktree-${grant.worktreeKey}`],
    );
    expect(resumed).toBe(1);
  }, 120_000);
});

/**
 * The holder's renewal, asked again through the outage, reaches the worktree service as soon as NATS
 * gives it its subscriptions back, which can be before its next sweep: here there is none for an hour.
 * The renewal waits for the held leases' resumption instead of judging a lease that ran out during
 * the outage (docs/worktrees.md, "When a lease ends").
 */
describe('a holder\'s renewal that reaches the worktree service before its sweep, once its bus is back', () => {
  let cut: CutOff<{ world: TestWorld; app: INestApplication }> | undefined;
  let proxy: CuttableProxy;
  let world: TestWorld;
  let app: INestApplication | undefined;

  beforeAll(async () => {
    cut = await worktreeServiceCutOff('wt-bus-first', { GANTRY_WORKTREE_SWEEP_INTERVAL_MS: '3600000' });
    ({ proxy, started: { world, app } } = cut);
  });
  afterAll(() => cut?.close());

  it('is judged under the resumed lease: obeyed, the leases resumed once', async () => {
    const grant = await world.client.request(
      acquireWorktree,
      { jobId: await claimedJob(world), jobLeaseToken: 1, repositoryUrl: world.git.origin, branch: 'feature/bus-first', baseRef: 'main', leaseDurationMs: 5000, idempotencyKey: `acquire:${randomUUID()}` },
      { timeoutMs: 60_000 },
    );
    const bus = app!.get(Bus);
    proxy.cut();
    await eventually(() => !bus.connected, { what: 'the worktree service seeing its bus gone', timeoutMs: 30_000 });
    await eventually(() => Date.now() > Date.parse(grant.expiresAt) + 1000, { what: 'the lease expiry passed while cut off', timeoutMs: 30_000 });
    proxy.restore();
    await eventually(() => bus.connected, { what: 'the worktree service back on its bus', timeoutMs: 60_000 });

    const renewal = { leaseId: grant.leaseId, token: grant.token };
    const [first, second] = await Promise.all([
      world.client.request(renewWorktreeLease, { ...renewal, idempotencyKey: `renew:${randomUUID()}` }, { retryUntil: Date.now() + 60_000 }),
      world.client.request(renewWorktreeLease, { ...renewal, idempotencyKey: `renew:${randomUUID()}` }, { retryUntil: Date.now() + 60_000 }),
    ]);
    for (const renewed of [first, second]) expect(Date.parse(renewed.expiresAt)).toBeGreaterThan(Date.now());
    const resumed = await world.count(
      `SELECT count(*) AS n FROM events WHERE stream_id = $1 AND type = 'WorktreeLeaseRenewed' AND (data->>'resumedAfterBusLoss')::boolean`,
      [`worktree-${grant.worktreeKey}`],
    );
    expect(resumed).toBe(1);
    expect((await world.db.query<{ status: string }>(`SELECT status FROM worktree_leases WHERE lease_id = $1`, [grant.leaseId])).rows[0]!.status).toBe('ready');
  }, 120_000);
});
