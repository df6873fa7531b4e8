import { existsSync, mkdtempSync, readdirSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import {
  acquireWorktree,
  deriveIdempotencyKey,
  JobClaimed,
  JobFinished,
  jobExampleIds,
  releaseWorktree,
  streamName,
  type WorktreeLeaseGrant,
} from '@gantry/contracts';
import { eventually, testDatabaseUrl } from '@gantry/testing';
import { plainGit as git } from '@gantry/git/testing';
import { JOBS_CONSUMER } from './job-lifecycle.js';
import { claimedJob, createWorld, newJobId, type TestWorld } from './testing/world.js';
import { startServiceProcess, type ServiceProcess } from './testing/process.js';

/*
 * The worktree service as a real process across restarts (docs/worktrees.md): where its root lies
 * by default, an eviction cut short by SIGKILL, a worktree directory that vanished while it was
 * down, and readiness after SIGKILL while it held job events it had not acknowledged.
 */
describe('the worktree service across restarts (a real process)', () => {
  let world: TestWorld;
  let service: ServiceProcess | null = null;
  let n = 0;

  beforeAll(async () => {
    world = await createWorld('wt-restart');
  });
  afterEach(async () => {
    await service?.kill('SIGKILL');
    service = null;
  });
  afterAll(async () => {
    await world?.close();
  });

  const acquire = (jobId: string, branch: string, timeoutMs = 60_000) =>
    world.client.request(
      acquireWorktree,
      {
        jobId,
        jobLeaseToken: 1,
        repositoryUrl: world.git.origin,
        branch,
        baseRef: 'main',
        leaseDurationMs: 600_000,
        idempotencyKey: deriveIdempotencyKey('test/acquire', { jobId, branch }),
      },
      { timeoutMs },
    );
  const release = (grant: WorktreeLeaseGrant) =>
    world.client.request(releaseWorktree, { leaseId: grant.leaseId, token: grant.token, idempotencyKey: `release:${++n}` }, { timeoutMs: 30_000 });
  const eventsOf = async (type: string, worktreeKey: string) =>
    (await world.db.query(`SELECT data FROM events WHERE type = $1 AND data->>'worktreeKey' = $2 ORDER BY position`, [type, worktreeKey])).rows.map(
      (r) => r.data as Record<string, unknown>,
    );
  const worktreeRow = async (worktreeKey: string) => (await world.db.query(`SELECT * FROM worktrees WHERE worktree_key = $1`, [worktreeKey])).rows[0];
  const registered = () => {
    const clones = readdirSync(path.join(world.root, 'repos'));
    return git(world.git.dir, '--git-dir', path.join(world.root, 'repos', clones[0]!), 'worktree', 'list', '--porcelain');
  };

  describe('its worktree root', () => {
    // A world of its own: a worktree made under another root must not count in the other tests' cap.
    let rootWorld: TestWorld;
    beforeAll(async () => {
      rootWorld = await createWorld('wt-root');
    });
    afterAll(async () => {
      await rootWorld?.close();
    });

    it('by default lies outside any git repository, even when started inside a project checkout', async () => {
      const world = rootWorld;
      const acquire = (jobId: string, branch: string) =>
        world.client.request(
          acquireWorktree,
          { jobId, jobLeaseToken: 1, repositoryUrl: world.git.origin, branch, baseRef: 'main', leaseDurationMs: 600_000, idempotencyKey: `acquire:${jobId}` },
          { timeoutMs: 60_000 },
        );
      const home = realpathSync(mkdtempSync(path.join(tmpdir(), 'gantry-home-')));
      try {
        // Started in a checkout (the seed clone), without GANTRY_WORKTREE_ROOT.
        service = await startServiceProcess(world, { GANTRY_WORKTREE_ROOT: '', XDG_STATE_HOME: '', HOME: home }, true, { cwd: world.git.seed });
        const grant = await acquire(await claimedJob(world), 'feature/default-root');
        const root = path.join(home, '.local', 'state', 'gantry', 'worktrees');
        expect(grant.path).toBe(path.join(root, 'worktrees', grant.worktreeKey));
        expect(existsSync(path.join(world.git.seed, '.gantry'))).toBe(false);
        // git finds no repository around the root: a process left in a removed worktree cannot reach one.
        expect(() => git(root, 'rev-parse', '--absolute-git-dir')).toThrow(/not a git repository/);
        await world.client.request(releaseWorktree, { leaseId: grant.leaseId, token: grant.token, idempotencyKey: `release:${grant.leaseId}` }, { timeoutMs: 30_000 });
      } finally {
        await service?.kill('SIGKILL');
        service = null;
        rmSync(home, { recursive: true, force: true });
      }
    });

    it('refuses to start on a root inside a git repository, naming it', async () => {
      const world = rootWorld;
      const inside = path.join(world.git.seed, 'nested', 'worktrees');
      service = await startServiceProcess(world, { GANTRY_WORKTREE_ROOT: inside }, false);
      const code = await new Promise<number | null>((resolve) => service!.process.once('exit', (exitCode) => resolve(exitCode)));
      expect(code).toBe(1);
      expect(service.output()).toContain(`is inside the git repository ${realpathSync(world.git.seed)}/.git`);
      expect(existsSync(path.join(inside, 'repos'))).toBe(false);
      service = null;
    });
  });

  it('an eviction killed after its git work completes at the restart, naming the rescue it made, and is never asked for again', async () => {
    const cap = { GANTRY_WORKTREE_MAX_PER_REPOSITORY: '1' };
    service = await startServiceProcess(world, cap);
    const first = await acquire(await claimedJob(world), 'feature/evict-first');
    await release(first);
    await service.kill('SIGTERM');
    // Written into the idle worktree after its release: the eviction rescues it.
    writeFileSync(path.join(first.path, 'late.txt'), 'written after the release\n');

    // The second worktree puts the repository over its cap of 1: the first, idle, is evicted — and
    // the service dies between `git worktree remove` and the report.
    service = await startServiceProcess(world, { ...cap, GANTRY_TEST_KILL_AFTER_GIT: 'evict' });
    const secondJob = await claimedJob(world);
    void acquire(secondJob, 'feature/evict-second', 15_000).catch(() => undefined);
    const signal = await new Promise<string | null>((resolve) => service!.process.once('exit', (_code, sig) => resolve(sig)));
    expect(signal).toBe('SIGKILL');
    expect(existsSync(first.path)).toBe(false);
    expect(await eventsOf('WorktreeEvictionRequested', first.worktreeKey)).toHaveLength(1);
    expect(await eventsOf('WorktreeEvicted', first.worktreeKey)).toHaveLength(0);

    service = await startServiceProcess(world, cap);
    const evicted = await eventually(async () => (await eventsOf('WorktreeEvicted', first.worktreeKey))[0], { what: 'the eviction recorded', timeoutMs: 20_000 });
    expect(evicted).toMatchObject({ removed: true, rescueBranch: expect.stringContaining(`gantry/rescue/${first.worktreeKey}/`) });
    const clone = path.join(world.root, 'repos', readdirSync(path.join(world.root, 'repos'))[0]!);
    expect(git(world.git.dir, '--git-dir', clone, 'show', `${evicted.rescueBranch as string}:late.txt`)).toBe('written after the release');
    expect(await worktreeRow(first.worktreeKey)).toBeUndefined();
    const second = await acquire(secondJob, 'feature/evict-second');
    await release(second);

    // The next new worktree evicts the second one, the only idle worktree left; the first is not picked again.
    const third = await acquire(await claimedJob(world), 'feature/evict-third');
    await eventually(async () => (await eventsOf('WorktreeEvicted', second.worktreeKey)).length === 1, { what: 'the second worktree evicted', timeoutMs: 20_000 });
    expect(await eventsOf('WorktreeEvictionRequested', first.worktreeKey)).toHaveLength(1);
    expect((await world.db.query(`SELECT worktree_key FROM worktrees WHERE repository_url = $1`, [world.git.origin])).rows.map((r) => r.worktree_key)).toEqual([third.worktreeKey]);
    await release(third);
  }, 180_000);

  it('a worktree directory deleted while the service was down: reconciliation prunes it and completes its record', async () => {
    service = await startServiceProcess(world);
    const grant = await acquire(await claimedJob(world), 'feature/vanished-idle');
    await release(grant);
    await service.kill('SIGKILL');
    rmSync(grant.path, { recursive: true, force: true });

    service = await startServiceProcess(world);
    const requested = await eventually(async () => (await eventsOf('WorktreeEvictionRequested', grant.worktreeKey))[0], { what: 'the eviction asked for', timeoutMs: 20_000 });
    expect(requested).toMatchObject({ reason: 'missing' });
    await eventually(async () => (await eventsOf('WorktreeEvicted', grant.worktreeKey)).length === 1, { what: 'the eviction recorded', timeoutMs: 20_000 });
    expect(await eventsOf('WorktreeEvicted', grant.worktreeKey)).toEqual([expect.objectContaining({ removed: true })]);
    expect(await worktreeRow(grant.worktreeKey)).toBeUndefined();
    expect(registered()).not.toContain(grant.path);
    // The key is leased again as any new one.
    const again = await acquire(await claimedJob(world), 'feature/vanished-idle');
    expect(existsSync(again.path)).toBe(true);
    await release(again);
  });

  it('after SIGKILL with job events taken and not acknowledged, it is ready before they come back, and handles them when they do', async () => {
    service = await startServiceProcess(world);
    const jobId = await claimedJob(world);
    const grant = await acquire(jobId, 'feature/held-events');
    const stream = streamName(world.naming, 'jobs');
    const consumerInfo = () => world.bus.jsm.consumers.info(stream, JOBS_CONSUMER);
    await eventually(async () => (await consumerInfo()).num_ack_pending === 0, { what: 'the consumer caught up' });

    // Hold the service's consumer inside its first handler (a lock its write waits for) while it
    // takes the next events from the stream; then kill it with all of them unacknowledged.
    const blocker = new pg.Client({ connectionString: testDatabaseUrl, options: `-c search_path=${world.name}` });
    await blocker.connect();
    try {
      await blocker.query('BEGIN');
      await blocker.query('LOCK TABLE job_statuses IN EXCLUSIVE MODE');
      await world.publishJobEvent('JobFinished', jobId, { ...JobFinished.examples.valid[0], jobId, leaseToken: 1 });
      const others = [newJobId(), newJobId(), newJobId()];
      for (const other of others) await world.publishJobEvent('JobClaimed', other, { ...JobClaimed.examples.valid[0], jobId: other, leaseToken: 1, runnerId: jobExampleIds.runnerId });
      await eventually(
        async () => {
          const info = await consumerInfo();
          return info.num_pending === 0 && info.num_ack_pending === 4;
        },
        { what: 'all four events taken by the service and none acknowledged' },
      );
      await service.kill('SIGKILL');
      service = null;
    } finally {
      await blocker.query('ROLLBACK').catch(() => undefined);
      await blocker.end();
    }

    service = await startServiceProcess(world);
    const ready = (await (await fetch(`${service.url}/ready`)).json()) as { details: Record<string, { status: string; jobEvents?: { unacknowledged: number } }> };
    // Ready while the dead process's events are still held (their ack wait has not run out) …
    expect(ready.details['worktree-recovery']).toMatchObject({ status: 'up' });
    expect(ready.details['worktree-recovery']!.jobEvents!.unacknowledged).toBeGreaterThan(0);
    expect((await consumerInfo()).num_ack_pending).toBeGreaterThan(0);
    expect(service.output()).not.toContain('did not catch up in time');
    expect((await world.db.query(`SELECT status FROM worktree_leases WHERE lease_id = $1`, [grant.leaseId])).rows[0].status).toBe('ready');

    // … and nothing is lost: when they come back, the finish releases the lease.
    await eventually(async () => (await world.db.query(`SELECT status FROM worktree_leases WHERE lease_id = $1`, [grant.leaseId])).rows[0].status === 'released', {
      what: 'the lease released by the redelivered JobFinished',
      timeoutMs: 60_000,
      intervalMs: 250,
    });
    expect(await world.count(`SELECT count(*) AS n FROM job_statuses WHERE job_id = $1 AND status = 'DONE'`, [jobId])).toBe(1);
    expect(await world.count(`SELECT count(*) AS n FROM job_statuses WHERE status = 'CLAIMED'`)).toBeGreaterThanOrEqual(3);
  }, 120_000);

  it('a lease that ran out while the service served is not resumed by the next start: its sweep had seen it run out, and the next one expires it', async () => {
    service = await startServiceProcess(world, { GANTRY_TEST_HOLD_AT: 'worktree-sweep:lease-due' });
    const jobId = await claimedJob(world);
    const grant = await world.client.request(
      acquireWorktree,
      { jobId, jobLeaseToken: 1, repositoryUrl: world.git.origin, branch: 'feature/ran-out-while-served', baseRef: 'main', leaseDurationMs: 1_000, idempotencyKey: `acquire:${++n}` },
      { timeoutMs: 60_000 },
    );
    // Its holder renews no more; a sweep of the serving process finds it run out, and the process dies before it expires it.
    await eventually(() => service!.output().includes('"testHold":"worktree-sweep:lease-due"'), { what: 'the sweep about to expire the lease', timeoutMs: 30_000 });
    await service.kill('SIGKILL');
    service = null;

    service = await startServiceProcess(world);
    await eventually(async () => (await eventsOf('WorktreeLeaseExpired', grant.worktreeKey)).length === 1, { what: 'the lease expired', timeoutMs: 30_000 });
    // Expired at the end it was granted, not resumed for as long again from the start.
    expect(await eventsOf('WorktreeLeaseExpired', grant.worktreeKey)).toEqual([expect.objectContaining({ leaseId: grant.leaseId, expiresAt: grant.expiresAt })]);
    expect(await eventsOf('WorktreeLeaseRenewed', grant.worktreeKey)).toEqual([]);
  }, 120_000);
});
