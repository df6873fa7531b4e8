import { acquireWorktree, deriveWorktreeKey, ErrorCode, releaseWorktree, renewWorktreeLease, type WorktreeLeaseGrant } from '@gantry/contracts';
import { claimedJob, createWorld, refusal, type TestWorld } from './testing/world.js';
import { startServiceProcess, type ServiceProcess } from './testing/process.js';
import { STREAM_PREFIX } from './lease-log.js';

/*
 * A worktree key's stream does not grow for ever (docs/worktrees.md, "Closing the books"): once its
 * stream is longer than GANTRY_WORKTREE_EPOCH_EVENTS, its books are closed and the key goes on in
 * the next epoch's stream. Fencing tokens keep growing across epochs, an ended
 * lease of a closed epoch is still refused as stale, and a SIGKILL changes none of it.
 */
describe('closing the books of a worktree key (a real process)', () => {
  const EPOCH_EVENTS = 12;
  let world: TestWorld;
  let service: ServiceProcess | null = null;
  let n = 0;

  beforeAll(async () => {
    world = await createWorld('wt-books');
  });
  afterEach(async () => {
    await service?.kill('SIGKILL');
    service = null;
  });
  afterAll(async () => {
    await world?.close();
  });

  const branch = 'feature/many-leases';
  const key = () => deriveWorktreeKey(world.git.origin, branch);
  const requestFor = (jobId: string) => ({
    jobId,
    jobLeaseToken: 1,
    repositoryUrl: world.git.origin,
    branch,
    baseRef: 'main',
    leaseDurationMs: 600_000,
    idempotencyKey: `acquire:${jobId}`,
  });
  const acquire = async (jobId: string) => world.client.request(acquireWorktree, requestFor(jobId), { timeoutMs: 60_000 });
  const release = (grant: WorktreeLeaseGrant) =>
    world.client.request(releaseWorktree, { leaseId: grant.leaseId, token: grant.token, idempotencyKey: `release:${++n}` }, { timeoutMs: 30_000 });
  const streams = async () =>
    (
      await world.db.query<{ stream_id: string; events: number; last: string }>(
        `SELECT stream_id, count(*)::int AS events, (array_agg(type ORDER BY stream_version DESC))[1] AS last
           FROM events WHERE stream_id = $1 OR starts_with(stream_id, $2) GROUP BY stream_id ORDER BY min(position)`,
        [`${STREAM_PREFIX}${key()}`, `${STREAM_PREFIX}${key()}~`],
      )
    ).rows;

  it('leases of one key over many epochs: each stream bounded, tokens growing, old leases stale, across a SIGKILL', async () => {
    service = await startServiceProcess(world, { GANTRY_WORKTREE_EPOCH_EVENTS: String(EPOCH_EVENTS) });
    const grants: WorktreeLeaseGrant[] = [];
    const jobs: string[] = [];
    for (let i = 0; i < 8; i++) {
      const jobId = await claimedJob(world);
      jobs.push(jobId);
      const grant = await acquire(jobId);
      grants.push(grant);
      await release(grant);
    }
    expect(grants.map((g) => g.token)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    expect(new Set(grants.map((g) => g.path)).size).toBe(1);

    const epochs = await streams();
    expect(epochs.length).toBeGreaterThanOrEqual(3);
    for (const closed of epochs.slice(0, -1)) {
      expect(closed).toMatchObject({ last: 'WorktreeBooksClosed' });
      // Closed right after the decision that went past the limit.
      expect(closed.events).toBeLessThanOrEqual(EPOCH_EVENTS + 8);
    }
    expect(epochs.at(-1)!.events).toBeLessThanOrEqual(EPOCH_EVENTS + 8);
    const open = (await world.db.query(`SELECT epoch FROM worktree_epochs WHERE worktree_key = $1`, [key()])).rows[0];
    expect(open.epoch).toBe(epochs.length - 1);

    // The first lease's events lie in a closed epoch: its token is still refused as stale, and nothing is written.
    const before = await world.count(`SELECT count(*) AS n FROM events`);
    const first = grants[0]!;
    expect((await refusal(world.client.request(renewWorktreeLease, { leaseId: first.leaseId, token: first.token, idempotencyKey: `renew:${++n}` }))).code).toBe(
      ErrorCode.STALE_FENCE,
    );
    expect((await refusal(release(first))).code).toBe(ErrorCode.STALE_FENCE);
    // Its acquire asked again after its receipt was pruned is that same ended lease, not a new one.
    await world.db.query(`DELETE FROM idempotency_receipts WHERE key LIKE $1`, [`%acquire:${jobs[0]}%`]);
    expect((await refusal(acquire(jobs[0]!))).code).toBe(ErrorCode.STALE_FENCE);
    expect((await refusal(world.client.request(acquireWorktree, { ...requestFor(jobs[0]!), baseRef: grants[0]!.baseSha }, { timeoutMs: 60_000 }))).code).toBe(
      ErrorCode.IDEMPOTENCY_CONFLICT,
    );
    expect(await world.count(`SELECT count(*) AS n FROM events`)).toBe(before);

    // Killed while a lease of the open epoch is held: after the restart it is still held, and the next grant gets the next token.
    const held = await acquire(await claimedJob(world));
    expect(held.token).toBe(9);
    await service.kill('SIGKILL');
    service = await startServiceProcess(world, { GANTRY_WORKTREE_EPOCH_EVENTS: String(EPOCH_EVENTS) });
    expect((await world.db.query(`SELECT status FROM worktree_leases WHERE lease_id = $1`, [held.leaseId])).rows[0].status).toBe('ready');
    await release(held);
    const after = await acquire(await claimedJob(world));
    expect(after.token).toBe(10);
    await release(after);
  }, 120_000);
});
