import { randomUUID } from 'node:crypto';
import type { INestApplication } from '@nestjs/common';
import { acquireWorktree, ErrorCode } from '@gantry/contracts';
import { claimedJob, createWorld, refusal, startInProcess, type TestWorld } from './testing/world.js';

/*
 * A lease that could not be prepared says whose fault that is (docs/worktrees.md, "Whose fault a
 * refused lease is"): the job's when the origin lacks what the job names (its base ref), so that its
 * claim spends an attempt; anything of the host is the host's (a shared clone it cannot use:
 * worktree-clone-half-made.spec.ts).
 */
describe('a lease refused for what the job names', () => {
  let world: TestWorld;
  let app: INestApplication;

  beforeAll(async () => {
    world = await createWorld('wt-refusal-fault');
    app = await startInProcess(world);
  });
  afterAll(async () => {
    await app?.close();
    await world?.close();
  });

  it("a base ref the origin does not have is the job's fault", async () => {
    const request = { jobId: await claimedJob(world), jobLeaseToken: 1, repositoryUrl: world.git.origin, branch: 'feature/no-base', baseRef: 'no-such-base' };
    const refused = await refusal(world.client.request(acquireWorktree, { ...request, leaseDurationMs: 600_000, idempotencyKey: `acquire:${randomUUID()}` }, { timeoutMs: 60_000 }));
    expect(refused.code).toBe(ErrorCode.PRECONDITION_FAILED);
    expect(refused.message).toMatch(/base ref no-such-base is not a branch, tag or commit of the origin/);
    expect(refused.details).toMatchObject({ fault: 'JOB' });
  });
});
