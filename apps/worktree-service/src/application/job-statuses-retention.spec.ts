import { randomUUID } from 'node:crypto';
import type { INestApplication } from '@nestjs/common';
import { acquireWorktree, ErrorCode, eventSubject, JobClaimRolledBack, JobFinished, JobStarted, releaseWorktree, type EventEnvelope } from '@gantry/contracts';
import type { RetentionPass } from '@gantry/service-runtime';
import { eventually } from '@gantry/testing';
import { pruneJobStatuses } from '../infrastructure/persistence/job-statuses-retention.js';
import { JOBS_CONSUMER } from './job-lifecycle.js';
import { JobStatusesRetention, jobStatusesRetentionMs } from './job-statuses-retention.js';
import { acquireForClaimedJob, claimedJob, createWorld, newJobId, refusal, startInProcess, type TestWorld } from './testing/world.js';

/*
 * The retention of `job_statuses` (docs/worktrees.md, "Retention of job statuses"): a job's row goes
 * once no event about it can reach the service any more — the receipt window plus twice the jobs
 * stream's max age (with its clock margin) after its end was recorded — and no lease of the job is
 * live, and no dead letter names it. Passes are run here at chosen times (by the database's clock
 * the rows were stamped with); the service's own pruning job, at the real time, reaches none of them.
 */
const WINDOW_MS = 16_500;
const RECEIPT_TTL_MS = 30_000;
const RETENTION_MS = RECEIPT_TTL_MS + 2 * WINDOW_MS;

describe('retention of the worktree service\'s job statuses', () => {
  let world: TestWorld;
  let app: INestApplication;
  let retention: JobStatusesRetention;

  beforeAll(async () => {
    world = await createWorld('wt-job-retention');
    app = await startInProcess(world);
    retention = app.get(JobStatusesRetention);
  }, 60_000);
  afterAll(async () => {
    await app?.close();
    await world?.close();
  });

  const pass = (at: Date, window = WINDOW_MS): RetentionPass => ({
    now: at,
    pool: world.db,
    redeliveryWindowMs: (consumer) => (consumer === JOBS_CONSUMER ? window : 0),
    receiptTtlMs: RECEIPT_TTL_MS,
  });
  const row = async (jobId: string) =>
    (await world.db.query<{ status: string; ended_at: Date | null }>(`SELECT status, ended_at FROM job_statuses WHERE job_id = $1`, [jobId])).rows[0];
  const endedAt = async (jobId: string): Promise<Date> => {
    await eventually(async () => (await row(jobId))?.ended_at != null, { what: `the end of ${jobId} recorded` });
    return (await row(jobId))!.ended_at!;
  };
  /** A row as the consumer writes it, ended (or not) at `ended`. */
  const insert = async (ended: Date | null, status = ended ? 'DONE' : 'RUNNING') => {
    const jobId = newJobId();
    await world.db.query(
      `INSERT INTO job_statuses (job_id, status, lease_token, ended_by, source_position, updated_at, ended_at) VALUES ($1, $2, 1, 'holder', 1, now(), $3)`,
      [jobId, status, ended],
    );
    return jobId;
  };
  /** A job event as the job service's relay publishes it, at a log position of our choosing (a redelivery of an older one). */
  const publishAt = async (position: number, type: string, jobId: string, data: Record<string, unknown>) => {
    const envelope: EventEnvelope = {
      eventId: randomUUID(), type, schemaVersion: 1, streamId: jobId, streamVersion: position, position,
      occurredAt: new Date().toISOString(), correlationId: `test-${jobId}`, causationId: null, idempotencyKey: null, actor: null, data,
    };
    await world.bus.js.publish(eventSubject(world.naming, 'jobs', type, jobId), JSON.stringify(envelope), { msgID: envelope.eventId });
    return envelope;
  };
  const handled = (envelope: EventEnvelope) =>
    eventually(async () => (await world.count(`SELECT count(*) AS n FROM inbox WHERE consumer = $1 AND event_id = $2`, [JOBS_CONSUMER, envelope.eventId])) === 1, {
      what: `${envelope.type} handled`,
    });

  it('the retention is the receipt window plus twice the stream\'s window; none without an age limit', () => {
    expect(jobStatusesRetentionMs(pass(new Date()))).toBe(RETENTION_MS);
    expect(jobStatusesRetentionMs(pass(new Date(), 0))).toBe(0);
  });

  it('records a job\'s end when its status becomes terminal, and a requeue is no end', async () => {
    const jobId = await claimedJob(world);
    expect((await row(jobId))!.ended_at).toBeNull();
    await world.publishJobEvent('JobClaimRolledBack', jobId, { ...JobClaimRolledBack.examples.valid[0], jobId, leaseToken: 1, outcome: 'REQUEUED' });
    await eventually(async () => (await row(jobId))?.status === 'QUEUED', { what: 'the requeue recorded' });
    expect((await row(jobId))!.ended_at).toBeNull();
    await world.publishJobEvent('JobFinished', jobId, { ...JobFinished.examples.valid[0], jobId, leaseToken: 1 });
    const ended = await endedAt(jobId);
    const dbNow = (await world.db.query<{ now: Date }>(`SELECT now()`)).rows[0]!.now;
    expect(Math.abs(dbNow.getTime() - ended.getTime())).toBeLessThan(60_000);
  });

  it('keeps an ended job\'s row until the retention has passed, then deletes it; a job not ended is kept', async () => {
    const ended = (await world.db.query<{ now: Date }>(`SELECT now()`)).rows[0]!.now;
    const done = await insert(ended);
    const running = await insert(null);
    await retention.prune(pass(new Date(ended.getTime() + RETENTION_MS - 1000)));
    expect(await row(done)).toBeDefined();
    await retention.prune(pass(new Date(ended.getTime() + RETENTION_MS + 1000)));
    expect(await row(done)).toBeUndefined();
    await retention.prune(pass(new Date(ended.getTime() + 100 * RETENTION_MS)));
    expect(await row(running)).toBeDefined();
  });

  it('keeps what may still be needed: a job a dead letter names, and everything while the stream keeps events without an age limit', async () => {
    const ended = (await world.db.query<{ now: Date }>(`SELECT now()`)).rows[0]!.now;
    const lettered = await insert(ended);
    const unlimited = await insert(ended);
    await world.db.query(
      `INSERT INTO dead_letters (consumer, subject, event_id, payload, error) VALUES ($1, 'jobs.evt.JobStarted', $2, $3, '{}')`,
      [JOBS_CONSUMER, randomUUID(), JSON.stringify({ type: 'JobStarted', data: { jobId: lettered } })],
    );
    const later = new Date(ended.getTime() + 10 * RETENTION_MS);
    await retention.prune(pass(later, 0));
    expect(await row(unlimited)).toBeDefined();
    await retention.prune(pass(later));
    expect(await row(lettered)).toBeDefined();
    expect(await row(unlimited)).toBeUndefined();
    await world.db.query(`DELETE FROM dead_letters WHERE consumer = $1`, [JOBS_CONSUMER]);
    await retention.prune(pass(later));
    expect(await row(lettered)).toBeUndefined();
  });

  it('keeps a cancelled job\'s row while its lease waits for its holder, and prunes it once the holder released it', async () => {
    const grant = await acquireForClaimedJob(world, 'feature/retention');
    const { rows } = await world.db.query<{ job_id: string }>(`SELECT job_id FROM worktree_leases WHERE lease_id = $1`, [grant.leaseId]);
    const jobId = rows[0]!.job_id;
    await world.publishJobEvent('JobCancelled', jobId, { jobId, previousStatus: 'RUNNING', revokedLeaseToken: 1, reason: 'not needed', taskStatus: null, cancelledAt: new Date().toISOString() });
    const ended = await endedAt(jobId);
    await eventually(async () => (await world.count(`SELECT count(*) AS n FROM worktree_leases WHERE lease_id = $1 AND release_pending_cause IS NOT NULL`, [grant.leaseId])) === 1, {
      what: 'the lease waiting for its holder',
    });
    const later = new Date(ended.getTime() + 10 * RETENTION_MS);
    await retention.prune(pass(later));
    // The stale reset and the holder's release still judge the lease by this row (claimVerdict).
    expect((await row(jobId))?.status).toBe('CANCELLED');
    await world.client.request(releaseWorktree, { leaseId: grant.leaseId, token: grant.token, idempotencyKey: `release:${grant.leaseId}` }, { timeoutMs: 30_000 });
    await eventually(async () => (await world.count(`SELECT count(*) AS n FROM worktree_leases WHERE lease_id = $1 AND status = 'released'`, [grant.leaseId])) === 1, {
      what: 'the lease released',
    });
    await retention.prune(pass(later));
    expect(await row(jobId)).toBeUndefined();
  }, 120_000);

  it('a late redelivery of an earlier event of an ended job, within the retention, finds its row: the job stays ended and its claim gets no worktree', async () => {
    const jobId = await claimedJob(world);
    const started = { ...JobStarted.examples.valid[0], jobId, leaseToken: 1 };
    await world.publishJobEvent('JobFinished', jobId, { ...JobFinished.examples.valid[0], jobId, leaseToken: 1 });
    const ended = await endedAt(jobId);
    // A pass just before the retention ends: the row stays. Pruned now, the older JobStarted below
    // would write the job back as RUNNING, and its ended claim would get a worktree.
    await retention.prune(pass(new Date(ended.getTime() + RETENTION_MS - 1000)));
    await handled(await publishAt(1, 'JobStarted', jobId, started));
    expect((await row(jobId))?.status).toBe(JobFinished.examples.valid[0].jobStatus);
    const refused = await refusal(
      world.client.request(
        acquireWorktree,
        { jobId, jobLeaseToken: 1, repositoryUrl: world.git.origin, branch: 'feature/late', baseRef: 'main', leaseDurationMs: 600_000, idempotencyKey: `acquire:${randomUUID()}` },
        { timeoutMs: 60_000 },
      ),
    );
    expect(refused.code).toBe(ErrorCode.STALE_FENCE);
  }, 120_000);

  it('two replicas pruning at once delete each row once, and nothing the other keeps', async () => {
    // Ended a day ahead of the other tests' rows (which a first pass clears): only these are left for the passes.
    const base = (await world.db.query<{ now: Date }>(`SELECT now()`)).rows[0]!.now;
    const ended = new Date(base.getTime() + 24 * 60 * 60 * 1000);
    await pruneJobStatuses(world.db, { endedBefore: ended, consumer: JOBS_CONSUMER, batchSize: 1000, maxBatches: 100 });
    const ids = await Promise.all(Array.from({ length: 20 }, () => insert(ended)));
    const kept = await insert(null);
    const prune = { endedBefore: new Date(ended.getTime() + 1000), consumer: JOBS_CONSUMER, batchSize: 3, maxBatches: 100 };
    const [a, b] = await Promise.all([pruneJobStatuses(world.db, prune), pruneJobStatuses(world.db, prune)]);
    expect(a + b).toBe(20);
    expect(await world.count(`SELECT count(*) AS n FROM job_statuses WHERE job_id = ANY($1)`, [ids])).toBe(0);
    expect(await row(kept)).toBeDefined();
  });
});
