import { existsSync, readdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { INestApplication } from '@nestjs/common';
import {
  commandSubject,
  getDiskUsage,
  listWorktreeLeases,
  listWorktrees,
  releaseWorktree,
} from '@gantry/contracts';
import { EventStore } from '@gantry/eventstore';
import { Readiness } from '@gantry/service-runtime';
import { eventually } from '@gantry/testing';
import { plainGit as git, snapshotTree } from '@gantry/git/testing';
import { acquireForClaimedJob, createWorld, startInProcess, type TestWorld } from './testing/world.js';

describe('worktree hygiene, queries and hostile input (real git, PostgreSQL and NATS)', () => {
  let world: TestWorld;
  let app: INestApplication;
  let n = 0;

  beforeAll(async () => {
    world = await createWorld('wt-hygiene');
    app = await startInProcess(world, { GANTRY_WORKTREE_MAX_PER_REPOSITORY: '2' });
  });
  afterAll(async () => {
    await app?.close();
    await world?.close();
  });

  const acquire = (branch: string) => acquireForClaimedJob(world, branch);
  const release = (lease: { leaseId: string; token: number }) =>
    world.client.request(releaseWorktree, { ...lease, idempotencyKey: `release:${++n}` }, { timeoutMs: 30_000 });

  it('refuses hostile input on the command path with INVALID_COMMAND and touches nothing on disk', async () => {
    const warmup = await acquire('feature/warmup');
    await release(warmup);
    const before = snapshotTree(world.root);
    const valid = { jobId: 'job-0f1e2d3c-4b5a-4968-8776-655443322110', jobLeaseToken: 1, repositoryUrl: world.git.origin, branch: 'feature/x', baseRef: 'main', leaseDurationMs: 600_000, idempotencyKey: 'hostile' };
    const hostile: Array<[string, unknown]> = [
      ['acquire_worktree', { ...valid, branch: '--upload-pack=touch /tmp/pwned' }],
      ['acquire_worktree', { ...valid, branch: '-x' }],
      ['acquire_worktree', { ...valid, branch: '../../etc' }],
      ['acquire_worktree', { ...valid, branch: 'a..b' }],
      ['acquire_worktree', { ...valid, baseRef: '--output=/tmp/pwned' }],
      ['acquire_worktree', { ...valid, repositoryUrl: 'ext::sh -c touch% /tmp/pwned' }],
      ['acquire_worktree', { ...valid, repositoryUrl: `${world.git.origin}/../../../etc` }],
      ['acquire_worktree', { ...valid, repositoryUrl: 'file:///../../etc' }],
      ['list_worktree_leases', { worktreeKey: '../../etc' }],
      ['list_worktrees', { repositoryUrl: 'ext::sh -c touch% /tmp/pwned' }],
      ['get_disk_usage', { path: '/etc' }],
    ];
    for (const [command, body] of hostile) {
      const reply = (await world.bus.nc.request(commandSubject(world.naming, 'worktrees', command), JSON.stringify(body), { timeout: 10_000 })).json<{
        ok: boolean;
        error?: { code: string };
      }>();
      expect({ command, body, ok: reply.ok, code: reply.error?.code }).toEqual({ command, body, ok: false, code: 'INVALID_COMMAND' });
    }
    expect(snapshotTree(world.root)).toEqual(before);
    expect(existsSync('/tmp/pwned')).toBe(false);
    expect(await world.count(`SELECT count(*) AS n FROM worktree_leases WHERE branch NOT IN ('feature/warmup')`)).toBe(0);
  });

  it('keeps at most the cap of worktrees per repository, removing the least recently used idle one after rescuing it', async () => {
    // The service's clock (its event store's) is this test's: each use is a second after the one before.
    const store = app.get(EventStore) as { clock: () => Date };
    const serviceClock = store.clock;
    let now = Date.now();
    store.clock = () => new Date(now);
    const aSecondLater = () => (now += 1000);
    try {
      const first = await acquire('feature/lru-1');
      writeFileSync(path.join(first.path, 'unsaved.txt'), 'work left in an idle worktree\n');
      // A release keeps the worktree (clean) for the next lease of its branch; make it dirty again as a crash could.
      await release(first);
      writeFileSync(path.join(first.path, 'unsaved.txt'), 'dirty again after the release\n');
      aSecondLater();
      const second = await acquire('feature/lru-2');
      await release(second);
      aSecondLater();
      // feature/warmup (from the test before) is the oldest, then lru-1: with a cap of 2, a third new worktree evicts both.
      const third = await acquire('feature/lru-3');
      // The git work comes first and its report (WorktreeEvicted) after it: wait for the report, then look at the disk.
      const rows = await eventually(
        async () => {
          const found = await world.db.query(`SELECT data FROM events WHERE type = 'WorktreeEvicted' AND data->>'worktreeKey' = $1`, [first.worktreeKey]);
          return found.rows.length > 0 ? found.rows : null;
        },
        { what: 'least recently used worktree evicted' },
      );
      expect(rows).toHaveLength(1);
      expect(existsSync(first.path)).toBe(false);
      expect(existsSync(second.path)).toBe(true);
      expect(existsSync(third.path)).toBe(true);
      const rescueBranch = rows[0].data.rescueBranch as string;
      expect(git(world.git.dir, '--git-dir', path.join(world.root, 'repos', readdirSync(path.join(world.root, 'repos'))[0]!), 'show', `${rescueBranch}:unsaved.txt`)).toBe('dirty again after the release');
      const onDisk = (await world.client.request(listWorktrees, {})).worktrees.map((w) => w.worktreeKey).sort();
      expect(onDisk).toEqual([second.worktreeKey, third.worktreeKey].sort());
      const held = (await world.client.request(listWorktrees, { repositoryUrl: world.git.origin })).worktrees.find((w) => w.worktreeKey === third.worktreeKey);
      expect(held).toMatchObject({ heldBy: third.leaseId, dirty: false, prunable: false, branch: 'feature/lru-3', headSha: third.baseSha });
      await release(third);
      // A held worktree is never evicted: the next acquire of lru-1 creates it again and evicts an idle one.
      const again = await acquire('feature/lru-1');
      expect(existsSync(again.path)).toBe(true);
      await release(again);
    } finally {
      store.clock = serviceClock;
    }
  });

  it('reports disk use by query and on /ready', async () => {
    const usage = await world.client.request(getDiskUsage, {});
    expect(usage.root).toBe(world.root);
    expect(usage.totalBytes).toBeGreaterThan(0);
    expect(usage.repositories).toHaveLength(1);
    expect(usage.worktrees.length).toBeGreaterThan(0);
    const report = await app.get(Readiness).evaluate();
    expect(report.details.disk).toMatchObject({ status: 'up', root: world.root });
    expect(report.details.disk!.totalBytes).toBeGreaterThan(0);
  });

  it('lists leases filtered by job and status', async () => {
    const lease = await acquire('feature/list');
    const { rows } = await world.db.query(`SELECT job_id FROM worktree_leases WHERE lease_id = $1`, [lease.leaseId]);
    const mine = await world.client.request(listWorktreeLeases, { jobId: rows[0].job_id });
    expect(mine.leases.map((l) => [l.leaseId, l.status, l.token, l.path])).toEqual([[lease.leaseId, 'ready', lease.token, lease.path]]);
    const ready = await world.client.request(listWorktreeLeases, { statuses: ['ready'] });
    expect(ready.leases.map((l) => l.leaseId)).toEqual([lease.leaseId]);
    await release(lease);
  });
});
