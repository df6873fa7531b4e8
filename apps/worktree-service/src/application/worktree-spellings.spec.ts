import { readdirSync } from 'node:fs';
import path from 'node:path';
import type { INestApplication } from '@nestjs/common';
import {
  acquireWorktree,
  deriveWorktreeKey,
  ErrorCode,
  legacyRepositoryCloneName,
  legacyWorktreeKey,
  listWorktreeLeases,
  releaseWorktree,
  renewWorktreeLease,
  repositoryCloneName,
  type WorktreeLeaseGrant,
} from '@gantry/contracts';
import { EventStore } from '@gantry/eventstore';
import { eventually } from '@gantry/testing';
import { plainGit as git } from '@gantry/git/testing';
import { initialState, worktreeLeaseDecider } from '../domain/index.js';
import { leaseIdFor } from './command-context.js';
import { serviceActor, streamIdOf } from './lease-log.js';
import { WorktreeEffectProcessor } from './effect-processor.js';
import { claimedJob, createWorld, startInProcess, refusal, type TestWorld } from './testing/world.js';

/*
 * One repository spelled two ways is one repository (docs/worktrees.md, "One repository, one key"):
 * one shared clone, one worktree key per branch, one lock — and leases asked for under the key of
 * another spelling before URLs had a canonical one keep the branch until they end ("Keys from before").
 */

describe('repository URLs spelled two ways (real git, PostgreSQL and NATS)', () => {
  let world: TestWorld;
  let app: INestApplication;
  let n = 0;

  beforeAll(async () => {
    world = await createWorld('wt-spellings');
    app = await startInProcess(world, { GANTRY_WORKTREE_MAX_PER_REPOSITORY: '2' });
  });
  afterAll(async () => {
    await app?.close();
    await world?.close();
  });

  const acquire = (repositoryUrl: string, branch: string, jobId: string, lockTimeoutMs?: number, idempotencyKey = `acquire:${jobId}:${++n}`) =>
    world.client.request(
      acquireWorktree,
      {
        jobId,
        jobLeaseToken: 1,
        repositoryUrl,
        branch,
        baseRef: 'main',
        leaseDurationMs: 600_000,
        ...(lockTimeoutMs === undefined ? {} : { lockTimeoutMs }),
        idempotencyKey,
      },
      { timeoutMs: 60_000 },
    );
  const release = (lease: { leaseId: string; token: number }) =>
    world.client.request(releaseWorktree, { ...lease, idempotencyKey: `release:${lease.leaseId}:${lease.token}:${++n}` }, { timeoutMs: 30_000 });
  const leasesOf = async (worktreeKey: string) => (await world.client.request(listWorktreeLeases, { worktreeKey })).leases;
  const clones = () => readdirSync(path.join(world.root, 'repos')).filter((name) => name.endsWith('.git')).sort();

  it('two spellings of one URL get one clone and one key: the second writer on the branch waits for the first', async () => {
    const branch = 'feature/spelled';
    const plain = world.git.origin;
    const slashed = `${world.git.origin}/`;
    const first = await acquire(plain, branch, await claimedJob(world));

    // Refused at once, as for one spelling: the branch is held.
    const refused = await refusal(acquire(slashed, branch, await claimedJob(world), 0));
    expect(refused.code).toBe(ErrorCode.LOCK_TIMEOUT);

    const secondJob = await claimedJob(world);
    let second: WorktreeLeaseGrant | null = null;
    const waiting = acquire(`${world.git.origin}//`, branch, secondJob, 30_000).then((grant) => (second = grant));
    await eventually(async () => (await leasesOf(first.worktreeKey)).some((l) => l.jobId === secondJob && l.status === 'acquiring_lock'), {
      what: 'the second spelling in line for the key',
    });
    await app.get(WorktreeEffectProcessor).settled();
    expect(second).toBeNull();

    await release(first);
    const grant = await waiting;
    expect(grant.worktreeKey).toBe(first.worktreeKey);
    expect(grant.path).toBe(first.path);
    expect(grant.token).toBe(first.token + 1);
    expect(grant.worktreeKey).toBe(deriveWorktreeKey(slashed, branch));
    expect(clones()).toEqual([`${repositoryCloneName(plain)}.git`]);
    // The clone keeps the origin URL that made it: another spelling of it is not an agent's rewrite.
    expect(git(path.join(world.root, 'repos', clones()[0]!), 'config', '--get', 'remote.origin.url')).toBe(plain);
    await release(grant);
  });

  it('still refuses a URL with credentials or an option for a path, with INVALID_COMMAND, and changes nothing', async () => {
    const before = clones();
    const jobId = await claimedJob(world);
    for (const repositoryUrl of ['https://gantry:s3cr3t-t0ken@github.com/acme/shop.git', 'git@github.com:-oProxyCommand=touch', `${world.git.origin}/../x`]) {
      const error = await refusal(acquire(repositoryUrl, 'main', jobId));
      expect({ repositoryUrl, code: error.code }).toEqual({ repositoryUrl, code: ErrorCode.INVALID_COMMAND });
      expect(JSON.stringify({ message: error.message, details: error.details })).not.toContain('s3cr3t');
    }
    expect(await world.count(`SELECT count(*) AS n FROM worktree_leases WHERE job_id = $1`, [jobId])).toBe(0);
    expect(clones()).toEqual(before);
  });

  it('a lease asked for under the key of another spelling before the upgrade is served in its old clone and keeps the branch until it ends', async () => {
    const branch = 'feature/from-before';
    const spelling = `${world.git.origin}/`;
    const oldKey = legacyWorktreeKey(spelling, branch);
    expect(oldKey).not.toBe(deriveWorktreeKey(spelling, branch));

    // What the service wrote for an acquire before URLs had a canonical spelling: the request and its
    // lock under the key of the URL as written (the decider's events, under that key).
    const jobId = await claimedJob(world);
    const oldAcquireKey = `acquire:${jobId}:before-the-upgrade`;
    const requestedAt = new Date().toISOString();
    const events = worktreeLeaseDecider
      .decide(
        {
          type: 'RequestWorktreeLease',
          data: {
            worktreeKey: deriveWorktreeKey(spelling, branch),
            leaseId: leaseIdFor(oldAcquireKey),
            jobId,
            jobLeaseToken: 1,
            repositoryUrl: spelling,
            branch,
            baseRef: 'main',
            leaseDurationMs: 600_000,
            lockTimeoutMs: 30_000,
            now: requestedAt,
          },
        },
        initialState,
      )
      .map((event) => ({ ...event, data: { ...event.data, worktreeKey: oldKey } }));
    await app.get(EventStore).execute({ metadata: serviceActor('test:before-the-upgrade') }, (uow) => uow.append(streamIdOf(oldKey), 0, events));
    // The upgrade: a start finds the lease's create asked for and not reported, and runs it.
    await app.close();
    app = await startInProcess(world, { GANTRY_WORKTREE_MAX_PER_REPOSITORY: '2' });

    const [old] = await eventually(
      async () => {
        const leases = await leasesOf(oldKey);
        return leases.length === 1 && leases[0]!.status === 'ready' ? leases : null;
      },
      { what: 'the lease from before ready under its old key' },
    );
    const oldPath = path.join(world.root, 'worktrees', oldKey);
    expect(old!.path).toBe(oldPath);
    // Its holder, asking again after the upgrade (its reply lost), gets that lease.
    const again = await acquire(spelling, branch, jobId, 0, oldAcquireKey);
    expect(again).toEqual(expect.objectContaining({ leaseId: old!.leaseId, worktreeKey: oldKey, token: old!.token }));
    // In the clone named as before, where the old service made its worktrees.
    expect(git(oldPath, 'rev-parse', '--path-format=absolute', '--git-common-dir')).toBe(path.join(world.root, 'repos', `${legacyRepositoryCloneName(spelling)}.git`));

    // A new acquire of the branch, under either spelling, waits for it.
    expect((await refusal(acquire(world.git.origin, branch, await claimedJob(world), 0))).code).toBe(ErrorCode.LOCK_TIMEOUT);
    expect((await refusal(acquire(spelling, branch, await claimedJob(world), 0))).code).toBe(ErrorCode.LOCK_TIMEOUT);
    let next: WorktreeLeaseGrant | null = null;
    const waiting = acquire(world.git.origin, branch, await claimedJob(world), 30_000).then((grant) => (next = grant));

    // Its holder renews and releases it as before.
    const held = { leaseId: old!.leaseId, token: old!.token! };
    await world.client.request(renewWorktreeLease, { ...held, leaseDurationMs: 600_000, idempotencyKey: `renew:${++n}` });
    await app.get(WorktreeEffectProcessor).settled();
    expect(next).toBeNull();
    expect((await release(held)).status).toBe('released');

    const grant = await waiting;
    expect(grant.worktreeKey).toBe(deriveWorktreeKey(spelling, branch));
    expect(git(grant.path, 'rev-parse', '--path-format=absolute', '--git-common-dir')).toBe(path.join(world.root, 'repos', `${repositoryCloneName(spelling)}.git`));
    await release(grant);
  });

  it('counts the worktrees of every spelling of the repository against its cap', async () => {
    for (const [i, repositoryUrl] of [world.git.origin, `${world.git.origin}/`, `${world.git.origin}//`].entries()) {
      await release(await acquire(repositoryUrl, `feature/cap-${i}`, await claimedJob(world)));
    }
    // Every worktree of this file is of the one repository; the cap is 2.
    await eventually(async () => (await world.count(`SELECT count(*) AS n FROM worktrees`)) <= 2, { what: 'idle worktrees over the cap evicted' });
    expect(clones()).toHaveLength(2); // the repository's clone, and the one the lease from before was made in
  });
});
