import { existsSync, mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { acquireWorktree, deriveIdempotencyKey, deriveWorktreeKey, GantryError, releaseWorktree, type WorktreeLeaseGrant } from '@gantry/contracts';
import { eventually } from '@gantry/testing';
import { plainGit as git } from '@gantry/git/testing';
import { claimedJob, createWorld, newJobId, type TestWorld } from './testing/world.js';
import { startServiceProcess, type ServiceProcess } from './testing/process.js';

/*
 * The service as a process (compiled dist/), killed with SIGKILL between an effect's git work and
 * its report — the test-only GANTRY_TEST_KILL_AFTER_GIT hook — then restarted: leases and disk must
 * agree and the next acquire must work.
 */
describe('the worktree service killed and restarted (a real process)', () => {
  let world: TestWorld;
  let service: ServiceProcess | null = null;
  let n = 0;

  beforeAll(async () => {
    world = await createWorld('wt-crash');
  });
  afterEach(async () => {
    await service?.kill('SIGKILL');
    service = null;
  });
  afterAll(async () => {
    await world?.close();
  });

  const request = (jobId: string, branch: string) => ({
    jobId,
    jobLeaseToken: 1,
    repositoryUrl: world.git.origin,
    branch,
    baseRef: 'main',
    leaseDurationMs: 600_000,
    idempotencyKey: deriveIdempotencyKey('test/acquire', { jobId, branch }),
  });
  const acquire = (jobId: string, branch: string, timeoutMs = 60_000) => world.client.request(acquireWorktree, request(jobId, branch), { timeoutMs });
  const release = (grant: WorktreeLeaseGrant) => world.client.request(releaseWorktree, { leaseId: grant.leaseId, token: grant.token, idempotencyKey: `release:${++n}` }, { timeoutMs: 30_000 });
  const leaseRow = async (leaseId: string) => (await world.db.query(`SELECT * FROM worktree_leases WHERE lease_id = $1`, [leaseId])).rows[0];
  const registered = () => {
    const clones = readdirSync(path.join(world.root, 'repos'));
    return git(world.git.dir, '--git-dir', path.join(world.root, 'repos', clones[0]!), 'worktree', 'list', '--porcelain');
  };

  async function killedDuring(effect: 'create_or_reuse' | 'sync', jobId: string, branch: string): Promise<void> {
    service = await startServiceProcess(world, { GANTRY_TEST_KILL_AFTER_GIT: effect });
    let answer: string | null = null;
    void acquire(jobId, branch, 15_000).then(
      () => (answer = 'answered'),
      (error: unknown) => (answer = error instanceof GantryError ? error.code : String(error)),
    );
    const exit = await new Promise<string | null>((resolve) => service!.process.once('exit', (_code, signal) => resolve(signal)));
    expect(exit).toBe('SIGKILL');
    // The caller never got a grant: it will ask again with the same idempotency key.
    expect(answer).toBeNull();
    service = null;
  }

  function expectDiskAgrees(grant: WorktreeLeaseGrant, branch: string, sha: string) {
    expect(existsSync(grant.path)).toBe(true);
    expect(git(grant.path, 'symbolic-ref', 'HEAD')).toBe(`refs/heads/${branch}`);
    expect(git(grant.path, 'rev-parse', 'HEAD')).toBe(sha);
    const list = registered();
    expect(list).toContain(`worktree ${grant.path}`);
    expect(list).not.toContain('prunable');
    expect(readdirSync(path.join(world.root, 'worktrees'))).toEqual(expect.arrayContaining([grant.worktreeKey]));
  }

  it('killed in the middle of a create: after a restart the lease is ready on the worktree git made, and the next acquire works', async () => {
    const branch = 'feature/crash-create';
    const key = deriveWorktreeKey(world.git.origin, branch);
    // Claimed while the service is down: it learns of the claim from the jobs stream when it starts.
    const jobId = newJobId();
    await world.claimJob(jobId);
    await killedDuring('create_or_reuse', jobId, branch);
    // git made the worktree, the log never heard of it.
    expect(registered()).toContain(path.join(world.root, 'worktrees', key));
    const { rows } = await world.db.query(`SELECT status FROM worktree_leases WHERE worktree_key = $1`, [key]);
    expect(rows.map((r) => r.status)).toEqual(['creating_or_reusing']);

    service = await startServiceProcess(world);
    const grant = await acquire(jobId, branch);
    expect(await leaseRow(grant.leaseId)).toMatchObject({ status: 'ready', path: grant.path, base_sha: grant.baseSha });
    expectDiskAgrees(grant, branch, git(world.git.seed, 'rev-parse', 'main'));
    expect(await world.count(`SELECT count(*) AS n FROM events WHERE type = 'WorktreeReused' AND data->>'leaseId' = $1`, [grant.leaseId])).toBe(1);

    await release(grant);
    const next = await acquire(await claimedJob(world), branch);
    expect(next.token).toBe(grant.token + 1);
    expectDiskAgrees(next, branch, grant.baseSha);
    await release(next);
  }, 180_000);

  it('killed in the middle of a sync: after a restart the sync fetches again and completes once, names the rescue of the commits it dropped, and the next acquire works', async () => {
    const branch = 'feature/crash-sync';
    service = await startServiceProcess(world);
    const first = await acquire(await claimedJob(world), branch);
    await release(first);
    await service.kill('SIGTERM');
    service = null;
    // A commit left on the branch in the idle worktree, never pushed: the sync keeps it on a rescue branch and resets.
    writeFileSync(path.join(first.path, 'left.txt'), 'committed, never pushed\n');
    git(first.path, 'add', 'left.txt');
    git(first.path, '-c', 'user.name=Agent', '-c', 'user.email=agent@example.invalid', 'commit', '-q', '-m', 'left behind');
    const left = git(first.path, 'rev-parse', 'HEAD');
    const newer = world.git.pushCommit('main', { 'app.txt': 'v2\n' }, 'move main on');

    const jobId = newJobId();
    await world.claimJob(jobId);
    await killedDuring('sync', jobId, branch);
    // git moved the branch forward, the log still waits for the sync's report.
    expect(git(first.path, 'rev-parse', 'HEAD')).toBe(newer);
    const { rows } = await world.db.query(`SELECT status FROM worktree_leases WHERE job_id = $1`, [jobId]);
    expect(rows.map((r) => r.status)).toEqual(['syncing']);
    // Pushed while the service is down: the restarted service does not know what its predecessor
    // fetched, so the sync it runs again fetches, and starts from this.
    const newest = world.git.pushCommit('main', { 'app.txt': 'v3\n' }, 'move main on again');

    service = await startServiceProcess(world);
    const grant = await acquire(jobId, branch);
    expect(grant.baseSha).toBe(newest);
    expectDiskAgrees(grant, branch, newest);
    expect(await world.count(`SELECT count(*) AS n FROM events WHERE type = 'WorktreeSynced' AND data->>'leaseId' = $1`, [grant.leaseId])).toBe(1);
    const { rows: rescued } = await world.db.query(`SELECT data FROM events WHERE type = 'WorktreeRescued' AND data->>'leaseId' = $1`, [grant.leaseId]);
    expect(rescued.map((r) => r.data.rescueSha)).toEqual([left]);

    await release(grant);
    const next = await acquire(await claimedJob(world), branch);
    expect(next.baseSha).toBe(newest);
    await release(next);
  }, 180_000);

  it('killed between a release’s rescue and its report: after a restart the lease is released and its WorktreeRescued names the rescue branch that holds the work', async () => {
    service = await startServiceProcess(world, { GANTRY_TEST_KILL_AFTER_GIT: 'rescue' });
    const grant = await acquire(await claimedJob(world), 'feature/crash-rescue');
    writeFileSync(path.join(grant.path, 'unfinished.txt'), 'left at the release\n');
    const running = service;
    const exit = new Promise<string | null>((resolve) => running.process.once('exit', (_code, signal) => resolve(signal)));
    // Its reply is lost to the kill.
    release(grant).catch(() => undefined);
    expect(await exit).toBe('SIGKILL');
    service = null;
    // git saved the work and cleaned the worktree; the log still waits for the rescue's report.
    expect(git(grant.path, 'status', '--porcelain', '--untracked-files=all')).toBe('');
    expect(await leaseRow(grant.leaseId)).toMatchObject({ status: 'releasing' });

    service = await startServiceProcess(world);
    await eventually(async () => (await leaseRow(grant.leaseId)).status === 'released', { what: 'the release reported after the restart' });
    const { rows } = await world.db.query(`SELECT data FROM events WHERE type = 'WorktreeRescued' AND data->>'leaseId' = $1`, [grant.leaseId]);
    expect(rows).toHaveLength(1);
    const rescueBranch = rows[0].data.rescueBranch as string;
    expect(git(grant.path, 'show', `${rescueBranch}:unfinished.txt`)).toBe('left at the release');
    expect(await leaseRow(grant.leaseId)).toMatchObject({ rescue_branch: rescueBranch });
    expect(git(grant.path, 'for-each-ref', '--format=%(refname:short)', `refs/heads/gantry/rescue/${grant.worktreeKey}/`)).toBe(rescueBranch);
  }, 180_000);

  it('a worktree whose .git file an agent deleted is not forgotten by the prune at a restart: the lease stays with its holder, and its release repairs and rescues it', async () => {
    service = await startServiceProcess(world);
    const grant = await acquire(await claimedJob(world), 'feature/gitlink-restart');
    writeFileSync(path.join(grant.path, 'README.md'), 'edited before the gitlink went\n');
    rmSync(path.join(grant.path, '.git'));
    await service.kill('SIGKILL');

    service = await startServiceProcess(world);
    expect(await leaseRow(grant.leaseId)).toMatchObject({ status: 'ready', release_reason: null });
    expect(registered()).toContain(`worktree ${grant.path}`);
    expect((await release(grant)).status).toBe('released');
    const rescue = (await leaseRow(grant.leaseId)).rescue_branch as string;
    expect(git(grant.path, 'show', `${rescue}:README.md`)).toBe('edited before the gitlink went');
    const quarantine = path.join(world.root, 'quarantine');
    expect(existsSync(quarantine) ? readdirSync(quarantine).filter((name) => name.startsWith(grant.worktreeKey)) : []).toEqual([]);
  }, 180_000);

  it('at a restart: a lease of a claim never heard of waits for its holder, a lease whose worktree vanished is released, orphan directories moved aside; a SIGTERM frees no lease, and the holder releases it after the next start', async () => {
    service = await startServiceProcess(world);
    const kept = await acquire(await claimedJob(world), 'feature/kept');
    const unknownJob = newJobId();
    const orphaned = await acquire(unknownJob, 'feature/unknown-job');
    const vanishing = await acquire(await claimedJob(world), 'feature/vanishing');
    await service.kill('SIGKILL');
    service = null;

    rmSync(vanishing.path, { recursive: true, force: true });
    const stray = path.join(world.root, 'worktrees', 'stray-directory');
    mkdirSync(stray);
    writeFileSync(path.join(stray, 'notes.txt'), 'not ours to delete\n');

    service = await startServiceProcess(world);
    expect(await leaseRow(kept.leaseId)).toMatchObject({ status: 'ready', release_pending_cause: null });
    // Its agent may still be at work: it is not handed to anyone before its holder lets go or it expires.
    await eventually(async () => (await leaseRow(orphaned.leaseId)).release_pending_cause === 'claim_unknown', { what: 'the unknown claim’s lease waits for its holder' });
    expect(await leaseRow(orphaned.leaseId)).toMatchObject({ status: 'ready' });
    expect(await leaseRow(vanishing.leaseId)).toMatchObject({ status: 'stale_released', release_reason: 'stale_reset' });
    expect(existsSync(stray)).toBe(false);
    const quarantined = readdirSync(path.join(world.root, 'quarantine'));
    expect(quarantined.some((name) => name.startsWith('stray-directory-'))).toBe(true);
    const list = registered();
    expect(list).not.toContain('prunable');
    expect(list).not.toContain(vanishing.path);
    expect(list).toContain(kept.path);
    // The vanished worktree's key can be acquired again.
    const again = await acquire(await claimedJob(world), 'feature/vanishing');
    expect(existsSync(again.path)).toBe(true);

    // an agent still at work in its worktree while the service stops: nothing is taken from under it
    writeFileSync(path.join(kept.path, 'in-progress.txt'), 'work in flight at shutdown\n');
    expect(await service.kill('SIGTERM')).toBe(0);
    service = null;
    for (const lease of [kept, orphaned, again]) expect(await leaseRow(lease.leaseId)).toMatchObject({ status: 'ready', release_reason: null });
    expect(git(kept.path, 'status', '--porcelain', '--untracked-files=all')).toBe('?? in-progress.txt');
    writeFileSync(path.join(kept.path, 'in-progress.txt'), 'written after the service stopped\n');

    // back again: the holder releases with its token, and the work it left is rescued then
    service = await startServiceProcess(world);
    expect(await leaseRow(kept.leaseId)).toMatchObject({ status: 'ready' });
    await release(kept);
    const rescue = (await leaseRow(kept.leaseId)).rescue_branch as string;
    expect(git(kept.path, 'show', `${rescue}:in-progress.txt`)).toBe('written after the service stopped');
    await eventually(() => git(kept.path, 'status', '--porcelain', '--untracked-files=all') === '', { what: 'kept worktree clean' });
    await release(again);
  });
});
