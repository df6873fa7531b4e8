import { existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, readlinkSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { INestApplication } from '@nestjs/common';
import {
  acquireWorktree,
  deriveWorktreeKey,
  ErrorCode,
  featureBranchFor,
  JobClaimRolledBack,
  JobFinished,
  listWorktreeLeases,
  releaseWorktree,
  renewWorktreeLease,
  type WorktreeLeaseGrant,
} from '@gantry/contracts';
import { EventStore, rebuildProjections } from '@gantry/eventstore';
import { eventually } from '@gantry/testing';
import { worktreeServiceProjections } from '../infrastructure/persistence/projections.js';
import { WorktreeEffectProcessor } from './effect-processor.js';
import { clonePathFor } from '../infrastructure/git/workspace.js';
import { sharedCloneFetchCount } from '../infrastructure/git/shared-clone.js';
import { serializedOnClone } from '../infrastructure/git/clone-queue.js';
import { GIT_WORKSPACE } from '../infrastructure/workspace.provider.js';
import { plainGit as git } from '@gantry/git/testing';
import { claimedJob, createWorld, startInProcess, refusal, type TestWorld } from './testing/world.js';

describe('worktree leases through the command path (real git, PostgreSQL and NATS)', () => {
  let world: TestWorld;
  let app: INestApplication;
  const branch = 'feature/checkout';
  let n = 0;

  beforeAll(async () => {
    world = await createWorld('wt-leases');
    // A short epoch: the leases of this file's keys go through several, so the rebuild below covers closed books.
    app = await startInProcess(world, { GANTRY_WORKTREE_EPOCH_EVENTS: '12' });
  });
  afterAll(async () => {
    await app?.close();
    await world?.close();
  });

  const acquire = (jobId: string, extra: { lockTimeoutMs?: number; leaseDurationMs?: number; branch?: string; key?: string } = {}) =>
    world.client.request(
      acquireWorktree,
      {
        jobId,
        jobLeaseToken: 1,
        repositoryUrl: world.git.origin,
        branch: extra.branch ?? branch,
        baseRef: 'main',
        leaseDurationMs: extra.leaseDurationMs ?? 600_000,
        ...(extra.lockTimeoutMs === undefined ? {} : { lockTimeoutMs: extra.lockTimeoutMs }),
        idempotencyKey: extra.key ?? `acquire:${jobId}:${++n}`,
      },
      { timeoutMs: 60_000 },
    );
  const release = (lease: { leaseId: string; token: number }) =>
    world.client.request(releaseWorktree, { ...lease, idempotencyKey: `release:${lease.leaseId}:${lease.token}:${++n}` }, { timeoutMs: 30_000 });
  const leasesOf = async (worktreeKey: string) => (await world.client.request(listWorktreeLeases, { worktreeKey })).leases;
  const holders = async (worktreeKey: string) =>
    (await leasesOf(worktreeKey)).filter((l) => ['creating_or_reusing', 'syncing', 'ready', 'releasing'].includes(l.status));

  it('grants a worktree synced to the base ref, created with git worktree add under the root', async () => {
    const mainSha = git(world.git.seed, 'rev-parse', 'HEAD');
    const grant = await acquire(await claimedJob(world), { branch: 'feature/first' });
    expect(grant.baseSha).toBe(mainSha);
    expect(grant.path).toBe(path.join(world.root, 'worktrees', deriveWorktreeKey(world.git.origin, 'feature/first')));
    expect(git(grant.path, 'rev-parse', 'HEAD')).toBe(mainSha);
    expect(git(grant.path, 'symbolic-ref', 'HEAD')).toBe('refs/heads/feature/first');
    await release(grant);
  });

  it('fetches the origin once per lease: the sync takes the fetch its create made, and the next lease sees a later push', async () => {
    const before = sharedCloneFetchCount();
    const first = await acquire(await claimedJob(world), { branch: 'feature/one-fetch' });
    expect(sharedCloneFetchCount()).toBe(before + 1);
    const pushed = world.git.pushCommit('main', { 'later.txt': 'later\n' }, 'a later push');
    const second = await acquire(await claimedJob(world), { branch: 'feature/one-fetch-2' });
    expect(sharedCloneFetchCount()).toBe(before + 2);
    expect(second.baseSha).toBe(pushed);
    expect(git(second.path, 'rev-parse', 'HEAD')).toBe(pushed);
    await release(first);
    await release(second);
  });

  it('a second acquirer of one key waits and gets the lease after the first is released; never two holders', async () => {
    const key = deriveWorktreeKey(world.git.origin, branch);
    const first = await acquire(await claimedJob(world));
    const secondJob = await claimedJob(world);
    let second: WorktreeLeaseGrant | null = null;
    const waiting = acquire(secondJob, { lockTimeoutMs: 30_000 }).then((g) => (second = g));
    await eventually(async () => (await leasesOf(key)).some((l) => l.jobId === secondJob && l.status === 'acquiring_lock'), { what: 'second acquirer in line' });
    // Still waiting while the first holds it, once everything the second's request set off has run.
    await app.get(WorktreeEffectProcessor).settled();
    expect(second).toBeNull();
    expect((await holders(key)).map((l) => l.leaseId)).toEqual([first.leaseId]);

    let watching = true;
    const overlaps: string[][] = [];
    const watcher = (async () => {
      while (watching) {
        const held = (await holders(key)).map((l) => l.leaseId);
        if (held.length > 1) overlaps.push(held);
        await new Promise((r) => setTimeout(r, 20));
      }
    })();
    const released = await release(first);
    expect(released.status).toBe('released');
    const grant = await waiting;
    watching = false;
    await watcher;
    expect(overlaps).toEqual([]);
    expect(grant.token).toBe(first.token + 1);
    expect(grant.path).toBe(first.path);
    await release(grant);
  });

  it('a second acquirer with a short lock timeout gets LOCK_TIMEOUT and never holds the worktree', async () => {
    const key = deriveWorktreeKey(world.git.origin, branch);
    const first = await acquire(await claimedJob(world));
    const startedAt = Date.now();
    const error = await refusal(acquire(await claimedJob(world), { lockTimeoutMs: 700 }));
    expect(error.code).toBe(ErrorCode.LOCK_TIMEOUT);
    expect(Date.now() - startedAt).toBeGreaterThanOrEqual(600);
    expect((await holders(key)).map((l) => l.leaseId)).toEqual([first.leaseId]);
    const immediate = await refusal(acquire(await claimedJob(world), { lockTimeoutMs: 0 }));
    expect(immediate.code).toBe(ErrorCode.LOCK_TIMEOUT);
    await release(first);
  });

  it('the same acquire asked again returns the same grant, and the same key with another request is IDEMPOTENCY_CONFLICT', async () => {
    const jobId = await claimedJob(world);
    const first = await acquire(jobId, { key: `acquire-twice:${jobId}` });
    const again = await acquire(jobId, { key: `acquire-twice:${jobId}` });
    // The same grant; what is left of its lease is reckoned again as it answers.
    expect(again).toEqual({ ...first, expiresInMs: expect.any(Number) });
    expect(again.expiresInMs).toBeLessThanOrEqual(first.expiresInMs!);
    const conflict = await refusal(acquire(jobId, { key: `acquire-twice:${jobId}`, leaseDurationMs: 120_000 }));
    expect(conflict.code).toBe(ErrorCode.IDEMPOTENCY_CONFLICT);
    await release(first);
  });

  it('an acquire asked again under its key with another lease duration, once its lease lies in a closed epoch, is IDEMPOTENCY_CONFLICT', async () => {
    const branchName = 'feature/closed-books';
    const jobId = await claimedJob(world);
    const key = `acquire-closed-books:${jobId}`;
    const first = await acquire(jobId, { key, branch: branchName });
    await release(first);
    // Later leases of the key close the books of the first one's epoch (12 events here).
    for (let i = 0; i < 3; i++) await release(await acquire(await claimedJob(world), { branch: branchName }));
    expect(await world.count(`SELECT count(*) AS n FROM worktree_epochs WHERE worktree_key = $1 AND epoch > 0`, [first.worktreeKey])).toBe(1);
    const eventsBefore = await world.count(`SELECT count(*) AS n FROM events`);

    const conflict = await refusal(acquire(jobId, { key, branch: branchName, leaseDurationMs: 120_000 }));
    expect(conflict.code).toBe(ErrorCode.IDEMPOTENCY_CONFLICT);
    // Asked as it was, it is that lease, which has ended.
    expect((await refusal(acquire(jobId, { key, branch: branchName }))).code).toBe(ErrorCode.STALE_FENCE);
    expect(await world.count(`SELECT count(*) AS n FROM events`)).toBe(eventsBefore);
  });

  it('a release or renew with a stale token is STALE_FENCE and changes nothing', async () => {
    const older = await acquire(await claimedJob(world));
    await release(older);
    const current = await acquire(await claimedJob(world));
    expect(current.token).toBeGreaterThan(older.token);
    const eventsBefore = await world.count(`SELECT count(*) AS n FROM events`);

    for (const attempt of [
      world.client.request(releaseWorktree, { leaseId: current.leaseId, token: older.token, idempotencyKey: `stale-release:${++n}` }),
      world.client.request(renewWorktreeLease, { leaseId: current.leaseId, token: older.token, idempotencyKey: `stale-renew:${++n}` }),
      world.client.request(renewWorktreeLease, { leaseId: older.leaseId, token: older.token, idempotencyKey: `stale-renew:${++n}` }),
      world.client.request(releaseWorktree, { leaseId: older.leaseId, token: older.token, idempotencyKey: `stale-release:${++n}` }),
    ]) {
      expect((await refusal(attempt)).code).toBe(ErrorCode.STALE_FENCE);
    }
    expect(await world.count(`SELECT count(*) AS n FROM events`)).toBe(eventsBefore);
    const [lease] = (await leasesOf(current.worktreeKey)).filter((l) => l.leaseId === current.leaseId);
    expect(lease).toMatchObject({ status: 'ready', token: current.token, expiresAt: current.expiresAt });

    const renewed = await world.client.request(renewWorktreeLease, { leaseId: current.leaseId, token: current.token, leaseDurationMs: 900_000, idempotencyKey: `renew:${++n}` });
    expect(Date.parse(renewed.expiresAt)).toBeGreaterThan(Date.parse(current.expiresAt));
    await release(current);
  });

  it('a release asked again under its key after it was done (its reply lost) gets the same answer, and nothing new is written', async () => {
    const grant = await acquire(await claimedJob(world), { branch: 'feature/release-reply-lost' });
    const request = { leaseId: grant.leaseId, token: grant.token, idempotencyKey: `release-reply-lost:${grant.leaseId}` };
    const first = await world.client.request(releaseWorktree, request, { timeoutMs: 30_000 });
    expect(first).toEqual({ leaseId: grant.leaseId, token: grant.token, status: 'released' });
    const eventsBefore = await world.count(`SELECT count(*) AS n FROM events`);

    expect(await world.client.request(releaseWorktree, request, { timeoutMs: 30_000 })).toEqual(first);
    expect(await world.count(`SELECT count(*) AS n FROM events`)).toBe(eventsBefore);
    // Another key for the ended lease is a new request: refused, as before.
    const fresh = world.client.request(releaseWorktree, { ...request, idempotencyKey: `release-reply-lost:other:${grant.leaseId}` }, { timeoutMs: 30_000 });
    expect((await refusal(fresh)).code).toBe(ErrorCode.STALE_FENCE);
  });

  it('a renewal asked again under its key (its reply lost) gets the same answer and nothing new is written, but what is left of the lease as it answers again', async () => {
    const grant = await acquire(await claimedJob(world), { branch: 'feature/renew-reply-lost' });
    const request = { leaseId: grant.leaseId, token: grant.token, leaseDurationMs: 600_000, idempotencyKey: `renew-reply-lost:${grant.leaseId}` };
    const sentAt = Date.now();
    const first = await world.client.request(renewWorktreeLease, request, { timeoutMs: 30_000 });
    expect(first.expiresInMs).toBeLessThanOrEqual(Date.parse(first.expiresAt) - sentAt);
    const eventsBefore = await world.count(`SELECT count(*) AS n FROM events`);

    await sleep(500);
    const again = await world.client.request(renewWorktreeLease, request, { timeoutMs: 30_000 });
    expect(again).toEqual({ ...first, expiresInMs: expect.any(Number) });
    expect(again.expiresInMs).toBeLessThanOrEqual(first.expiresInMs! - 500);
    expect(await world.count(`SELECT count(*) AS n FROM events`)).toBe(eventsBefore);
    await release(grant);
  });

  it('a dirty worktree released: a rescue branch holds its changes and the worktree is clean', async () => {
    const grant = await acquire(await claimedJob(world));
    writeFileSync(path.join(grant.path, 'README.md'), 'edited by the agent\n');
    writeFileSync(path.join(grant.path, 'new-file.txt'), 'untracked work\n');
    const released = await release(grant);
    expect(released.status).toBe('released');
    expect(git(grant.path, 'status', '--porcelain', '--untracked-files=all')).toBe('');
    const { rows } = await world.db.query(`SELECT rescue_branch, rescue_sha FROM worktree_leases WHERE lease_id = $1`, [grant.leaseId]);
    const rescueBranch = rows[0].rescue_branch as string;
    expect(rescueBranch).toMatch(new RegExp(`^gantry/rescue/${grant.worktreeKey}/`));
    expect(git(grant.path, 'show', `${rescueBranch}:README.md`)).toBe('edited by the agent');
    expect(git(grant.path, 'show', `${rescueBranch}:new-file.txt`)).toBe('untracked work');
    expect(readFileSync(path.join(grant.path, 'README.md'), 'utf8')).not.toContain('edited by the agent');
    expect(existsSync(path.join(grant.path, 'new-file.txt'))).toBe(false);
  });

  it('repositories an agent made inside its worktree are moved aside, kept, at the release, and the next lease of the key is granted', async () => {
    const branchName = 'feature/nested-repositories';
    const first = await acquire(await claimedJob(world), { branch: branchName });
    // One with a commit (git add would record only a gitlink to it, git clean leaves it), one without (git add refuses it).
    const withCommit = path.join(first.path, 'vendor', 'lib');
    mkdirSync(withCommit, { recursive: true });
    git(withCommit, 'init', '--quiet');
    writeFileSync(path.join(withCommit, 'work.txt'), 'work in a repository of its own\n');
    git(withCommit, 'add', 'work.txt');
    git(withCommit, 'commit', '--quiet', '-m', 'nested work');
    const withoutCommit = path.join(first.path, 'scratch');
    mkdirSync(withoutCommit);
    git(withoutCommit, 'init', '--quiet');
    writeFileSync(path.join(withoutCommit, 'notes.txt'), 'notes never committed\n');
    writeFileSync(path.join(first.path, 'README.md'), 'edited beside them\n');

    expect((await release(first)).status).toBe('released');
    const { rows } = await world.db.query(`SELECT rescue_branch FROM worktree_leases WHERE lease_id = $1`, [first.leaseId]);
    expect(git(first.path, 'show', `${rows[0].rescue_branch}:README.md`)).toBe('edited beside them');
    const quarantine = path.join(world.root, 'quarantine');
    const [setAside] = readdirSync(quarantine).filter((name) => name.startsWith(`${first.worktreeKey}-`));
    expect(setAside).toBeDefined();
    expect(git(path.join(quarantine, setAside!, 'vendor', 'lib'), 'log', '--format=%s')).toBe('nested work');
    expect(readFileSync(path.join(quarantine, setAside!, 'vendor', 'lib', 'work.txt'), 'utf8')).toBe('work in a repository of its own\n');
    expect(readFileSync(path.join(quarantine, setAside!, 'scratch', 'notes.txt'), 'utf8')).toBe('notes never committed\n');

    const second = await acquire(await claimedJob(world), { branch: branchName });
    expect(second.path).toBe(first.path);
    expect(git(second.path, 'status', '--porcelain', '--untracked-files=all')).toBe('');
    await release(second);
  });

  it('a worktree whose .git file an agent deleted is repaired at the release: its edit is rescued, and the next lease of the key is granted', async () => {
    const branchName = 'feature/lost-gitlink';
    const first = await acquire(await claimedJob(world), { branch: branchName });
    writeFileSync(path.join(first.path, 'README.md'), 'edited before the gitlink went\n');
    rmSync(path.join(first.path, '.git'));

    expect((await release(first)).status).toBe('released');
    const { rows } = await world.db.query(`SELECT rescue_branch FROM worktree_leases WHERE lease_id = $1`, [first.leaseId]);
    expect(git(first.path, 'show', `${rows[0].rescue_branch}:README.md`)).toBe('edited before the gitlink went');

    // Corrupted rather than deleted: the gitlink names no repository.
    const second = await acquire(await claimedJob(world), { branch: branchName });
    expect(second.path).toBe(first.path);
    expect(git(second.path, 'status', '--porcelain', '--untracked-files=all')).toBe('');
    writeFileSync(path.join(second.path, '.git'), 'gitdir: /nowhere/at/all\n');
    writeFileSync(path.join(second.path, 'notes.txt'), 'notes beside a broken gitlink\n');
    expect((await release(second)).status).toBe('released');
    const third = await acquire(await claimedJob(world), { branch: branchName });
    expect(third.path).toBe(first.path);
    expect(git(third.path, 'status', '--porcelain', '--untracked-files=all')).toBe('');
    const { rows: secondRows } = await world.db.query(`SELECT rescue_branch FROM worktree_leases WHERE lease_id = $1`, [second.leaseId]);
    expect(git(third.path, 'show', `${secondRows[0].rescue_branch}:notes.txt`)).toBe('notes beside a broken gitlink');
    await release(third);
  });

  it('a worktree an agent replaced by a file is moved to the quarantine at the release, kept: the release ends, and the next lease of the key is granted', async () => {
    const branchName = 'feature/replaced-by-a-file';
    const first = await acquire(await claimedJob(world), { branch: branchName });
    rmSync(first.path, { recursive: true, force: true });
    writeFileSync(first.path, 'a file where the worktree was\n');

    expect((await release(first)).status).toBe('released');
    const kept = readdirSync(path.join(world.root, 'quarantine')).filter((name) => name.startsWith(first.worktreeKey));
    expect(kept.map((name) => readFileSync(path.join(world.root, 'quarantine', name), 'utf8'))).toEqual(['a file where the worktree was\n']);
    const second = await acquire(await claimedJob(world), { branch: branchName });
    expect(second).toMatchObject({ path: first.path, token: first.token + 1 });
    expect(git(second.path, 'status', '--porcelain', '--untracked-files=all')).toBe('');
    await release(second);
  });

  it('a worktree an agent replaced by a symbolic link: the release moves the link to the quarantine, its target untouched, and the next lease of the key is granted', async () => {
    const branchName = 'feature/replaced-by-a-link';
    const first = await acquire(await claimedJob(world), { branch: branchName });
    const elsewhere = path.join(world.git.dir, 'linked-from-a-worktree');
    mkdirSync(elsewhere);
    writeFileSync(path.join(elsewhere, 'precious.txt'), 'not the service\'s\n');
    rmSync(first.path, { recursive: true, force: true });
    symlinkSync(elsewhere, first.path);

    expect((await release(first)).status).toBe('released');
    const [kept] = readdirSync(path.join(world.root, 'quarantine')).filter((name) => name.startsWith(first.worktreeKey));
    expect(lstatSync(path.join(world.root, 'quarantine', kept!)).isSymbolicLink()).toBe(true);
    expect(readlinkSync(path.join(world.root, 'quarantine', kept!))).toBe(elsewhere);
    expect(readdirSync(elsewhere)).toEqual(['precious.txt']);
    const second = await acquire(await claimedJob(world), { branch: branchName });
    expect(second).toMatchObject({ path: first.path, token: first.token + 1 });
    expect(lstatSync(second.path).isDirectory()).toBe(true);
    await release(second);
  });

  it('a contract-valid JobFinished (DONE) for the holder releases its lease within seconds, with no runner call', async () => {
    const jobId = await claimedJob(world);
    const grant = await acquire(jobId);
    writeFileSync(path.join(grant.path, 'left-behind.txt'), 'work the runner never committed\n');
    const finished = { ...JobFinished.examples.valid[0], jobId, leaseToken: 1 };
    expect(JobFinished.data.safeParse(finished).success).toBe(true);
    await world.publishJobEvent('JobFinished', jobId, finished);
    await eventually(async () => (await leasesOf(grant.worktreeKey)).find((l) => l.leaseId === grant.leaseId)?.status === 'released', {
      what: 'lease released by the job event',
      timeoutMs: 10_000,
    });
    const { rows } = await world.db.query(`SELECT release_reason, rescue_branch FROM worktree_leases WHERE lease_id = $1`, [grant.leaseId]);
    expect(rows[0].release_reason).toBe('job_terminal');
    expect(git(grant.path, 'show', `${rows[0].rescue_branch}:left-behind.txt`)).toBe('work the runner never committed');
    expect(git(grant.path, 'status', '--porcelain', '--untracked-files=all')).toBe('');
  });

  it('a job cancelled while its acquire waits in line withdraws the request', async () => {
    const holder = await acquire(await claimedJob(world));
    const jobId = await claimedJob(world);
    const waiting = refusal(acquire(jobId, { lockTimeoutMs: 30_000 }));
    await eventually(async () => (await leasesOf(holder.worktreeKey)).some((l) => l.jobId === jobId && l.status === 'acquiring_lock'), { what: 'in line' });
    await world.publishJobEvent('JobCancelled', jobId, { jobId, previousStatus: 'CLAIMED', revokedLeaseToken: 1, reason: 'not needed', taskStatus: null, cancelledAt: new Date().toISOString() });
    expect((await waiting).code).toBe(ErrorCode.STALE_FENCE);
    expect((await leasesOf(holder.worktreeKey)).find((l) => l.jobId === jobId)?.status).toBe('withdrawn');
    await release(holder);
  });

  it('a lease that is not renewed expires by the service clock and is released', async () => {
    // A one-second lease from the acquire itself could end before its reply on a loaded machine;
    // the renewal shortens the granted lease to one second once the holder has it.
    const grant = await acquire(await claimedJob(world));
    await world.client.request(renewWorktreeLease, { leaseId: grant.leaseId, token: grant.token, leaseDurationMs: 1_000, idempotencyKey: `renew:${++n}` });
    await eventually(async () => (await leasesOf(grant.worktreeKey)).find((l) => l.leaseId === grant.leaseId)?.status === 'stale_released', {
      what: 'expired lease released',
      timeoutMs: 10_000,
    });
    const next = await acquire(await claimedJob(world));
    expect(next.token).toBe(grant.token + 1);
    await release(next);
  });

  it('a lease whose preparation waits longer than the lease lasts is granted all the same: its expiry starts when it is ready', async () => {
    // Other git work holds the shared clone (as a burst of acquires and releases does on a busy host)
    // for longer than the lease lasts; its holder has no token to renew it with meanwhile.
    const clonePath = await clonePathFor(app.get(GIT_WORKSPACE), world.git.origin);
    let free!: () => void;
    const busy = serializedOnClone(app.get(GIT_WORKSPACE), clonePath, () => new Promise<void>((resolve) => (free = resolve)));
    const branchName = 'feature/slow-start';
    const key = deriveWorktreeKey(world.git.origin, branchName);
    const granting = acquire(await claimedJob(world), { branch: branchName, leaseDurationMs: 1_000 });
    await eventually(async () => (await leasesOf(key)).some((l) => l.status === 'creating_or_reusing'), { what: 'the lease being prepared' });
    // three times its duration, the sweep running every 200 ms
    await new Promise((resolve) => setTimeout(resolve, 3_000));
    expect((await leasesOf(key)).map((l) => l.status)).toEqual(['creating_or_reusing']);
    free();
    await busy;
    const grant = await granting;
    expect(grant.baseSha).toBe(git(world.git.seed, 'rev-parse', 'HEAD'));
    // not renewed, it expires in its turn, a second after it was ready
    const ended = await eventually(async () => (await leasesOf(key)).find((l) => l.status === 'stale_released') ?? null, { what: 'the lease expired' });
    expect(ended.leaseId).toBe(grant.leaseId);
    const { rows } = await app.get(EventStore).pool.query<{ type: string }>(`SELECT type FROM events WHERE data->>'leaseId' = $1 ORDER BY position`, [grant.leaseId]);
    const types = rows.map((r) => r.type);
    expect(types.indexOf('WorktreeLeaseExpired')).toBeGreaterThan(types.indexOf('WorktreeSynced'));
  });

  it('refuses a worktree to a claim the service knows has ended or was superseded', async () => {
    const jobId = await claimedJob(world);
    await world.publishJobEvent('JobFinished', jobId, { ...JobFinished.examples.valid[0], jobId, leaseToken: 1 });
    await eventually(async () => (await world.count(`SELECT count(*) AS n FROM job_statuses WHERE job_id = $1 AND status = 'DONE'`, [jobId])) === 1, { what: 'job DONE known' });
    expect((await refusal(acquire(jobId))).code).toBe(ErrorCode.STALE_FENCE);
    const requeued = await claimedJob(world, 2);
    expect((await refusal(acquire(requeued))).code).toBe(ErrorCode.STALE_FENCE);
    // A claim its holder rolled back, the job queued again: that claim has ended too.
    const rolledBack = await claimedJob(world);
    await world.publishJobEvent('JobClaimRolledBack', rolledBack, { ...JobClaimRolledBack.examples.valid[0], jobId: rolledBack, leaseToken: 1 });
    await eventually(async () => (await world.count(`SELECT count(*) AS n FROM job_statuses WHERE job_id = $1 AND status = 'QUEUED'`, [rolledBack])) === 1, {
      what: 'job queued again known',
    });
    expect((await refusal(acquire(rolledBack))).code).toBe(ErrorCode.STALE_FENCE);
    expect(await world.count(`SELECT count(*) AS n FROM worktree_leases WHERE job_id = ANY($1::text[])`, [[jobId, requeued, rolledBack]])).toBe(0);
  });

  it('the read models rebuilt from the log equal the live ones', async () => {
    const snapshot = async () => ({
      leases: (await world.db.query(`SELECT * FROM worktree_leases ORDER BY lease_id`)).rows,
      worktrees: (await world.db.query(`SELECT * FROM worktrees ORDER BY worktree_key`)).rows,
      epochs: (await world.db.query(`SELECT * FROM worktree_epochs ORDER BY worktree_key`)).rows,
    });
    const live = await snapshot();
    expect(live.leases.length).toBeGreaterThan(5);
    expect(live.epochs.length).toBeGreaterThan(0);
    await rebuildProjections(app.get(EventStore), worktreeServiceProjections);
    expect(await snapshot()).toEqual(live);
  });

  it('acquirers in line get the lock in arrival order', async () => {
    const key = deriveWorktreeKey(world.git.origin, 'feature/fifo');
    const first = await acquire(await claimedJob(world), { branch: 'feature/fifo' });
    const order: string[] = [];
    const waiters: Array<Promise<WorktreeLeaseGrant>> = [];
    for (const label of ['second', 'third', 'fourth']) {
      const jobId = await claimedJob(world);
      waiters.push(
        acquire(jobId, { branch: 'feature/fifo', lockTimeoutMs: 30_000 }).then(async (grant) => {
          order.push(label);
          await new Promise((r) => setTimeout(r, 50));
          await release(grant);
          return grant;
        }),
      );
      await eventually(async () => (await leasesOf(key)).some((l) => l.jobId === jobId && l.status === 'acquiring_lock'), { what: `${label} in line` });
    }
    await release(first);
    const grants = await Promise.all(waiters);
    expect(order).toEqual(['second', 'third', 'fourth']);
    expect(grants.map((g) => g.token)).toEqual([first.token + 1, first.token + 2, first.token + 3]);
  });

  it('the same acquire sent twice at once makes one lease and both get its grant', async () => {
    const jobId = await claimedJob(world);
    const [a, b] = await Promise.all([acquire(jobId, { key: `concurrent:${jobId}`, branch: 'feature/dup' }), acquire(jobId, { key: `concurrent:${jobId}`, branch: 'feature/dup' })]);
    // The same grant; what is left of its lease is reckoned at each answer.
    expect(a).toEqual({ ...b, expiresInMs: expect.any(Number) });
    expect(await world.count(`SELECT count(*) AS n FROM worktree_leases WHERE job_id = $1`, [jobId])).toBe(1);
    await release(a);
  });

  it('a claim that ends by lease expiry (requeued) leaves its ready lease waiting for its holder, who releases it', async () => {
    const jobId = await claimedJob(world);
    const grant = await acquire(jobId, { branch: 'feature/requeued' });
    await world.publishJobEvent('JobLeaseExpired', jobId, {
      jobId, runnerId: 'runner-host1-01', leaseToken: 1, attempt: 1, outcome: 'REQUEUED', nextAttempt: 2, error: null,
      leaseExpiresAt: new Date(Date.now() - 1000).toISOString(), expiredAt: new Date().toISOString(),
    });
    const lease = await eventually(async () => (await leasesOf(grant.worktreeKey)).find((l) => l.leaseId === grant.leaseId && l.releasePending), { what: 'release pending on requeue' });
    expect(lease).toMatchObject({ status: 'ready', releasePending: { cause: 'job_lease_expired' } });
    // The release-pending decision commits in a transaction of its own, before the consumer's, which records the job's status.
    await eventually(async () => (await world.count(`SELECT count(*) AS n FROM job_statuses WHERE job_id = $1 AND status = 'QUEUED'`, [jobId])) === 1, { what: "the job's status recorded as QUEUED" });
    expect((await release(grant)).status).toBe('released');
  });

  it("a branch in the rescue folder of a key of the repository (gantry/rescue/<key>, or under it) is refused: that key's dirty release is still rescued, and its rescue branch never leased and moved; a product named rescue keeps its feature branches", async () => {
    const clone = async () => clonePathFor(app.get(GIT_WORKSPACE), world.git.origin);
    const outcome = (attempt: Promise<WorktreeLeaseGrant>) =>
      attempt.then(
        async (granted) => {
          await release(granted);
          return 'granted';
        },
        (error: { code?: string }) => error.code ?? String(error),
      );
    /** A dirty worktree of `branch` released: its changes go to gantry/rescue/<key>/<time>. */
    const dirtyRelease = async (branch: string) => {
      const grant = await acquire(await claimedJob(world), { branch });
      writeFileSync(path.join(grant.path, 'README.md'), 'work to keep\n');
      const status = await release(grant).then(
        (answer) => answer.status,
        (error: unknown) => String(error),
      );
      const row = (await world.db.query(`SELECT rescue_branch FROM worktree_leases WHERE lease_id = $1`, [grant.leaseId])).rows[0];
      return { status, rescueBranch: (row?.rescue_branch ?? null) as string | null };
    };
    const holdsTheWork = async (rescueBranch: string | null) =>
      rescueBranch !== null && git(await clone(), 'show', `${rescueBranch}:README.md`) === 'work to keep';

    // A job that names a rescue branch itself: leased, its sync would move the branch to the base ref.
    const first = await dirtyRelease('feature/rescued-then-named');
    const rescuedAt = first.rescueBranch === null ? null : git(await clone(), 'rev-parse', first.rescueBranch);
    const itself = first.rescueBranch === null ? 'no rescue' : await outcome(acquire(await claimedJob(world), { branch: first.rescueBranch }));
    const unmoved = first.rescueBranch !== null && git(await clone(), 'rev-parse', first.rescueBranch) === rescuedAt && (await holdsTheWork(first.rescueBranch));

    // gantry/rescue/<key>, leased, is made in the shared clone where the key's rescue branches go: git keeps no branch there.
    const key = deriveWorktreeKey(world.git.origin, 'feature/rescued-in-its-folder');
    const folder = await outcome(acquire(await claimedJob(world), { branch: `gantry/rescue/${key}` }));
    const second = await dirtyRelease('feature/rescued-in-its-folder');

    expect({ itself, unmoved, folder, second: { status: second.status, rescued: await holdsTheWork(second.rescueBranch) } }).toEqual({
      itself: ErrorCode.INVALID_COMMAND,
      unmoved: true,
      folder: ErrorCode.INVALID_COMMAND,
      second: { status: 'released', rescued: true },
    });
    expect(second.rescueBranch).toMatch(new RegExp(`^gantry/rescue/${key}/`));
    // A product named rescue derives its feature branches under gantry/rescue/: leased as before.
    for (const derived of [featureBranchFor({ productId: 'rescue', storyId: 'ST-7', taskId: null, jobId: 'job-x' }), featureBranchFor({ productId: 'rescue', storyId: null, taskId: null, jobId: await claimedJob(world) })]) {
      expect(derived).toMatch(/^gantry\/rescue\//);
      await release(await acquire(await claimedJob(world), { branch: derived }));
    }
  }, 120_000);

  it('a branch named gantry or gantry/rescue, the folders of the rescue branches, is refused: a dirty release of another key of the repository is still rescued', async () => {
    const attempts = await Promise.allSettled(['gantry', 'gantry/rescue'].map(async (reserved) => acquire(await claimedJob(world), { branch: reserved })));
    for (const attempt of attempts) if (attempt.status === 'fulfilled') await release(attempt.value);
    // A dirty worktree of another branch of the repository, released: its changes go to gantry/rescue/<key>/<time>.
    const grant = await acquire(await claimedJob(world), { branch: 'feature/rescued-beside-gantry' });
    writeFileSync(path.join(grant.path, 'README.md'), 'work to keep\n');
    const released = await release(grant);
    expect(released.status).toBe('released');
    expect((await world.db.query(`SELECT rescue_branch FROM worktree_leases WHERE lease_id = $1`, [grant.leaseId])).rows[0].rescue_branch).toMatch(/^gantry\/rescue\//);
    expect(attempts.map((a) => (a.status === 'rejected' ? (a.reason as { code: string }).code : 'granted'))).toEqual([ErrorCode.INVALID_COMMAND, ErrorCode.INVALID_COMMAND]);
  });
});
