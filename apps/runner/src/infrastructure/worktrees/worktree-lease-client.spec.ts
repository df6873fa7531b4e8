import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { acquireWorktree, deriveIdempotencyKey, ErrorCode, eventSubject, JobClaimed, jobExampleIds, listWorktreeLeases, type EventEnvelope } from '@gantry/contracts';
import { createGitFixture, type GitFixture } from '@gantry/git/testing';
import { createTestWorld, type TestWorld } from '@gantry/service-runtime/testing';
import { eventually, startApp, type RunningApp } from '@gantry/testing';
import { WorktreeLeaseClient, type WorktreeRequest } from './worktree-lease-client.js';

/**
 * The runner's reckoning of a worktree lease's end against the real worktree service, when the
 * grant it gets is the answer stored for an earlier try whose reply never came (docs/jobs.md,
 * "A runner's clock").
 */
describe("a worktree grant's end, by the runner's clock", () => {
  let world: TestWorld;
  let git: GitFixture;
  let service: RunningApp;

  beforeAll(async () => {
    world = await createTestWorld('runner-wt-grant');
    git = createGitFixture();
    service = await startApp('worktree-service', {
      schema: world.name,
      naming: world.naming,
      env: { GANTRY_WORKTREE_ROOT: `${git.dir}/worktree-root`, GANTRY_WORKTREE_SWEEP_INTERVAL_MS: '200' },
    });
  }, 180_000);
  afterAll(async () => {
    await service?.kill('SIGTERM');
    await world?.close();
    git?.cleanup();
  });

  /** A job the worktree service has seen claimed, as the job service's relay publishes it. */
  async function claimedJob(): Promise<string> {
    const jobId = `job-${randomUUID()}`;
    await world.bus.ensureEventStream('jobs');
    const envelope: EventEnvelope = {
      eventId: randomUUID(), type: 'JobClaimed', schemaVersion: 1, streamId: jobId, streamVersion: 1, position: 1,
      occurredAt: new Date().toISOString(), correlationId: `test-${jobId}`, causationId: null, idempotencyKey: null, actor: null,
      data: { ...JobClaimed.examples.valid[0], jobId, leaseToken: 1, runnerId: jobExampleIds.runnerId },
    };
    await world.bus.js.publish(eventSubject(world.naming, 'jobs', 'JobClaimed', jobId), JSON.stringify(envelope), { msgID: envelope.eventId });
    await eventually(async () => Number((await world.db.query(`SELECT count(*) AS n FROM job_statuses WHERE job_id = $1`, [jobId])).rows[0].n) === 1, {
      what: `job ${jobId} known to the worktree service`,
    });
    return jobId;
  }

  it('a grant stored for a try whose reply was lost, answered seconds later, is counted to end no later than the service ends it', async () => {
    const request: WorktreeRequest = { jobId: await claimedJob(), jobLeaseToken: 1, repositoryUrl: git.origin, branch: 'feature/late-grant', baseRef: 'main', leaseDurationMs: 60_000 };
    // The runner's first try, as the runner sends it: the service decides and prepares the lease, its reply is lost.
    const firstTry = world.client.request(acquireWorktree, { ...request, idempotencyKey: deriveIdempotencyKey('runner/acquire-worktree', { jobId: request.jobId, jobLeaseToken: 1 }) }, { timeoutMs: 1 });
    await expect(firstTry).rejects.toMatchObject({ code: ErrorCode.TIMEOUT });
    await eventually(async () => (await world.client.request(listWorktreeLeases, { jobId: request.jobId })).leases.some((l) => l.status === 'ready'), {
      what: 'the lease ready for a try nobody waits for',
    });
    await sleep(2_000);

    // Asked again under its key: the grant of that lease, whose expiry was set when it became ready.
    const { grant, expiresAt } = await new WorktreeLeaseClient(world.client, { tryTimeoutMs: 30_000 }).acquire(request);
    // One host, one clock: the service's expiry and the runner's reckoning can be compared here.
    expect(expiresAt).toBeLessThanOrEqual(Date.parse(grant.expiresAt));
    // Not far before it either: what was left when the service answered, counted from the try's start.
    expect(expiresAt).toBeGreaterThan(Date.parse(grant.expiresAt) - 2_000);
  }, 120_000);
});
