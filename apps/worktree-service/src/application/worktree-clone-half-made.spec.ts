import { existsSync, mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import type { INestApplication } from '@nestjs/common';
import { acquireWorktree, ErrorCode, releaseWorktree, repositoryCloneName } from '@gantry/contracts';
import { createGitFixture, plainGit as git, type GitFixture } from '@gantry/git/testing';
import { claimedJob, createWorld, refusal, startInProcess, type TestWorld } from './testing/world.js';

/*
 * A shared clone is made by `git init --bare` and then given its origin (docs/worktrees.md, "Restart
 * and recovery"). A process group killed during that init — the first lease of a repository — leaves
 * a directory git does not take for a repository yet (no HEAD, no objects, a config.lock), made here as
 * such a kill leaves it. The next lease of the repository completes it; a directory of other content
 * at a clone's place is still not the service's to touch.
 */
describe('a shared clone whose git init was killed half-way', () => {
  let world: TestWorld;
  let app: INestApplication;
  let other: GitFixture;

  beforeAll(async () => {
    world = await createWorld('wt-clone-half');
    other = createGitFixture();
    app = await startInProcess(world);
  });
  afterAll(async () => {
    await app?.close();
    await world?.close();
    other?.cleanup();
  });

  const acquire = async (repositoryUrl: string, branch: string) =>
    world.client.request(
      acquireWorktree,
      { jobId: await claimedJob(world), jobLeaseToken: 1, repositoryUrl, branch, baseRef: 'main', leaseDurationMs: 600_000, idempotencyKey: `acquire:${randomUUID()}` },
      { timeoutMs: 60_000 },
    );
  const clonePathOf = (repositoryUrl: string) => path.join(world.root, 'repos', `${repositoryCloneName(repositoryUrl)}.git`);

  it('is completed by the next lease of the repository, which is granted', async () => {
    const clonePath = clonePathOf(world.git.origin);
    git(world.root, 'init', '--quiet', '--bare', clonePath);
    rmSync(path.join(clonePath, 'HEAD'));
    rmSync(path.join(clonePath, 'objects'), { recursive: true });
    writeFileSync(path.join(clonePath, 'config.lock'), '');

    const grant = await acquire(world.git.origin, 'feature/after-half-init');
    expect(grant.baseSha).toBe(world.git.sha('main'));
    expect(git(clonePath, 'rev-parse', '--is-bare-repository')).toBe('true');
    expect(existsSync(path.join(clonePath, 'config.lock'))).toBe(false);
    await world.client.request(releaseWorktree, { leaseId: grant.leaseId, token: grant.token, idempotencyKey: `release:${grant.leaseId}` }, { timeoutMs: 30_000 });
  });

  it('a directory with other content in a clone\'s place is refused and left as it is', async () => {
    const clonePath = clonePathOf(other.origin);
    mkdirSync(clonePath, { recursive: true });
    writeFileSync(path.join(clonePath, 'notes.txt'), 'not a repository\n');

    const refused = await refusal(acquire(other.origin, 'feature/foreign-clone'));
    expect(refused.code).toBe(ErrorCode.PRECONDITION_FAILED);
    expect(refused.message).toMatch(/is not a bare git repository/);
    // The host's fault, not the job's: its claim is handed back without spending an attempt (docs/worktrees.md, "Whose fault a refused lease is").
    expect(refused.details).toMatchObject({ fault: 'HOST' });
    expect(readdirSync(clonePath)).toEqual(['notes.txt']);
  });
});
