import { acquireWorktree, ErrorCode, JobFinished, streamName, type GantryError, type WorktreeLeaseGrant } from '@gantry/contracts';
import pg from 'pg';
import { eventually, testDatabaseUrl } from '@gantry/testing';
import { JOBS_CONSUMER } from './job-lifecycle.js';
import { claimedJob, createWorld, refusal, type TestWorld } from './testing/world.js';
import { startServiceProcess, type ServiceProcess } from './testing/process.js';

/*
 * An acquire racing the end of its job's claim (docs/worktrees.md, "When a lease ends"): the jobs
 * consumer releases the claim's leases when its end arrives, and an acquire refuses a claim already
 * known to have ended — each reading what the other may not have written yet. Held between the two
 * steps of either side (the test-only GANTRY_TEST_HOLD_AT), the lease still ends: the acquire is
 * refused and leaves no lease that lives until it expires.
 */
describe('an acquire racing the end of its claim (a real process)', () => {
  let world: TestWorld;
  let service: ServiceProcess | null = null;
  let n = 0;

  beforeAll(async () => {
    world = await createWorld('wt-claim-race');
  });
  afterEach(async () => {
    await service?.kill('SIGKILL');
    service = null;
  });
  afterAll(async () => {
    await world?.close();
  });

  const acquire = (jobId: string, branch: string): Promise<WorktreeLeaseGrant> =>
    world.client.request(
      acquireWorktree,
      { jobId, jobLeaseToken: 1, repositoryUrl: world.git.origin, branch, baseRef: 'main', leaseDurationMs: 600_000, idempotencyKey: `acquire:${++n}` },
      { timeoutMs: 60_000 },
    );
  const finish = (jobId: string) => world.publishJobEvent('JobFinished', jobId, { ...JobFinished.examples.valid[0], jobId, leaseToken: 1 });
  const leasesOf = async (jobId: string) => (await world.db.query(`SELECT status FROM worktree_leases WHERE job_id = $1`, [jobId])).rows.map((r) => r.status as string);
  const ended = async (jobId: string) => ['withdrawn', 'released'].includes((await leasesOf(jobId))[0] ?? '');
  /** Every job event delivered to the service and acknowledged. */
  const jobEventsDone = async () => {
    const info = await world.bus.jsm.consumers.info(streamName(world.naming, 'jobs'), JOBS_CONSUMER);
    return info.num_pending === 0 && info.num_ack_pending === 0;
  };
  const held = (point: string) => eventually(() => service!.output().includes(`"testHold":"${point}"`), { what: `held at ${point}`, timeoutMs: 60_000 });

  /**
   * An acquire held between its check of the claim and its lease's request while the claim's finish is
   * handled (its leases looked for, none there yet); the acquire is not let go.
   */
  async function finishedWhileAcquireHeld(branch: string): Promise<{ jobId: string; asked: Promise<GantryError> }> {
    service = await startServiceProcess(world, { GANTRY_TEST_HOLD_AT: 'worktree-acquire:claim-checked' });
    const jobId = await claimedJob(world);
    const asked = refusal(acquire(jobId, branch));
    await held('worktree-acquire:claim-checked');
    await finish(jobId);
    await eventually(async () => (await world.count(`SELECT count(*) AS n FROM job_statuses WHERE job_id = $1 AND status = 'DONE'`, [jobId])) === 1, {
      what: 'the finish recorded',
    });
    await eventually(jobEventsDone, { what: 'the finish acknowledged' });
    return { jobId, asked };
  }

  it('the claim ends between the acquire’s check of it and its request: the acquire is refused and its lease ends', async () => {
    const { jobId, asked } = await finishedWhileAcquireHeld('feature/race-before-request');
    service!.process.kill('SIGUSR2');

    expect((await asked).code).toBe(ErrorCode.STALE_FENCE);
    await eventually(() => ended(jobId), { what: 'the lease ended' });
  }, 180_000);

  it('the acquire’s look at its claim again, once its lease is in, loses its connection to the database: the look is done again, the acquire is refused and its lease ends', async () => {
    const { jobId, asked } = await finishedWhileAcquireHeld('feature/race-look-lost');
    // The job's lock held here, so that the acquire's look waits for it; then that look's connection is cut.
    const locker = new pg.Client({ connectionString: testDatabaseUrl, options: `-c search_path=${world.name}` });
    await locker.connect();
    try {
      await locker.query('BEGIN');
      await locker.query(`SELECT pg_advisory_xact_lock(hashtextextended('gantry.worktree.claim-ends:' || current_schema() || ':' || $1, 0))`, [jobId]);
      const lockerPid = (await locker.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
      service!.process.kill('SIGUSR2');
      const looking = await eventually(
        async () => (await world.db.query<{ pid: number }>(`SELECT pid FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, [lockerPid])).rows[0]?.pid,
        { what: 'the acquire looking at its claim again' },
      );
      expect(await leasesOf(jobId)).toHaveLength(1);
      await world.db.query('SELECT pg_terminate_backend($1)', [looking]);
    } finally {
      await locker.query('ROLLBACK').catch(() => undefined);
      await locker.end();
    }

    expect((await asked).code).toBe(ErrorCode.STALE_FENCE);
    await eventually(() => ended(jobId), { what: 'the lease ended', timeoutMs: 30_000 });
  }, 180_000);

  it('the claim’s end looks for its leases before the acquire’s request is in, and is recorded after the acquire looked at the claim: the acquire is refused and its lease ends', async () => {
    service = await startServiceProcess(world, { GANTRY_TEST_HOLD_AT: 'worktree-jobs:claim-leases-read' });
    const jobId = await claimedJob(world);
    await finish(jobId);
    // The consumer found no lease of the claim and has not committed the job's end yet.
    await held('worktree-jobs:claim-leases-read');
    const asked = refusal(acquire(jobId, 'feature/race-after-request'));
    await eventually(async () => (await leasesOf(jobId)).length === 1, { what: 'the lease requested' });
    service.process.kill('SIGUSR2');

    expect((await asked).code).toBe(ErrorCode.STALE_FENCE);
    await eventually(async () => (await world.count(`SELECT count(*) AS n FROM job_statuses WHERE job_id = $1 AND status = 'DONE'`, [jobId])) === 1, {
      what: 'the finish recorded',
    });
    await eventually(() => ended(jobId), { what: 'the lease ended' });
  }, 180_000);
});
