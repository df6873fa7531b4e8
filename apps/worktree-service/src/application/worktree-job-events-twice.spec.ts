import { writeFileSync } from 'node:fs';
import path from 'node:path';
import type { INestApplication } from '@nestjs/common';
import { acquireWorktree, JobFinished, streamName } from '@gantry/contracts';
import { plainGit as git } from '@gantry/git/testing';
import { consumerCaughtUp, deliverAgain, eventually, handledByConsumer } from '@gantry/testing';
import { JOBS_CONSUMER } from './job-lifecycle.js';
import { claimedJob, createWorld, startInProcess, type TestWorld } from './testing/world.js';

/*
 * The consumer of the jobs stream (docs/architecture.md, "Consumers and their duplicates"): a job's
 * terminal event that comes again — after its acknowledgement was lost, or as copies taken at once
 * by two replicas of the durable — releases the claim's lease once: one release, one rescue of what
 * the agent left, one rescue branch.
 */
describe('a job event delivered more than once to the worktree service (two replicas, real git)', () => {
  let world: TestWorld;
  const apps: INestApplication[] = [];

  beforeAll(async () => {
    world = await createWorld('wt-events-twice');
    apps.push(await startInProcess(world), await startInProcess(world));
  }, 60_000);
  afterAll(async () => {
    for (const app of apps) await app.close();
    await world?.close();
  });

  const countOf = (type: string, leaseId: string) =>
    world.count(`SELECT count(*) AS n FROM events WHERE type = $1 AND data->>'leaseId' = $2`, [type, leaseId]);

  it("a holder's JobFinished delivered four times at once and again after it was handled releases its lease once, with one rescue branch", async () => {
    const jobId = await claimedJob(world);
    const grant = await world.client.request(acquireWorktree, {
      jobId, jobLeaseToken: 1, repositoryUrl: world.git.origin, branch: 'feature/twice', baseRef: 'main', leaseDurationMs: 600_000, idempotencyKey: `acquire:${jobId}`,
    }, { timeoutMs: 60_000 });
    writeFileSync(path.join(grant.path, 'left-behind.txt'), 'work the runner never committed\n');

    const finished = await world.publishJobEvent('JobFinished', jobId, { ...JobFinished.examples.valid[0], jobId, leaseToken: 1 });
    // Copies of the same event at once, spread by the durable over both replicas.
    const lastCopy = await deliverAgain(world.bus.js, world.naming, 'jobs', finished, 3);
    await consumerCaughtUp(world.bus.jsm, streamName(world.naming, 'jobs'), JOBS_CONSUMER, { upTo: lastCopy });
    await handledByConsumer(world.db, JOBS_CONSUMER, finished.eventId);
    await eventually(async () => (await countOf('WorktreeReleased', grant.leaseId)) === 1, { what: 'the lease released' });

    // Once more after it was handled: an acknowledgement lost.
    const late = await deliverAgain(world.bus.js, world.naming, 'jobs', finished);
    await consumerCaughtUp(world.bus.jsm, streamName(world.naming, 'jobs'), JOBS_CONSUMER, { upTo: late });

    expect(await countOf('WorktreeReleaseRequested', grant.leaseId)).toBe(1);
    expect(await countOf('WorktreeRescued', grant.leaseId)).toBe(1);
    expect(await countOf('WorktreeReleased', grant.leaseId)).toBe(1);
    expect(await world.count(`SELECT count(*) AS n FROM inbox WHERE consumer = $1 AND event_id = $2`, [JOBS_CONSUMER, finished.eventId])).toBe(1);
    const rescues = git(grant.path, 'for-each-ref', '--format=%(refname)', 'refs/heads/gantry/rescue').split('\n').filter((ref) => ref.includes(grant.worktreeKey));
    expect(rescues).toHaveLength(1);
  }, 120_000);
});
