import { existsSync, mkdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import type { INestApplication } from '@nestjs/common';
import { acquireWorktree, deriveWorktreeKey, releaseWorktree } from '@gantry/contracts';
import { eventually } from '@gantry/testing';
import { plainGit as git } from '@gantry/git/testing';
import { acquireForClaimedJob, claimedJob, createWorld, startInProcess, type TestWorld } from './testing/world.js';

/*
 * An eviction asked for while its worktree was idle has the worktree until it is recorded
 * (docs/worktrees.md, "Eviction and the cap"). Its git work can fail and be retried later; a lease of
 * the key asked for meanwhile must not be handed the worktree that the retried eviction then removes.
 */
describe('an eviction under way and a new lease of its key (real git, PostgreSQL and NATS)', () => {
  let world: TestWorld;
  let app: INestApplication;
  let n = 0;

  beforeAll(async () => {
    world = await createWorld('wt-evict-order');
    app = await startInProcess(world, { GANTRY_WORKTREE_MAX_PER_REPOSITORY: '1' });
  });
  afterAll(async () => {
    await app?.close();
    await world?.close();
  });

  const release = (lease: { leaseId: string; token: number }) =>
    world.client.request(releaseWorktree, { ...lease, idempotencyKey: `release:${++n}` }, { timeoutMs: 30_000 });
  const eventsOf = async (type: string, field: string, value: string) =>
    (await world.db.query<{ position: string }>(`SELECT position FROM events WHERE type = $1 AND data->>$2 = $3 ORDER BY position`, [type, field, value])).rows.map((r) => Number(r.position));

  it('a lease asked for while the eviction of its worktree fails and is retried waits for it, and gets a worktree the eviction does not remove', async () => {
    const branch = 'feature/evicted-then-asked';
    const key = deriveWorktreeKey(world.git.origin, branch);
    const idle = await acquireForClaimedJob(world, branch);
    await release(idle);
    // Left by an agent: a `modules` directory in the worktree's git directory, for which `git worktree
    // remove` refuses the worktree ("containing submodules"). A status stays clean; a reuse and a sync work.
    const modules = git(idle.path, 'rev-parse', '--path-format=absolute', '--git-path', 'modules');
    mkdirSync(modules);

    // Another branch's new worktree puts the repository over its cap of one: the idle worktree is to go,
    // and its eviction fails (then is retried, 1 s, 2 s, 5 s … later).
    const other = await acquireForClaimedJob(world, 'feature/over-the-cap');
    await eventually(async () => (await eventsOf('WorktreeEvictionRequested', 'worktreeKey', key)).length === 1, { what: 'the eviction asked for' });

    const jobId = await claimedJob(world);
    const granting = world.client.request(
      acquireWorktree,
      { jobId, jobLeaseToken: 1, repositoryUrl: world.git.origin, branch, baseRef: 'main', leaseDurationMs: 600_000, lockTimeoutMs: 120_000, idempotencyKey: `acquire:${jobId}` },
      { timeoutMs: 180_000 },
    );
    const leaseOf = async () =>
      (await world.db.query<{ lease_id: string; status: string }>(`SELECT lease_id, status FROM worktree_leases WHERE job_id = $1`, [jobId])).rows[0] ?? null;
    // Either handed the worktree at once, or in line behind the eviction.
    await eventually(
      async () => {
        const lease = await leaseOf();
        if (!lease) return null;
        if (lease.status === 'ready') return lease;
        return (await eventsOf('WorktreeLockQueued', 'leaseId', lease.lease_id)).length > 0 ? lease : null;
      },
      { what: 'the new lease ready or in line' },
    );

    // The agent's leftover goes; the eviction's retry then removes the worktree.
    rmSync(modules, { recursive: true });
    const grant = await granting;
    await eventually(async () => (await eventsOf('WorktreeEvicted', 'worktreeKey', key)).length === 1, { what: 'the eviction recorded', timeoutMs: 90_000 });
    // The holder's worktree is there, and the eviction was over before the lease got the lock.
    expect(existsSync(path.join(grant.path, '.git'))).toBe(true);
    expect(git(grant.path, 'rev-parse', 'HEAD')).toBe(grant.baseSha);
    const [evicted] = await eventsOf('WorktreeEvicted', 'worktreeKey', key);
    const [granted] = await eventsOf('WorktreeLockAcquired', 'leaseId', grant.leaseId);
    expect(evicted).toBeLessThan(granted!);
    await release(grant);
    await release(other);
  });
});
