import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import type { INestApplication } from '@nestjs/common';
import { acquireWorktree, ErrorCode, repositoryCloneName } from '@gantry/contracts';
import { createGitFixture, type GitFixture } from '@gantry/git/testing';
import { claimedJob, createWorld, refusal, startInProcess, type TestWorld } from './testing/world.js';

/*
 * A lease that could not be prepared says whose fault that is (docs/worktrees.md, "Whose fault a
 * refused lease is"): the job's when the origin lacks what the job names (its base ref), so that its
 * claim spends an attempt; the host's for anything of the host (its disk, its clones, its paths), so
 * that a broken host does not spend the attempts of every job it takes.
 */
describe('whose fault a lease that could not be prepared is', () => {
  let world: TestWorld;
  let app: INestApplication;
  let other: GitFixture;

  beforeAll(async () => {
    world = await createWorld('wt-refusal-fault');
    other = createGitFixture();
    app = await startInProcess(world);
  });
  afterAll(async () => {
    await app?.close();
    await world?.close();
    other?.cleanup();
  });

  const acquire = async (repositoryUrl: string, branch: string, baseRef = 'main') =>
    world.client.request(
      acquireWorktree,
      { jobId: await claimedJob(world), jobLeaseToken: 1, repositoryUrl, branch, baseRef, leaseDurationMs: 600_000, idempotencyKey: `acquire:${randomUUID()}` },
      { timeoutMs: 60_000 },
    );

  it("a base ref the origin does not have is the job's fault", async () => {
    const refused = await refusal(acquire(world.git.origin, 'feature/no-base', 'no-such-base'));
    expect(refused.code).toBe(ErrorCode.PRECONDITION_FAILED);
    expect(refused.message).toMatch(/base ref no-such-base is not a branch, tag or commit of the origin/);
    expect(refused.details).toMatchObject({ fault: 'JOB' });
  });

  it("a shared clone of the host that cannot be used is the host's fault", async () => {
    const clonePath = path.join(world.root, 'repos', `${repositoryCloneName(other.origin)}.git`);
    mkdirSync(clonePath, { recursive: true });
    writeFileSync(path.join(clonePath, 'notes.txt'), 'not a repository\n');
    const refused = await refusal(acquire(other.origin, 'feature/host-broken'));
    expect(refused.code).toBe(ErrorCode.PRECONDITION_FAILED);
    expect(refused.message).toMatch(/is not a bare git repository/);
    expect(refused.details).toMatchObject({ fault: 'HOST' });
  });
});
