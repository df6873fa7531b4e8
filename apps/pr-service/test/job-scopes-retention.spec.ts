import 'reflect-metadata';
import { randomUUID } from 'node:crypto';
import type { INestApplication } from '@nestjs/common';
import {
  eventSubject,
  JobChecksFailed,
  JobClaimRolledBack,
  JobEnqueued,
  JobFinished,
  JobPushReported,
  ProductRegistered,
  pullRequestIdFor,
  type EventEnvelope,
} from '@gantry/contracts';
import type { RetentionPass } from '@gantry/service-runtime';
import { createTestWorld, startInProcess, type TestWorld } from '@gantry/service-runtime/testing';
import { eventually } from '@gantry/testing';
import { AppModule } from '../src/app.module.js';
import { JOB_FACTS_CONSUMER } from '../src/application/job-facts.js';
import { JobScopesRetention, jobScopesRetentionMs } from '../src/application/job-scopes-retention.js';
import { EFFECTS_CONSUMER } from '../src/application/reconciler.js';
import { pruneJobScopes } from '../src/infrastructure/persistence/job-scopes-retention.js';

/*
 * The retention of `job_scopes` (docs/pr-service.md, "Retention of job scopes"): a job's row goes once
 * no event about it can reach the service any more — the receipt window plus twice the jobs stream's
 * max age (with its clock margin) after its end — and the pull request of its branch, if it has a
 * head, settled long enough ago that no red checks reported before can still come back as a
 * JobChecksFailed about it; a row a dead letter names stays. Passes are run at chosen times (from the
 * database's clock the rows were stamped with); the service's own pruning job, at the real time,
 * reaches none of them.
 */
const JOBS_WINDOW_MS = 16_500;
const PRS_WINDOW_MS = 11_000;
const RECEIPT_TTL_MS = 30_000;
const ENDED_MS = RECEIPT_TTL_MS + 2 * JOBS_WINDOW_MS;
const SETTLED_MS = RECEIPT_TTL_MS + 2 * PRS_WINDOW_MS + ENDED_MS;
const REPOSITORY = 'acme/shop';

describe('retention of the pr-service\'s job scopes', () => {
  let world: TestWorld;
  let app: INestApplication;
  let retention: JobScopesRetention;
  let position = 1000;

  beforeAll(async () => {
    world = await createTestWorld('pr_job_scopes');
    app = await startInProcess(AppModule, world, {
      GANTRY_GITHUB_WEBHOOK_SECRETS: 'whsec-scopes',
      GANTRY_GITHUB_API_URL: 'http://127.0.0.1:9',
      GANTRY_GITHUB_TOKEN: 'unused',
    });
    retention = app.get(JobScopesRetention);
    await world.bus.ensureEventStream('jobs');
  }, 60_000);
  afterAll(async () => {
    await app?.close();
    await world?.close();
  });

  const pass = (at: Date, windows: { jobs?: number; prs?: number } = {}): RetentionPass => ({
    now: at,
    pool: world.db,
    redeliveryWindowMs: (consumer) =>
      consumer === JOB_FACTS_CONSUMER ? (windows.jobs ?? JOBS_WINDOW_MS) : consumer === EFFECTS_CONSUMER ? (windows.prs ?? PRS_WINDOW_MS) : 0,
    receiptTtlMs: RECEIPT_TTL_MS,
  });
  const dbNow = async () => (await world.db.query<{ now: Date }>(`SELECT now()`)).rows[0]!.now;
  const scope = async (jobId: string) =>
    (await world.db.query<{ ended_at: Date | null }>(`SELECT ended_at FROM job_scopes WHERE job_id = $1`, [jobId])).rows[0];
  const newJob = () => `job-${randomUUID()}`;
  const newBranch = () => `feat/retention-${randomUUID().slice(0, 8)}`;

  /** A job event as the job service's relay publishes it; resolves once the service handled it. */
  const publish = async (type: string, streamId: string, data: Record<string, unknown>) => {
    const envelope: EventEnvelope = {
      eventId: randomUUID(), type, schemaVersion: 1, streamId, streamVersion: 1, position: ++position,
      occurredAt: new Date().toISOString(), correlationId: `test-${streamId}`, causationId: null, idempotencyKey: null, actor: null, data,
    };
    await world.bus.js.publish(eventSubject(world.naming, 'jobs', type, streamId), JSON.stringify(envelope), { msgID: envelope.eventId });
    await eventually(
      async () => (await world.db.query(`SELECT 1 FROM inbox WHERE consumer = $1 AND event_id = $2`, [JOB_FACTS_CONSUMER, envelope.eventId])).rowCount === 1,
      { what: `${type} handled`, timeoutMs: 30_000 },
    );
  };
  const enqueue = (jobId: string, branch: string) =>
    publish('JobEnqueued', jobId, { ...JobEnqueued.examples.valid[0], jobId, branch, baseRef: branch, repository: REPOSITORY, targetBranch: 'main', taskId: 'T-533' });

  /** A row as the consumer writes it, and the view row of its branch's pull request (none when `pr` is absent). */
  async function scopeOf(options: { ended: Date | null; pr?: { phase: string; settled: boolean; updatedAt: Date } }) {
    const jobId = newJob();
    const branch = newBranch();
    await world.db.query(
      `INSERT INTO job_scopes (job_id, product_id, repository, branch, target_branch, task_id, ended_at) VALUES ($1, 'product-42', $2, $3, 'main', 'T-1', $4)`,
      [jobId, REPOSITORY, branch, options.ended],
    );
    if (options.pr) {
      await world.db.query(
        `INSERT INTO pull_requests (pull_request_id, repository, branch, phase, settled, state, updated_at) VALUES ($1, $2, $3, $4, $5, '{}', $6)`,
        [pullRequestIdFor(REPOSITORY, branch), REPOSITORY, branch, options.pr.phase, options.pr.settled, options.pr.updatedAt],
      );
    }
    return jobId;
  }
  const after = (at: Date, ms: number) => new Date(at.getTime() + ms);

  it('the retentions: after the end, the receipt window plus twice the jobs stream\'s; after the settlement, that and the same over the prs stream; none without an age limit', () => {
    expect(jobScopesRetentionMs(pass(new Date()))).toEqual({ ended: ENDED_MS, settled: SETTLED_MS });
    expect(jobScopesRetentionMs(pass(new Date(), { jobs: 0 }))).toEqual({ ended: 0, settled: 0 });
    expect(jobScopesRetentionMs(pass(new Date(), { prs: 0 }))).toEqual({ ended: 0, settled: 0 });
  });

  it('records a job\'s end when it is cancelled or finishes, and a requeue is no end', async () => {
    const jobId = newJob();
    await enqueue(jobId, newBranch());
    expect((await scope(jobId))?.ended_at).toBeNull();
    await publish('JobClaimRolledBack', jobId, { ...JobClaimRolledBack.examples.valid[0], jobId, outcome: 'REQUEUED' });
    expect((await scope(jobId))?.ended_at).toBeNull();
    await publish('JobCancelled', jobId, { jobId, previousStatus: 'QUEUED', revokedLeaseToken: null, reason: 'not needed', taskStatus: null, cancelledAt: new Date().toISOString() });
    const ended = (await scope(jobId))!.ended_at!;
    expect(Math.abs((await dbNow()).getTime() - ended.getTime())).toBeLessThan(60_000);

    const failed = newJob();
    await enqueue(failed, newBranch());
    await publish('JobFinished', failed, { ...JobFinished.examples.valid[0], jobId: failed, jobStatus: 'FAILED', taskStatus: null, error: 'it broke' });
    expect((await scope(failed))?.ended_at).not.toBeNull();
  });

  it('keeps an ended job\'s row until the retention has passed, then deletes it, when its branch never had a head', async () => {
    const ended = await dbNow();
    const noPullRequest = await scopeOf({ ended });
    const noHead = await scopeOf({ ended, pr: { phase: 'none', settled: false, updatedAt: ended } });
    const running = await scopeOf({ ended: null });
    await retention.prune(pass(after(ended, ENDED_MS - 1000)));
    expect(await scope(noPullRequest)).toBeDefined();
    expect(await scope(noHead)).toBeDefined();
    await retention.prune(pass(after(ended, ENDED_MS + 1000)));
    expect(await scope(noPullRequest)).toBeUndefined();
    expect(await scope(noHead)).toBeUndefined();
    await retention.prune(pass(after(ended, 100 * SETTLED_MS)));
    expect(await scope(running)).toBeDefined();
  });

  it('keeps an ended job\'s row while its pull request is open, and until the retention after it settled has passed', async () => {
    const ended = await dbNow();
    const open = await scopeOf({ ended, pr: { phase: 'waiting_for_checks', settled: false, updatedAt: ended } });
    const merged = await scopeOf({ ended, pr: { phase: 'merged', settled: true, updatedAt: after(ended, ENDED_MS) } });
    const closed = await scopeOf({ ended, pr: { phase: 'closed', settled: true, updatedAt: ended } });
    await retention.prune(pass(after(ended, ENDED_MS + SETTLED_MS - 1000)));
    expect(await scope(merged)).toBeDefined();
    expect(await scope(closed)).toBeUndefined();
    await retention.prune(pass(after(ended, ENDED_MS + SETTLED_MS + 1000)));
    expect(await scope(merged)).toBeUndefined();
    await retention.prune(pass(after(ended, 100 * SETTLED_MS)));
    expect(await scope(open)).toBeDefined();
  });

  it('keeps a job a dead letter names, and everything while a stream keeps events without an age limit', async () => {
    const ended = await dbNow();
    const lettered = await scopeOf({ ended });
    const unlimited = await scopeOf({ ended });
    await world.db.query(
      `INSERT INTO dead_letters (consumer, subject, event_id, payload, error) VALUES ($1, 'jobs.evt.JobChecksFailed', $2, $3, '{}')`,
      [JOB_FACTS_CONSUMER, randomUUID(), JSON.stringify({ type: 'JobChecksFailed', data: { jobId: lettered } })],
    );
    const later = after(ended, 10 * SETTLED_MS);
    await retention.prune(pass(later, { prs: 0 }));
    expect(await scope(unlimited)).toBeDefined();
    await retention.prune(pass(later));
    expect(await scope(lettered)).toBeDefined();
    expect(await scope(unlimited)).toBeUndefined();
    await world.db.query(`DELETE FROM dead_letters WHERE consumer = $1`, [JOB_FACTS_CONSUMER]);
    await retention.prune(pass(later));
    expect(await scope(lettered)).toBeUndefined();
  });

  it('red checks on the head a finished job pushed, long after its end, still find its scope while the pull request is open: its task is reopened', async () => {
    await publish('ProductRegistered', 'product-42', { ...ProductRegistered.examples.valid[0], repository: REPOSITORY });
    const jobId = newJob();
    const branch = newBranch();
    await enqueue(jobId, branch);
    await publish('JobPushReported', jobId, { ...JobPushReported.examples.valid[0], jobId, branch });
    await publish('JobFinished', jobId, { ...JobFinished.examples.valid[0], jobId });
    const ended = (await scope(jobId))!.ended_at!;
    const prId = pullRequestIdFor(REPOSITORY, branch);
    const { rows } = await world.db.query<{ settled: boolean; phase: string }>(`SELECT settled, phase FROM pull_requests WHERE pull_request_id = $1`, [prId]);
    expect(rows[0]).toMatchObject({ settled: false });
    expect(rows[0]!.phase).not.toBe('none');

    // Long past the job's own retention: pruned on that alone, the red checks below would be handed
    // back as if the job's enqueue were still to come, again and again, and the task never reopened.
    await retention.prune(pass(after(ended, 10 * SETTLED_MS)));
    expect(await scope(jobId)).toBeDefined();
    await publish('JobChecksFailed', jobId, { ...JobChecksFailed.examples.valid[0], jobId });
    const reopened = await world.db.query(`SELECT 1 FROM events WHERE stream_id = $1 AND type = 'PullRequestScopeTaskReopened'`, [prId]);
    expect(reopened.rowCount).toBe(1);
    // The red checks are the job's last event: its retention counts again from them.
    expect((await scope(jobId))!.ended_at!.getTime()).toBeGreaterThanOrEqual(ended.getTime());
  }, 120_000);

  it('two replicas pruning at once delete each row once, and nothing the other keeps', async () => {
    // Ended a day ahead of the other tests' rows (which a first pass clears): only these are left for the passes.
    const ended = after(await dbNow(), 24 * 60 * 60 * 1000);
    const prune = { endedBefore: ended, settledBefore: ended, consumer: JOB_FACTS_CONSUMER, batchSize: 1000, maxBatches: 100 };
    await pruneJobScopes(world.db, prune);
    const ids = await Promise.all(Array.from({ length: 20 }, () => scopeOf({ ended })));
    const kept = await scopeOf({ ended: null });
    const both = { ...prune, endedBefore: after(ended, 1000), batchSize: 3 };
    const [a, b] = await Promise.all([pruneJobScopes(world.db, both), pruneJobScopes(world.db, both)]);
    expect(a + b).toBe(20);
    expect((await world.db.query(`SELECT count(*)::int AS n FROM job_scopes WHERE job_id = ANY($1)`, [ids])).rows[0].n).toBe(0);
    expect(await scope(kept)).toBeDefined();
  });
});
