import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Controller } from '@nestjs/common';
import {
  acquireWorktree,
  deriveIdempotencyKey,
  ErrorCode,
  eventSubject,
  JobClaimed,
  jobExampleIds,
  listWorktreeLeases,
  renewWorktreeLease,
  type EventEnvelope,
  type ReplyOf,
  type RequestOf,
} from '@gantry/contracts';
import { createGitFixture, type GitFixture } from '@gantry/git/testing';
import { CommandClient } from '@gantry/messaging';
import { CommandHandler } from '@gantry/service-runtime';
import { createTestWorld, startTestService, type TestService, type TestWorld } from '@gantry/service-runtime/testing';
import { eventually, startApp, type RunningApp } from '@gantry/testing';
import { WorktreeLeaseClient, type WorktreeRequest } from './worktree-lease-client.js';

/** A job the worktree service has seen claimed, as the job service's relay publishes it. */
async function claimedJob(world: TestWorld): Promise<string> {
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

  it('a grant stored for a try whose reply was lost, answered seconds later, is counted to end no later than the service ends it', async () => {
    const request: WorktreeRequest = { jobId: await claimedJob(world), jobLeaseToken: 1, repositoryUrl: git.origin, branch: 'feature/late-grant', baseRef: 'main', leaseDurationMs: 60_000 };
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

/**
 * A renewal's end across a restart of the worktree service: its first try decided and the service
 * killed before it answered, the next start resuming the held lease and then slow to serve commands
 * (the runner's tries meanwhile find nobody serving, and that time does not count against the
 * lease), and the repeat answered from the renewal's receipt (docs/jobs.md, "A runner's clock").
 */
describe("a worktree renewal's end, by the runner's clock, across a restart of the worktree service", () => {
  const RESUMED = 'worktree-start:resumed-key';
  let world: TestWorld;
  let git: GitFixture;
  let service: RunningApp | undefined;

  beforeAll(async () => {
    world = await createTestWorld('runner-wt-renew');
    git = createGitFixture();
  });
  afterAll(async () => {
    await service?.kill('SIGTERM');
    await world?.close();
    git?.cleanup();
  });

  const start = (env: Record<string, string>, waitReady = true) =>
    startApp('worktree-service', {
      schema: world.name,
      naming: world.naming,
      env: { GANTRY_WORKTREE_ROOT: `${git.dir}/worktree-root`, GANTRY_WORKTREE_SWEEP_INTERVAL_MS: '200', ...env },
      waitReady,
    });

  it('a renewal decided before the service died, answered from its receipt after a start that resumed the lease, is counted to end no later than the service ends it', async () => {
    const first = await start({ GANTRY_TEST_CRASH_AT: 'worktree-renew:decided' });
    service = first;
    const leaseDurationMs = 60_000;
    const leases = new WorktreeLeaseClient(world.client, { tryTimeoutMs: 2_000 });
    const { grant, expiresAt: granted } = await leases.acquire({
      jobId: await claimedJob(world), jobLeaseToken: 1, repositoryUrl: git.origin, branch: 'feature/renewed-across-a-start', baseRef: 'main', leaseDurationMs,
    });

    // The renewal's first try is decided, and the service dies before it answers: that try gets no reply.
    const renewing = leases.renew(grant, leaseDurationMs, 1, granted);
    await eventually(() => first.process.signalCode === 'SIGKILL', { what: 'the worktree service killed right after the renewal was decided' });
    const renewals = `SELECT count(*) AS n FROM events WHERE type = 'WorktreeLeaseRenewed' AND data->>'leaseId' = $1 AND data->>'resumedAtStart' IS NULL`;
    expect(Number((await world.db.query(renewals, [grant.leaseId])).rows[0].n)).toBe(1);

    // Started again: it resumes the held lease, its lease clock running again from then, and is slow to serve.
    const second = await start({ GANTRY_TEST_HOLD_AT: RESUMED }, false);
    service = second;
    await eventually(() => second.output().includes(`"testHold":"${RESUMED}"`), { what: 'the start held after its resumption', timeoutMs: 120_000 });
    // A start this much slower between its resumption and its first command than the try whose reply
    // was lost took: the runner's tries meanwhile find nobody serving.
    await sleep(5_000);
    second.process.kill('SIGUSR2');

    // Asked again under its key, the renewal is answered from its receipt.
    const { expiresAt } = await renewing;
    expect(Number((await world.db.query(renewals, [grant.leaseId])).rows[0].n)).toBe(1);
    const { rows } = await world.db.query<{ expires_at: Date }>(`SELECT expires_at FROM worktree_leases WHERE lease_id = $1`, [grant.leaseId]);
    // One host, one clock: the service's expiry and the runner's reckoning can be compared here.
    expect(expiresAt).toBeLessThanOrEqual(rows[0]!.expires_at.getTime());
    // Not far before it either: the lease as the start resumed it, not as the renewal first set it.
    expect(expiresAt).toBeGreaterThan(rows[0]!.expires_at.getTime() - 2_000);
  }, 240_000);
});

/** How long the older worktree service below takes to answer: the worktree being prepared, a renewal being written. */
const OLDER_ANSWER_MS = 500;

/** A worktree service of the version before answers said what is left of a lease: its grants and renewals carry only `expiresAt`. */
@Controller()
class OlderWorktreeService {
  @CommandHandler(acquireWorktree)
  async acquire(request: RequestOf<typeof acquireWorktree>): Promise<ReplyOf<typeof acquireWorktree>> {
    await sleep(OLDER_ANSWER_MS);
    return {
      leaseId: randomUUID(),
      token: 1,
      worktreeKey: 'shop-feature-older-1a2b3c4d5e6f',
      path: '/srv/worktrees/shop-feature-older-1a2b3c4d5e6f',
      expiresAt: new Date(Date.now() + request.leaseDurationMs).toISOString(),
      baseSha: '4b825dc642cb6eb9a060e54bf8d69288fbee4904',
    };
  }

  @CommandHandler(renewWorktreeLease)
  async renew(request: RequestOf<typeof renewWorktreeLease>): Promise<ReplyOf<typeof renewWorktreeLease>> {
    await sleep(OLDER_ANSWER_MS);
    return { leaseId: request.leaseId, token: request.token, expiresAt: new Date(Date.now() + request.leaseDurationMs!).toISOString() };
  }
}

/**
 * A runner beside a worktree service that does not say what is left of a lease (docs/jobs.md, "A
 * runner's clock"): it counts a grant as the duration it asked for from the grant's arrival, and a
 * renewal from when it first asked.
 */
describe("a worktree lease's end, by the runner's clock, beside an older worktree service", () => {
  let older: TestService;
  let leases: WorktreeLeaseClient;

  beforeAll(async () => {
    older = await startTestService({ label: 'runner-wt-older', context: 'worktrees', controllers: [OlderWorktreeService] });
    leases = new WorktreeLeaseClient(older.app.get(CommandClient), { tryTimeoutMs: 30_000 });
  });
  afterAll(async () => {
    await older?.close();
  });

  it('a grant without what is left of its lease is counted the duration asked for from its arrival; a renewal without it, from when it was first asked', async () => {
    const leaseDurationMs = 60_000;
    const request: WorktreeRequest = { jobId: `job-${randomUUID()}`, jobLeaseToken: 1, repositoryUrl: 'https://github.com/acme/shop.git', branch: 'feature/older', baseRef: 'main', leaseDurationMs };
    const askedAt = Date.now();
    const { grant, expiresAt: granted } = await leases.acquire(request);
    const grantedAt = Date.now();
    expect(grant.expiresInMs).toBeUndefined();
    expect(granted - leaseDurationMs).toBeGreaterThanOrEqual(askedAt + OLDER_ANSWER_MS);
    expect(granted - leaseDurationMs).toBeLessThanOrEqual(grantedAt);

    const renewAskedAt = Date.now();
    const { reply, expiresAt: renewed } = await leases.renew(grant, leaseDurationMs, 1, granted);
    const renewedAt = Date.now();
    expect(reply.expiresInMs).toBeUndefined();
    expect(renewed - leaseDurationMs).toBeGreaterThanOrEqual(renewAskedAt);
    expect(renewed - leaseDurationMs).toBeLessThanOrEqual(renewedAt - OLDER_ANSWER_MS);
  });
});
