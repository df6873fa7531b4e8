import { randomUUID } from 'node:crypto';
import type { INestApplication } from '@nestjs/common';
import {
  ErrorCode,
  cancelJob,
  cancelSprintRun,
  claimJob,
  commandSubject,
  createSprintRun,
  enqueueJob,
  eventSubject,
  finishJob,
  getJob,
  getSprintRun,
  listJobs,
  logCommit,
  logImplementation,
  logTestResult,
  markPrReadyForReview,
  rollbackClaim,
  PullRequestChecksFailed,
  PullRequestMergeConflict,
  reportPush,
  resumeSprintRun,
  returnTasksToTodo,
  startJob,
  streamName,
  updateProduct,
  type JobView,
} from '@gantry/contracts';
import { consumerCaughtUp, eventIdOf, eventually, handledByConsumer, relayed } from '@gantry/testing';
import { OWN_EVENTS_DURABLE } from '../src/application/durables.js';
import { eventsOfJobsOutsideSprintRuns } from '../src/infrastructure/job-store.js';
import { sprintRunEventTypes } from '../src/infrastructure/projections.js';
import { MAX_PAUSE_FILES_BYTES } from '../src/domain/index.js';
import { createWorld, finishClaimedDone, key, registerProducts, sha, startInProcess, type TestWorld } from './harness.js';

const PR = 'https://github.com/acme/shop/pull/102';

describe('sprint runs driven by job events and PR events', () => {
  let world: TestWorld;
  let app: INestApplication;

  /** The pr-service's side of mark_pr_ready_for_review, as the job service's effect calls it. */
  const readyRequests: Record<string, unknown>[] = [];
  /** The workflow engine's side of return_tasks_to_todo. */
  const returnRequests: Record<string, unknown>[] = [];

  beforeAll(async () => {
    world = await createWorld('sprints');
    world.bus.nc.subscribe(commandSubject(world.naming, 'prs', markPrReadyForReview.name), {
      callback: (_error, msg) => {
        const request = JSON.parse(new TextDecoder().decode(msg.data)) as Record<string, unknown>;
        readyRequests.push(request);
        msg.respond(JSON.stringify({ ok: true, result: { pullRequestId: 'pr-test', phase: 'ready_for_review', prUrl: PR } }));
      },
    });
    world.bus.nc.subscribe(commandSubject(world.naming, 'workflow', returnTasksToTodo.name), {
      callback: (_error, msg) => {
        const request = JSON.parse(new TextDecoder().decode(msg.data)) as { taskIds: string[] };
        returnRequests.push(request);
        msg.respond(JSON.stringify({ ok: true, result: { returned: [], unknownTaskIds: request.taskIds } }));
      },
    });
    app = await startInProcess(world);
    await registerProducts(world.client, ['product-42'], { repository: 'acme/shop', prStrategy: 'SPRINT' });
  });

  afterAll(async () => {
    await app?.close();
    await world?.close();
  });

  const sprintJobs = async (sprintRunId: string) => (await world.client.request(listJobs, { sprintRunId })).jobs;
  const run = (sprintRunId: string) => world.client.request(getSprintRun, { sprintRunId });
  /** Waits for the run's QUEUED job of `taskId`: the run queues its tasks one after the other. */
  const queuedJobOf = (sprintRunId: string, taskId: string) =>
    eventually(async () => (await sprintJobs(sprintRunId)).find((j) => j.taskId === taskId && j.status === 'QUEUED') ?? null, { what: `the job of ${taskId}` });

  /**
   * What the pr-service will publish: a contract-valid envelope on the prs stream. With `eventId`, an
   * event published before, delivered again (as a replay of the stream would).
   */
  async function publishPrEvent(type: string, data: Record<string, unknown>, eventId: string = randomUUID()) {
    const streamId = 'pr-acme_shop-sprint';
    const envelope = {
      eventId, type, schemaVersion: 1, streamId, streamVersion: 1, position: 1, occurredAt: new Date().toISOString(),
      correlationId: 'pr-test', causationId: null, idempotencyKey: null, actor: null, data,
    };
    await world.bus.js.publish(eventSubject(world.naming, 'prs', type, streamId), JSON.stringify(envelope), { msgID: randomUUID() });
    return eventId;
  }

  const PR_FACT_CONSUMERS: Record<string, string> = {
    [PullRequestMergeConflict.type]: 'job-service-sprint-runs-merge-conflicts',
    [PullRequestChecksFailed.type]: 'job-service-sprint-runs-checks-failed',
  };

  /** Publishes a PR fact and waits until the job service has handled it (its inbox row is committed). */
  async function deliverPrFact(type: string, data: Record<string, unknown>, eventId?: string) {
    const id = await publishPrEvent(type, data, eventId);
    await handledByConsumer(world.db, PR_FACT_CONSUMERS[type]!, id);
    return id;
  }

  const conflictOn = (branch: string, headSha: string) => ({ ...prFacts(branch), headSha, conflictingFiles: ['src/app.ts'] });
  const redChecksOn = (branch: string, headSha: string) => ({ ...prFacts(branch), headSha, failedChecks: [{ name: 'ci/test', conclusion: 'failure', detailsUrl: null }] });
  const runEventTypes = async (sprintRunId: string) =>
    (await world.db.query<{ type: string }>(`SELECT type FROM events WHERE stream_id = $1 ORDER BY stream_version`, [sprintRunId])).rows.map((r) => r.type);

  /** A sprint job claimed and started that commits `head` and reports pushing it to `branch`, as a runner does; then finished DONE unless `finish` is false. */
  async function pushHead(job: JobView, runnerId: string, branch: string, head: string, finish = true) {
    const claim = await world.client.request(claimJob, { runnerId, kinds: ['SPRINT_IMPLEMENTATION'], jobId: job.jobId, idempotencyKey: key('claim') });
    if (!claim.claimed) throw new Error('not claimed');
    const lease = { jobId: job.jobId, runnerId, leaseToken: claim.job.leaseToken };
    await world.client.request(startJob, { ...lease, idempotencyKey: key('start') });
    await world.client.request(logImplementation, { ...lease, summary: 'start', idempotencyKey: key('log') });
    await world.client.request(logCommit, { ...lease, commitSha: head, message: 'feat', summary: 'one file', idempotencyKey: key('log') });
    await world.client.request(logTestResult, { ...lease, status: 'PASSED', summary: 'green', idempotencyKey: key('log') });
    await world.client.request(reportPush, { ...lease, branch, headSha: head, pushed: true, idempotencyKey: key('push') });
    if (!finish) return;
    await world.client.request(finishJob, {
      ...lease, idempotencyKey: key('finish'),
      facts: { verifyResult: 'ALIGNED', newCommit: true, netDiff: { filesChanged: 1, insertions: 1, deletions: 0 }, workAlreadyOnTarget: false, diffIdenticalToMergedBranch: false, failure: null, cancelled: false },
    });
  }

  /** Waits until the service's own-events durable has delivered the job's push report to every consumer of it. */
  async function pushDelivered(jobId: string) {
    await relayed(world.db, await eventIdOf(world.db, jobId, 'JobPushReported'));
    await consumerCaughtUp(world.bus.jsm, streamName(world.naming, 'jobs'), OWN_EVENTS_DURABLE);
  }

  const prFacts = (branch: string) => ({
    pullRequestId: 'pr-acme_shop-sprint', repository: 'acme/shop', branch, baseBranch: 'main', prNumber: 102, prUrl: PR,
    headSha: sha('9'), detectedAt: new Date().toISOString(),
  });

  async function finishDone(job: JobView, runnerId: string) {
    const claim = await world.client.request(claimJob, { runnerId, kinds: ['SPRINT_IMPLEMENTATION'], jobId: job.jobId, idempotencyKey: key('claim') });
    if (!claim.claimed) throw new Error('not claimed');
    return finishClaimedDone(world.client, { jobId: job.jobId, runnerId, leaseToken: claim.job.leaseToken });
  }

  /** A sprint job claimed, started and finished with no story log: FAILED, by `failure` or for want of output. */
  async function claimAndFail(job: JobView, runnerId: string, failure: { kind: 'COMPILE'; message: string } | null = null) {
    const claim = await world.client.request(claimJob, { runnerId, kinds: ['SPRINT_IMPLEMENTATION'], jobId: job.jobId, idempotencyKey: key('claim') });
    if (!claim.claimed) throw new Error('not claimed');
    const lease = { jobId: job.jobId, runnerId, leaseToken: claim.job.leaseToken };
    await world.client.request(startJob, { ...lease, idempotencyKey: key('start') });
    const facts = { verifyResult: 'EMPTY', newCommit: false, netDiff: { filesChanged: 0, insertions: 0, deletions: 0 }, workAlreadyOnTarget: false, diffIdenticalToMergedBranch: false, failure, cancelled: false } as const;
    return world.client.request(finishJob, { ...lease, idempotencyKey: key('finish'), facts });
  }

  type Hold = { streamId: string; type: string; consumer: string };

  /**
   * Runs `body` while each held consumer fails on its stream's `type` event (the consumer hands its try
   * back and goes on with later events): it handles that event only after `body`, or once `body`
   * calls `release` for it.
   */
  async function withHeldBack(holds: Hold[], body: (release: (hold: Hold) => Promise<void>) => Promise<void>) {
    await world.db.query(`
      CREATE TABLE held_back (stream_id text, type text, consumer text);
      CREATE FUNCTION held_back_fail() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF EXISTS (
          SELECT 1 FROM events e JOIN held_back b ON b.stream_id = e.stream_id AND b.type = e.type
           WHERE e.event_id::text = NEW.event_id::text AND b.consumer = NEW.consumer
        ) THEN
          RAISE EXCEPTION 'test: this event is handled later';
        END IF;
        RETURN NEW;
      END $$;
      CREATE TRIGGER held_back BEFORE INSERT ON inbox FOR EACH ROW EXECUTE FUNCTION held_back_fail();
    `);
    try {
      for (const h of holds) await world.db.query(`INSERT INTO held_back VALUES ($1, $2, $3)`, [h.streamId, h.type, h.consumer]);
      await body(async (h) => {
        await world.db.query(`DELETE FROM held_back WHERE stream_id = $1 AND type = $2 AND consumer = $3`, [h.streamId, h.type, h.consumer]);
      });
    } finally {
      await world.db.query(`DROP TRIGGER IF EXISTS held_back ON inbox; DROP FUNCTION IF EXISTS held_back_fail(); DROP TABLE IF EXISTS held_back`);
    }
  }

  /** Runs `body` while the run's reactions to the job's `type` event fail: the run learns of that event only after `body`. */
  const withReactionHeldBack = (jobId: string, type: string, body: () => Promise<void>) =>
    withHeldBack([{ streamId: jobId, type, consumer: 'job-service-sprint-runs-from-jobs' }], body);

  /** A job enqueued on its own and the job of a new sprint run of one task. */
  async function aPlainAndASprintJob(name: string, taskId: string) {
    const plain = await world.client.request(enqueueJob, { kind: 'TASK_IMPLEMENTATION', productId: 'product-42', taskId: `T-plain-${name}`, prompt: 'x', idempotencyKey: key(`plain-${name}`) });
    const created = await world.client.request(createSprintRun, {
      sprintId: `SP-${name}`, productId: 'product-42', taskIds: [taskId], branch: `sprint/SP-${name}`, prUrl: PR, idempotencyKey: key(`sprint-${name}`),
    });
    const [sprintJob] = await eventually(async () => {
      const j = await sprintJobs(created.sprintRunId);
      return j.length === 1 ? j : null;
    }, { what: 'the sprint job' });
    return { plain, sprintJob };
  }

  it("of a batch of job events, those of jobs in no sprint run are named for skipping; a sprint job's and an unknown job's are not", async () => {
    const { plain, sprintJob } = await aPlainAndASprintJob('skip', 'T-9');
    const events = [plain.jobId, sprintJob!.jobId, plain.jobId, 'job-not-in-the-view'].map((streamId) => ({
      eventId: randomUUID(), type: 'JobClaimed', schemaVersion: 1, streamId, streamVersion: 2, position: 1, occurredAt: new Date().toISOString(),
      correlationId: 'c', causationId: null, idempotencyKey: null, actor: null, data: {},
    }));
    expect(await eventsOfJobsOutsideSprintRuns(events, world.db)).toEqual(new Set([events[0]!.eventId, events[2]!.eventId]));
  });

  it('a job once found in no sprint run is not asked about again (a job never changes run); a sprint job and an unknown job are asked about each time', async () => {
    const { plain, sprintJob } = await aPlainAndASprintJob('kept', 'T-10');
    const eventsOf = (...streamIds: string[]) => streamIds.map((streamId) => ({
      eventId: randomUUID(), type: 'JobFinished', schemaVersion: 1, streamId, streamVersion: 3, position: 1, occurredAt: new Date().toISOString(),
      correlationId: 'c', causationId: null, idempotencyKey: null, actor: null, data: {},
    }));
    // The consumer's pool, its queries counted.
    const queries: unknown[] = [];
    const pool = world.db;
    const counted = Object.create(pool, { query: { value: (...args: unknown[]) => (queries.push(args[0]), (pool.query as (...a: unknown[]) => unknown).apply(pool, args)) } }) as typeof pool;
    const asked = async (events: ReturnType<typeof eventsOf>) => {
      const before = queries.length;
      const named = await eventsOfJobsOutsideSprintRuns(events, counted);
      return { named: events.map((e) => named.has(e.eventId)), queries: queries.length - before };
    };
    expect(await asked(eventsOf(plain.jobId))).toEqual({ named: [true], queries: 1 });
    expect(await asked(eventsOf(plain.jobId, plain.jobId))).toEqual({ named: [true, true], queries: 0 });
    expect(await asked(eventsOf(sprintJob!.jobId, 'job-not-in-the-view-yet'))).toEqual({ named: [false, false], queries: 1 });
    expect(await asked(eventsOf(sprintJob!.jobId, plain.jobId, 'job-not-in-the-view-yet'))).toEqual({ named: [false, true, false], queries: 1 });
  });

  it("a run queues its tasks one after the other, in its order: the next only once the one before is done", async () => {
    const created = await world.client.request(createSprintRun, {
      sprintId: 'SP-seq', productId: 'product-42', taskIds: ['T-S1', 'T-S2', 'T-S3'], branch: 'sprint/SP-seq', idempotencyKey: key('sprint'),
    });
    await handledByConsumer(world.db, 'job-service-sprint-run-effects', await eventIdOf(world.db, created.sprintRunId, 'SprintRunCreated'));
    // Queued together, a runner could claim T-S2 before T-S1, and two runner hosts push the one branch at once.
    expect((await sprintJobs(created.sprintRunId)).map((j) => [j.taskId, j.status])).toEqual([['T-S1', 'QUEUED']]);

    const first = await queuedJobOf(created.sprintRunId, 'T-S1');
    // Claimed and at work, T-S1 still holds T-S2 back.
    const claim = await world.client.request(claimJob, { runnerId: 'runner-seq', kinds: ['SPRINT_IMPLEMENTATION'], jobId: first.jobId, idempotencyKey: key('claim') });
    if (!claim.claimed) throw new Error('not claimed');
    await handledByConsumer(world.db, 'job-service-sprint-runs-from-jobs', await eventIdOf(world.db, first.jobId, 'JobClaimed'));
    await handledByConsumer(world.db, 'job-service-sprint-run-effects', await eventIdOf(world.db, created.sprintRunId, 'SprintRunStarted'));
    expect((await sprintJobs(created.sprintRunId)).map((j) => j.taskId)).toEqual(['T-S1']);
    await world.client.request(rollbackClaim, { jobId: first.jobId, runnerId: 'runner-seq', leaseToken: claim.job.leaseToken, reason: 'agent crashed', idempotencyKey: key('rollback') });

    await finishDone(await queuedJobOf(created.sprintRunId, 'T-S1'), 'runner-seq');
    const second = await queuedJobOf(created.sprintRunId, 'T-S2');
    await handledByConsumer(world.db, 'job-service-sprint-run-effects', await eventIdOf(world.db, created.sprintRunId, 'SprintRunTaskCompleted'));
    expect((await sprintJobs(created.sprintRunId)).map((j) => [j.taskId, j.status])).toEqual([['T-S1', 'DONE'], ['T-S2', 'QUEUED']]);

    await finishDone(second, 'runner-seq');
    await finishDone(await queuedJobOf(created.sprintRunId, 'T-S3'), 'runner-seq');
    expect(await eventually(async () => {
      const r = await run(created.sprintRunId);
      return r.status === 'DONE' ? r : null;
    }, { what: 'the run DONE' })).toMatchObject({ doneTaskIds: ['T-S1', 'T-S2', 'T-S3'] });
    expect((await sprintJobs(created.sprintRunId)).map((j) => [j.taskId, j.status])).toEqual([['T-S1', 'DONE'], ['T-S2', 'DONE'], ['T-S3', 'DONE']]);
  });

  it('a merge conflict in more files than one message carries still pauses the run: the files it keeps and names are cut, the pull request lists them all', async () => {
    const created = await world.client.request(createSprintRun, {
      sprintId: 'SP-huge', productId: 'product-42', taskIds: ['T-1', 'T-2'], branch: 'sprint/SP-huge', prUrl: PR, idempotencyKey: key('sprint'),
    });
    await finishDone(await queuedJobOf(created.sprintRunId, 'T-1'), 'runner-huge');
    await eventually(async () => (await run(created.sprintRunId)).status === 'RUNNING', { what: 'the run RUNNING' });

    // 20,000 paths, 860 KB as JSON: the pr-service's event fits one message, a pause that named them twice would not.
    const files = Array.from({ length: 20_000 }, (_, i) => `src/modules/generated/file-${String(i).padStart(6, '0')}.ts`);
    await publishPrEvent(PullRequestMergeConflict.type, { ...prFacts('sprint/SP-huge'), conflictingFiles: files });
    const paused = await eventually(async () => {
      const r = await run(created.sprintRunId);
      return r.status === 'PAUSED' ? r : null;
    }, { what: 'the run PAUSED' });
    const kept = paused.pause!.conflictingFiles;
    expect(kept).toEqual(files.slice(0, kept.length));
    expect(Buffer.byteLength(JSON.stringify(kept))).toBeLessThanOrEqual(MAX_PAUSE_FILES_BYTES);
    expect(paused.pause!.resumeInstructions).toContain(`and ${files.length - 20} more files (the pull request lists them all)`);
    await relayed(world.db, await eventIdOf(world.db, created.sprintRunId, 'SprintRunPaused'));
  });

  it('running → merge conflict → PAUSED with its context → resumed → tasks done → DONE', async () => {
    const created = await world.client.request(createSprintRun, {
      sprintId: 'SP-7', productId: 'product-42', taskIds: ['T-1', 'T-2'], branch: 'sprint/SP-7', prUrl: PR, idempotencyKey: key('sprint'),
    });
    expect(created.status).toBe('QUEUED');
    const first = await queuedJobOf(created.sprintRunId, 'T-1');
    expect([first.taskId, first.kind, first.status, first.baseRef, first.repository, first.branch]).toEqual(['T-1', 'SPRINT_IMPLEMENTATION', 'QUEUED', null, 'acme/shop', 'sprint/SP-7']);
    expect((await run(created.sprintRunId)).repository).toBe('acme/shop');

    await finishDone(first, 'runner-s1');
    await eventually(async () => {
      const r = await run(created.sprintRunId);
      return r.status === 'RUNNING' && r.doneTaskIds.includes('T-1');
    }, { what: 'the run RUNNING with T-1 done' });

    await publishPrEvent(PullRequestMergeConflict.type, { ...prFacts('sprint/SP-7'), conflictingFiles: ['src/app.ts', 'package.json'] });
    const paused = await eventually(async () => {
      const r = await run(created.sprintRunId);
      return r.status === 'PAUSED' ? r : null;
    }, { what: 'the run PAUSED' });
    expect(paused.pause).toMatchObject({ reason: 'MERGE_CONFLICT', prUrl: PR, conflictingFiles: ['src/app.ts', 'package.json'], questionId: expect.stringMatching(/^question-/) });
    expect(paused.pause?.resumeInstructions).toContain('src/app.ts');

    const resumed = await world.client.request(resumeSprintRun, { sprintRunId: created.sprintRunId, note: 'resolved', idempotencyKey: key('resume') });
    expect(resumed.status).toBe('RUNNING');
    // T-2 has one job, whether T-1's end queued it before the pause or the resume did; no second one.
    await handledByConsumer(world.db, 'job-service-sprint-run-effects', await eventIdOf(world.db, created.sprintRunId, 'SprintRunResumed'));
    const afterResume = await sprintJobs(created.sprintRunId);
    expect(afterResume.filter((j) => j.taskId === 'T-2')).toHaveLength(1);

    await finishDone(afterResume.find((j) => j.taskId === 'T-2')!, 'runner-s2');
    const done = await eventually(async () => {
      const r = await run(created.sprintRunId);
      return r.status === 'DONE' ? r : null;
    }, { what: 'the run DONE' });
    expect(done).toMatchObject({ doneTaskIds: ['T-1', 'T-2'], pause: null, failure: null });
    // DONE: the sprint-run effect asks the pr-service to make the (repository, branch) PR ready for review.
    const asked = await eventually(() => readyRequests.find((r) => r.sprintRunId === created.sprintRunId), { what: 'mark_pr_ready_for_review sent' });
    expect(asked).toMatchObject({ repository: 'acme/shop', branch: 'sprint/SP-7', idempotencyKey: expect.stringMatching(/^sprint-run:/) });
  });

  it("a sprint run's product and sprint configuration reaches its jobs: each claim records the cascade, also for a resume's jobs", async () => {
    const created = await world.client.request(createSprintRun, {
      sprintId: 'SP-config', productId: 'product-42', taskIds: ['T-cfg'], branch: 'sprint/SP-config', idempotencyKey: key('sprint'),
      configOverrides: { product: { model: 'claude-opus-4-7', thinkingBudget: 8000 }, sprint: { thinkingBudget: 20000, maxTurns: 50 } },
    });
    const claimed = async (job: JobView, runnerId: string) => {
      const claim = await world.client.request(claimJob, { runnerId, kinds: ['SPRINT_IMPLEMENTATION'], jobId: job.jobId, idempotencyKey: key('claim') });
      if (!claim.claimed) throw new Error('not claimed');
      return claim.job;
    };
    // The sprint's budget wins over the product's, the product's model over the kind's; the rest is the kind's.
    const expected = {
      agentConfig: expect.objectContaining({ model: 'claude-opus-4-7', thinkingBudget: 20000, maxTurns: 50, permissionMode: 'bypassPermissions' }),
      effort: 'xhigh',
    };
    const [first] = await eventually(async () => {
      const j = await sprintJobs(created.sprintRunId);
      return j.length === 1 ? j : null;
    }, { what: 'the sprint job' });
    const grant = await claimed(first!, 'runner-cfg-1');
    expect({ agentConfig: grant.agentConfig, effort: grant.effort }).toEqual(expected);
    expect((await world.client.request(getJob, { jobId: first!.jobId })).agentConfig).toEqual(grant.agentConfig);

    // The job fails, and so the run; its resume queues the task afresh.
    const lease = { jobId: first!.jobId, runnerId: 'runner-cfg-1', leaseToken: grant.leaseToken };
    await world.client.request(startJob, { ...lease, idempotencyKey: key('start') });
    await world.client.request(finishJob, {
      ...lease, idempotencyKey: key('finish'),
      facts: { verifyResult: 'EMPTY', newCommit: false, netDiff: { filesChanged: 0, insertions: 0, deletions: 0 }, workAlreadyOnTarget: false, diffIdenticalToMergedBranch: false, failure: { kind: 'COMPILE', message: 'src/a.ts: error' }, cancelled: false },
    });
    await eventually(async () => (await run(created.sprintRunId)).status === 'FAILED', { what: 'the run FAILED' });
    await world.client.request(resumeSprintRun, { sprintRunId: created.sprintRunId, note: 'fixed', idempotencyKey: key('resume') });
    const again = await eventually(async () => (await sprintJobs(created.sprintRunId)).find((j) => j.status === 'QUEUED') ?? null, { what: "the resume's job" });
    const regrant = await claimed(again, 'runner-cfg-2');
    expect({ agentConfig: regrant.agentConfig, effort: regrant.effort }).toEqual(expected);
  });

  it("a run whose branch its product's repository came to refuse (the clone URL changed: the branch is now in the rescue folder of one of its keys) fails its next task naming the branch, rather than queue a job no worktree is leased to", async () => {
    await registerProducts(world.client, ['product-moved'], { repository: 'acme/shop', cloneUrl: 'https://github.com/acme/shop.git', prStrategy: 'SPRINT' });
    // In acme/shop a branch like any other; in acme/moved the rescue folder of a key of that repository.
    const branch = 'gantry/rescue/moved-main-0123456789ab';
    const created = await world.client.request(createSprintRun, { sprintId: 'SP-moved', productId: 'product-moved', taskIds: ['T-m1', 'T-m2'], branch, idempotencyKey: key('sprint') });
    const first = await queuedJobOf(created.sprintRunId, 'T-m1');
    await world.client.request(updateProduct, { productId: 'product-moved', changes: { repository: 'acme/moved', cloneUrl: 'https://github.com/acme/moved.git' }, idempotencyKey: key('update') });
    await pushHead(first, 'runner-moved', branch, sha('7'));
    const failed = await eventually(async () => {
      const now = await run(created.sprintRunId);
      return now.status === 'FAILED' ? now : null;
    }, { what: 'the run FAILED' });
    expect(failed.failure).toMatchObject({ reason: 'TASK_FAILED', taskId: 'T-m2', error: expect.stringContaining(`branch ${branch} is in the rescue folder of worktree key moved-main-0123456789ab`) });
    expect((await sprintJobs(created.sprintRunId)).map((j) => [j.taskId, j.status])).toEqual([['T-m1', 'DONE']]);
    expect((await world.db.query(`SELECT count(*) AS n FROM dead_letters`)).rows[0].n).toBe('0');
  });

  it('cancel while RUNNING → CANCELLED, its jobs cancelled and the open tasks back to TO_DO', async () => {
    const created = await world.client.request(createSprintRun, {
      sprintId: 'SP-8', productId: 'product-42', taskIds: ['T-3', 'T-4'], branch: 'sprint/SP-8', idempotencyKey: key('sprint'),
    });
    const job = await queuedJobOf(created.sprintRunId, 'T-3');
    const claim = await world.client.request(claimJob, { runnerId: 'runner-c', kinds: ['SPRINT_IMPLEMENTATION'], jobId: job.jobId, idempotencyKey: key('claim') });
    expect(claim.claimed).toBe(true);
    await eventually(async () => (await run(created.sprintRunId)).status === 'RUNNING', { what: 'the run RUNNING' });

    const cancelled = await world.client.request(cancelSprintRun, { sprintRunId: created.sprintRunId, reason: 'scope changed', idempotencyKey: key('cancel') });
    expect(cancelled.status).toBe('CANCELLED');
    const events = await world.db.query(`SELECT data FROM events WHERE stream_id = $1 AND type = 'SprintRunCancelled'`, [created.sprintRunId]);
    expect(events.rows[0].data.tasksBackToTodo).toEqual(['T-3', 'T-4']);
    const after = await eventually(async () => {
      const j = await sprintJobs(created.sprintRunId);
      return j.every((x) => x.status === 'CANCELLED') ? j : null;
    }, { what: 'every sprint job cancelled' });
    expect(after.map((j) => [j.taskId, j.taskStatus])).toEqual([['T-3', 'TO_DO']]);
    // The workflow engine is asked to take the open tasks back to their start step, once, keyed by the cancel.
    const asked = await eventually(() => returnRequests.find((r) => r.sprintRunId === created.sprintRunId), { what: 'return_tasks_to_todo sent' });
    expect(asked).toMatchObject({ taskIds: ['T-3', 'T-4'], idempotencyKey: expect.stringMatching(/^sprint-run:/) });
    await expect(world.client.request(resumeSprintRun, { sprintRunId: created.sprintRunId, idempotencyKey: key('resume') })).rejects.toMatchObject({ code: 'INVALID_TRANSITION' });
  });

  it('one open run per repository and branch: a second create is refused PRECONDITION_FAILED, two at once leave exactly one, a repeat under its key answers as before, an ended run frees the branch', async () => {
    const branch = 'sprint/SP-one-branch';
    const create = (sprintId: string, idempotencyKey = key('sprint')) =>
      world.client.request(createSprintRun, { sprintId, productId: 'product-42', taskIds: ['T-ob1'], branch, idempotencyKey });
    const openRuns = async () => (await world.db.query(`SELECT sprint_run_id FROM sprint_runs WHERE branch = $1 AND status NOT IN ('DONE', 'FAILED', 'CANCELLED')`, [branch])).rows;

    // two creates at once: exactly one wins, the other is refused and records nothing
    const raced = await Promise.allSettled([create('SP-one-a'), create('SP-one-b')]);
    const won = raced.flatMap((r) => (r.status === 'fulfilled' ? [r.value.sprintRunId] : []));
    const lost = raced.flatMap((r) => (r.status === 'rejected' ? [r.reason as unknown] : []));
    expect(won).toHaveLength(1);
    expect(lost).toEqual([expect.objectContaining({ code: ErrorCode.PRECONDITION_FAILED, message: expect.stringContaining(won[0]!) })]);
    expect(await openRuns()).toEqual([{ sprint_run_id: won[0] }]);

    // a later create on the branch is refused too; the winner's create repeated under its key gets its answer
    await expect(create('SP-one-c')).rejects.toMatchObject({ code: ErrorCode.PRECONDITION_FAILED });
    expect((await world.db.query(`SELECT 1 FROM events WHERE data->>'sprintId' = 'SP-one-c'`)).rows).toEqual([]);
    await world.client.request(cancelSprintRun, { sprintRunId: won[0]!, reason: 'free the branch', idempotencyKey: key('cancel') });

    // the branch is free once the run ended: a new run takes it, and its repeat is answered from its receipt
    const heldKey = key('sprint');
    const next = await create('SP-one-d', heldKey);
    expect(await create('SP-one-d', heldKey)).toEqual(next);
    expect(await openRuns()).toEqual([{ sprint_run_id: next.sprintRunId }]);
  });

  it('a FAILED run resumed while another run holds its branch is refused PRECONDITION_FAILED and stays FAILED', async () => {
    const branch = 'sprint/SP-resume-held';
    const first = await world.client.request(createSprintRun, { sprintId: 'SP-rh-1', productId: 'product-42', taskIds: ['T-rh1'], branch, idempotencyKey: key('sprint') });
    await claimAndFail(await queuedJobOf(first.sprintRunId, 'T-rh1'), 'runner-rh', { kind: 'COMPILE', message: 'broken' });
    await eventually(async () => (await run(first.sprintRunId)).status === 'FAILED', { what: 'the first run FAILED' });
    const second = await world.client.request(createSprintRun, { sprintId: 'SP-rh-2', productId: 'product-42', taskIds: ['T-rh2'], branch, idempotencyKey: key('sprint') });

    await expect(world.client.request(resumeSprintRun, { sprintRunId: first.sprintRunId, idempotencyKey: key('resume') })).rejects.toMatchObject({
      code: ErrorCode.PRECONDITION_FAILED,
      message: expect.stringContaining(second.sprintRunId),
    });
    expect((await run(first.sprintRunId)).status).toBe('FAILED');
    await world.client.request(cancelSprintRun, { sprintRunId: second.sprintRunId, reason: 'make room', idempotencyKey: key('cancel') });
    expect(await world.client.request(resumeSprintRun, { sprintRunId: first.sprintRunId, idempotencyKey: key('resume') })).toMatchObject({ sprintRunId: first.sprintRunId });
  });

  it("a failed run's cancel that fails and comes again after a resume leaves the resumed run's jobs alone", async () => {
    const created = await world.client.request(createSprintRun, {
      sprintId: 'SP-late', productId: 'product-42', taskIds: ['T-A', 'T-B'], branch: 'sprint/SP-late', idempotencyKey: key('sprint'),
    });
    const queued = await queuedJobOf(created.sprintRunId, 'T-A');
    // While `cancel_block` has a row, every JobCancelled append fails: the effect's transaction is rolled back and
    // its event handed back, to come again later (docs/architecture.md, "Durable consumers"). A sequence counts the
    // tries, being the one thing a rolled-back transaction leaves behind.
    await world.db.query(`
      CREATE TABLE cancel_block (on_ boolean);
      CREATE SEQUENCE cancel_block_tries;
      INSERT INTO cancel_block VALUES (true);
      CREATE FUNCTION cancel_block_fail() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF EXISTS (SELECT 1 FROM cancel_block) THEN
          PERFORM nextval('cancel_block_tries');
          RAISE EXCEPTION 'test: JobCancelled blocked';
        END IF;
        RETURN NEW;
      END $$;
      CREATE TRIGGER cancel_block BEFORE INSERT ON events FOR EACH ROW WHEN (NEW.type = 'JobCancelled') EXECUTE FUNCTION cancel_block_fail();
    `);
    try {
      // Red checks fail the run while T-A's job is queued.
      await deliverPrFact(PullRequestChecksFailed.type, redChecksOn('sprint/SP-late', sha('b')));
      expect((await run(created.sprintRunId)).status).toBe('FAILED');
      // The failure's cancel of T-A's job was tried and failed.
      await eventually(async () => (await world.db.query(`SELECT is_called FROM cancel_block_tries`)).rows[0].is_called === true, { what: 'the cancel tried' });

      await world.client.request(resumeSprintRun, { sprintRunId: created.sprintRunId, note: 'fixed', idempotencyKey: key('resume') });
      await handledByConsumer(world.db, 'job-service-sprint-run-effects', await eventIdOf(world.db, created.sprintRunId, 'SprintRunResumed'));
      // T-A keeps its queued job; T-B waits for it.
      expect((await sprintJobs(created.sprintRunId)).map((j) => [j.jobId, j.status])).toEqual([[queued.jobId, 'QUEUED']]);

      await world.db.query(`DELETE FROM cancel_block`);
      await handledByConsumer(world.db, 'job-service-sprint-run-effects', await eventIdOf(world.db, created.sprintRunId, 'SprintRunFailed'));
    } finally {
      await world.db.query(`DROP TRIGGER IF EXISTS cancel_block ON events; DROP FUNCTION IF EXISTS cancel_block_fail(); DROP TABLE IF EXISTS cancel_block; DROP SEQUENCE IF EXISTS cancel_block_tries`);
    }
    // The run is RUNNING again: the late cancel asked for by its failure no longer applies to it.
    expect((await run(created.sprintRunId)).status).toBe('RUNNING');
    expect((await sprintJobs(created.sprintRunId)).map((j) => [j.jobId, j.status])).toEqual([[queued.jobId, 'QUEUED']]);
  });

  it("a run whose only task's finish is handled before its job's claim completes all the same", async () => {
    const created = await world.client.request(createSprintRun, {
      sprintId: 'SP-order', productId: 'product-42', taskIds: ['T-O'], branch: 'sprint/SP-order', idempotencyKey: key('sprint'),
    });
    const [job] = await eventually(async () => {
      const j = await sprintJobs(created.sprintRunId);
      return j.length === 1 ? j : null;
    }, { what: 'the sprint job' });
    // The run's reactions are kept from the job's claim until the finish has been handled.
    await withReactionHeldBack(job!.jobId, 'JobClaimed', async () => {
      expect(await finishDone(job!, 'runner-order')).toMatchObject({ jobStatus: 'DONE' });
      await handledByConsumer(world.db, 'job-service-sprint-runs-from-jobs', await eventIdOf(world.db, job!.jobId, 'JobFinished'));
    });
    await handledByConsumer(world.db, 'job-service-sprint-runs-from-jobs', await eventIdOf(world.db, job!.jobId, 'JobClaimed'));
    expect(await run(created.sprintRunId)).toMatchObject({ status: 'DONE', doneTaskIds: ['T-O'] });
  });

  it("a job's failure from before a resume, handled after it, leaves the resumed run and its jobs alone", async () => {
    const created = await world.client.request(createSprintRun, {
      sprintId: 'SP-stale', productId: 'product-42', taskIds: ['T-C', 'T-D'], branch: 'sprint/SP-stale', idempotencyKey: key('sprint'),
    });
    await finishDone(await queuedJobOf(created.sprintRunId, 'T-C'), 'runner-stale-c');
    const stale = await queuedJobOf(created.sprintRunId, 'T-D');
    // The run's reactions are kept from T-D's finish until after the resume.
    await withReactionHeldBack(stale.jobId, 'JobFinished', async () => {
      await claimAndFail(stale, 'runner-stale-d', { kind: 'COMPILE', message: 'src/d.ts: error' });
      // Red checks fail the run; it has not heard of T-D's failure.
      await deliverPrFact(PullRequestChecksFailed.type, redChecksOn('sprint/SP-stale', sha('d')));
      expect((await run(created.sprintRunId)).failure).toMatchObject({ reason: 'CHECKS_FAILED' });

      await world.client.request(resumeSprintRun, { sprintRunId: created.sprintRunId, note: 'fixed', idempotencyKey: key('resume') });
      await handledByConsumer(world.db, 'job-service-sprint-run-effects', await eventIdOf(world.db, created.sprintRunId, 'SprintRunResumed'));
      expect((await sprintJobs(created.sprintRunId)).filter((j) => j.status === 'QUEUED').map((j) => j.taskId)).toEqual(['T-D']);
    });
    // T-D's failure, from before the resume, now reaches the run: the resume already queued T-D afresh.
    await handledByConsumer(world.db, 'job-service-sprint-runs-from-jobs', await eventIdOf(world.db, stale.jobId, 'JobFinished'));
    expect((await run(created.sprintRunId)).status).toBe('RUNNING');
    const after = await sprintJobs(created.sprintRunId);
    expect(after.filter((j) => j.status === 'QUEUED').map((j) => j.taskId)).toEqual(['T-D']);
    expect(after.filter((j) => j.status === 'CANCELLED')).toEqual([]);
  });

  it("a task whose DONE the run heard of only after a resume queued it again stays done when that second job fails, and the next task is queued", async () => {
    const created = await world.client.request(createSprintRun, {
      sprintId: 'SP-twice', productId: 'product-42', taskIds: ['T-E', 'T-F'], branch: 'sprint/SP-twice', idempotencyKey: key('sprint'),
    });
    const first = await queuedJobOf(created.sprintRunId, 'T-E');
    // The run's reactions are kept from T-E's DONE until after the resume.
    await withReactionHeldBack(first.jobId, 'JobFinished', async () => {
      expect(await finishDone(first, 'runner-twice-e')).toMatchObject({ jobStatus: 'DONE' });
      await deliverPrFact(PullRequestChecksFailed.type, redChecksOn('sprint/SP-twice', sha('e')));
      expect((await run(created.sprintRunId)).status).toBe('FAILED');
      await world.client.request(resumeSprintRun, { sprintRunId: created.sprintRunId, note: 'fixed', idempotencyKey: key('resume') });
      await handledByConsumer(world.db, 'job-service-sprint-run-effects', await eventIdOf(world.db, created.sprintRunId, 'SprintRunResumed'));
    });
    await handledByConsumer(world.db, 'job-service-sprint-runs-from-jobs', await eventIdOf(world.db, first.jobId, 'JobFinished'));
    expect(await run(created.sprintRunId)).toMatchObject({ status: 'RUNNING', doneTaskIds: ['T-E'] });
    // The resume, not knowing T-E was done, queued it again; that job does not hold T-F back.
    const again = (await sprintJobs(created.sprintRunId)).find((j) => j.taskId === 'T-E' && j.status === 'QUEUED')!;
    await queuedJobOf(created.sprintRunId, 'T-F');
    // It finds nothing left to do and fails.
    expect(await claimAndFail(again, 'runner-twice-e2')).toMatchObject({ jobStatus: 'FAILED' });
    await handledByConsumer(world.db, 'job-service-sprint-runs-from-jobs', await eventIdOf(world.db, again.jobId, 'JobFinished'));
    expect(await run(created.sprintRunId)).toMatchObject({ status: 'RUNNING', doneTaskIds: ['T-E'] });
    expect((await sprintJobs(created.sprintRunId)).filter((j) => j.taskId === 'T-F' && j.status === 'QUEUED')).toHaveLength(1);
  });

  it("a job of the run cancelled on its own fails the run, naming its task; a resume queues that task again and the run goes on", async () => {
    const created = await world.client.request(createSprintRun, {
      sprintId: 'SP-job-cancel', productId: 'product-42', taskIds: ['T-X1', 'T-X2'], branch: 'sprint/SP-job-cancel', idempotencyKey: key('sprint'),
    });
    const cancelled = await queuedJobOf(created.sprintRunId, 'T-X1');
    await world.client.request(cancelJob, { jobId: cancelled.jobId, reason: 'not this one', idempotencyKey: key('cancel') });
    // Left RUNNING, the run would wait for ever for a task no job will do.
    const failed = await eventually(async () => {
      const r = await run(created.sprintRunId);
      return r.status === 'FAILED' ? r : null;
    }, { what: 'the run FAILED' });
    expect(failed.failure).toMatchObject({ reason: 'TASK_FAILED', taskId: 'T-X1', error: expect.stringContaining('cancelled: not this one') });

    await world.client.request(resumeSprintRun, { sprintRunId: created.sprintRunId, note: 'go on', idempotencyKey: key('resume') });
    const again = await queuedJobOf(created.sprintRunId, 'T-X1');
    expect(again.jobId).not.toBe(cancelled.jobId);
    await finishDone(again, 'runner-job-cancel');
    await finishDone(await queuedJobOf(created.sprintRunId, 'T-X2'), 'runner-job-cancel');
    expect(await eventually(async () => {
      const r = await run(created.sprintRunId);
      return r.status === 'DONE' ? r : null;
    }, { what: 'the run DONE' })).toMatchObject({ doneTaskIds: ['T-X1', 'T-X2'] });
  });

  it("the run's own cancel of its job, handled after a resume and before the resume's jobs, leaves the resumed run alone", async () => {
    const created = await world.client.request(createSprintRun, {
      sprintId: 'SP-own-cancel', productId: 'product-42', taskIds: ['T-Y1'], branch: 'sprint/SP-own-cancel', idempotencyKey: key('sprint'),
    });
    const queued = await queuedJobOf(created.sprintRunId, 'T-Y1');
    const cancelHeard: Hold = { streamId: queued.jobId, type: 'JobCancelled', consumer: 'job-service-sprint-runs-from-jobs' };
    const resumeCarriedOut: Hold = { streamId: created.sprintRunId, type: 'SprintRunResumed', consumer: 'job-service-sprint-run-effects' };
    await withHeldBack([cancelHeard, resumeCarriedOut], async (release) => {
      await deliverPrFact(PullRequestChecksFailed.type, redChecksOn('sprint/SP-own-cancel', sha('c')));
      expect((await run(created.sprintRunId)).status).toBe('FAILED');
      // The failure cancels the run's queued job; the run hears of that cancel only after the resume,
      // before the resume has queued the task afresh.
      await eventually(async () => (await world.client.request(getJob, { jobId: queued.jobId })).status === 'CANCELLED', { what: 'the job cancelled by the run' });
      await world.client.request(resumeSprintRun, { sprintRunId: created.sprintRunId, note: 'fixed', idempotencyKey: key('resume') });
      await release(cancelHeard);
      await handledByConsumer(world.db, cancelHeard.consumer, await eventIdOf(world.db, queued.jobId, 'JobCancelled'));
      expect(await run(created.sprintRunId)).toMatchObject({ status: 'RUNNING', failure: null });
    });
    await handledByConsumer(world.db, resumeCarriedOut.consumer, await eventIdOf(world.db, created.sprintRunId, 'SprintRunResumed'));
    expect(await run(created.sprintRunId)).toMatchObject({ status: 'RUNNING', failure: null });
    await queuedJobOf(created.sprintRunId, 'T-Y1');
  });

  it('failed checks fail the run (found by repository and branch) and never pause it', async () => {
    const created = await world.client.request(createSprintRun, {
      sprintId: 'SP-9', productId: 'product-42', taskIds: ['T-5'], branch: 'sprint/SP-9', idempotencyKey: key('sprint'),
    });
    const [job] = await eventually(async () => {
      const j = await sprintJobs(created.sprintRunId);
      return j.length === 1 ? j : null;
    }, { what: 'the sprint job' });
    await world.client.request(claimJob, { runnerId: 'runner-f', kinds: ['SPRINT_IMPLEMENTATION'], jobId: job!.jobId, idempotencyKey: key('claim') });
    await eventually(async () => (await run(created.sprintRunId)).status === 'RUNNING', { what: 'the run RUNNING' });
    // The same branch name in another repository is another pull request: the run does not hear of it.
    const elsewhere = await publishPrEvent(PullRequestChecksFailed.type, {
      ...prFacts('sprint/SP-9'),
      repository: 'acme/other',
      failedChecks: [{ name: 'ci/test', conclusion: 'failure', detailsUrl: null }],
    });
    await eventually(
      async () => (await world.db.query(`SELECT 1 FROM inbox WHERE consumer = 'job-service-sprint-runs-checks-failed' AND event_id = $1`, [elsewhere])).rowCount === 1,
      { what: 'the other repository\'s failed checks consumed' },
    );
    expect((await run(created.sprintRunId)).status).toBe('RUNNING');
    await publishPrEvent(PullRequestChecksFailed.type, {
      ...prFacts('sprint/SP-9'),
      failedChecks: [{ name: 'ci/test', conclusion: 'failure', detailsUrl: null }],
    });
    const failed = await eventually(async () => {
      const r = await run(created.sprintRunId);
      return r.status === 'FAILED' ? r : null;
    }, { what: 'the run FAILED' });
    expect(failed.failure).toMatchObject({ reason: 'CHECKS_FAILED' });
    expect(failed.pause).toBeNull();
  });

  it("red checks on a DONE sprint run's head change neither the run nor the job that pushed it: the run is over, the pull request is a person's to review", async () => {
    const branch = 'sprint/SP-after-done';
    const created = await world.client.request(createSprintRun, {
      sprintId: 'SP-after-done', productId: 'product-42', taskIds: ['T-AD'], branch, idempotencyKey: key('sprint'),
    });
    const job = await queuedJobOf(created.sprintRunId, 'T-AD');
    await pushHead(job, 'runner-after-done', branch, sha('a'));
    await eventually(async () => (await run(created.sprintRunId)).status === 'DONE', { what: 'the run DONE' });
    await deliverPrFact(PullRequestChecksFailed.type, redChecksOn(branch, sha('a')));
    expect(await run(created.sprintRunId)).toMatchObject({ status: 'DONE', doneTaskIds: ['T-AD'] });
    expect(await world.client.request(getJob, { jobId: job.jobId })).toMatchObject({ status: 'DONE', taskStatus: 'DONE' });
    const jobEvents = (await world.db.query<{ type: string }>(`SELECT type FROM events WHERE stream_id = $1`, [job.jobId])).rows.map((r) => r.type);
    expect(jobEvents).not.toContain('JobChecksFailed');
  });

  it('red checks on a story branch fail the job that pushed that head, its task back IN_PROGRESS', async () => {
    const { jobId } = await world.client.request(enqueueJob, {
      kind: 'TASK_IMPLEMENTATION', productId: 'product-42', storyId: 'ST-5', taskId: 'T-50', branch: 'story/ST-5', baseRef: 'main', idempotencyKey: key('enqueue'),
    });
    const claim = await world.client.request(claimJob, { runnerId: 'runner-story', kinds: ['TASK_IMPLEMENTATION'], jobId, idempotencyKey: key('claim') });
    if (!claim.claimed) throw new Error('not claimed');
    const lease = { jobId, runnerId: 'runner-story', leaseToken: claim.job.leaseToken };
    await world.client.request(startJob, { ...lease, idempotencyKey: key('start') });
    await world.client.request(logImplementation, { ...lease, summary: 'start', idempotencyKey: key('log') });
    await world.client.request(logCommit, { ...lease, commitSha: sha('e'), message: 'feat', summary: 'one file', idempotencyKey: key('log') });
    await world.client.request(logTestResult, { ...lease, status: 'PASSED', summary: 'green', idempotencyKey: key('log') });
    await world.client.request(reportPush, { ...lease, branch: 'story/ST-5', headSha: sha('e'), pushed: true, idempotencyKey: key('push') });
    await world.client.request(finishJob, {
      ...lease, idempotencyKey: key('finish'),
      facts: { verifyResult: 'ALIGNED', newCommit: true, netDiff: { filesChanged: 1, insertions: 1, deletions: 0 }, workAlreadyOnTarget: false, diffIdenticalToMergedBranch: false, failure: null, cancelled: false },
    });
    // Another head's red checks say nothing about this job.
    const other = await publishPrEvent(PullRequestChecksFailed.type, { ...prFacts('story/ST-5'), headSha: sha('f'), failedChecks: [{ name: 'ci/test', conclusion: 'failure', detailsUrl: null }] });
    await eventually(
      async () => (await world.db.query(`SELECT 1 FROM inbox WHERE consumer = 'job-service-sprint-runs-checks-failed' AND event_id = $1`, [other])).rowCount === 1,
      { what: 'the other head\'s failed checks consumed' },
    );
    expect(await world.client.request(getJob, { jobId })).toMatchObject({ status: 'DONE', taskStatus: 'DONE' });
    await publishPrEvent(PullRequestChecksFailed.type, { ...prFacts('story/ST-5'), headSha: sha('e'), failedChecks: [{ name: 'ci/test', conclusion: 'failure', detailsUrl: null }] });
    const failed = await eventually(async () => {
      const job = await world.client.request(getJob, { jobId });
      return job.status === 'FAILED' ? job : null;
    }, { what: 'the job FAILED on red checks' });
    expect(failed).toMatchObject({ taskStatus: 'IN_PROGRESS', error: `checks failed on ${PR}: ci/test` });
  });

  describe('pull-request facts about a head the run has moved on from (docs/jobs.md, SR-1)', () => {
    it("a conflict and red checks reported late for a head its jobs pushed over are passed over; the current head's still act", async () => {
      const branch = 'sprint/SP-heads';
      const created = await world.client.request(createSprintRun, { sprintId: 'SP-heads', productId: 'product-42', taskIds: ['T-H1', 'T-H2'], branch, idempotencyKey: key('sprint') });
      await pushHead(await queuedJobOf(created.sprintRunId, 'T-H1'), 'runner-h1', branch, sha('1'));
      // The second task's job pushes on top of the first's, and is still at work.
      const second = await queuedJobOf(created.sprintRunId, 'T-H2');
      await pushHead(second, 'runner-h2', branch, sha('2'), false);
      await pushDelivered(second.jobId);
      await eventually(async () => {
        const r = await run(created.sprintRunId);
        return r.status === 'RUNNING' && r.doneTaskIds.includes('T-H1');
      }, { what: 'the run RUNNING with T-H1 done' });
      const before = await runEventTypes(created.sprintRunId);

      // What the pr-service saw on the first head, handled only now.
      await deliverPrFact(PullRequestMergeConflict.type, conflictOn(branch, sha('1')));
      await deliverPrFact(PullRequestChecksFailed.type, redChecksOn(branch, sha('1')));
      expect(await run(created.sprintRunId)).toMatchObject({ status: 'RUNNING', pause: null, failure: null });
      expect(await runEventTypes(created.sprintRunId)).toEqual(before);

      await deliverPrFact(PullRequestMergeConflict.type, conflictOn(branch, sha('2')));
      expect(await run(created.sprintRunId)).toMatchObject({ status: 'PAUSED', pause: { reason: 'MERGE_CONFLICT', conflictingFiles: ['src/app.ts'] } });
    });

    it('a resumed run passes over the conflict it was resumed from, delivered again, and red checks reported late for that head; a head no job of it pushed still acts', async () => {
      const branch = 'sprint/SP-resumed';
      const created = await world.client.request(createSprintRun, { sprintId: 'SP-resumed', productId: 'product-42', taskIds: ['T-R1', 'T-R2'], branch, idempotencyKey: key('sprint') });
      const first = await queuedJobOf(created.sprintRunId, 'T-R1');
      await pushHead(first, 'runner-r1', branch, sha('3'));
      await pushDelivered(first.jobId);
      await eventually(async () => (await run(created.sprintRunId)).doneTaskIds.includes('T-R1'), { what: 'T-R1 done' });
      const conflict = conflictOn(branch, sha('3'));
      const conflictId = await deliverPrFact(PullRequestMergeConflict.type, conflict);
      expect((await run(created.sprintRunId)).status).toBe('PAUSED');

      // A person merges the base branch in, pushes the resolution (a head no job reported) and resumes.
      await world.client.request(resumeSprintRun, { sprintRunId: created.sprintRunId, note: 'resolved', idempotencyKey: key('resume') });
      const resumed = await runEventTypes(created.sprintRunId);
      // Red checks the pr-service saw on the conflicting head, handled only now.
      await deliverPrFact(PullRequestChecksFailed.type, redChecksOn(branch, sha('3')));
      expect(await run(created.sprintRunId)).toMatchObject({ status: 'RUNNING', failure: null });
      // The conflict delivered again with its inbox row gone, as a replay into a rebuilt inbox would.
      await world.db.query(`DELETE FROM inbox WHERE consumer = $1 AND event_id = $2`, [PR_FACT_CONSUMERS[PullRequestMergeConflict.type], conflictId]);
      await deliverPrFact(PullRequestMergeConflict.type, conflict, conflictId);
      expect(await run(created.sprintRunId)).toMatchObject({ status: 'RUNNING', pause: null });
      expect(await runEventTypes(created.sprintRunId)).toEqual(resumed);

      // The person's head is one the run never heard of: its red checks may be the branch as it is now.
      await deliverPrFact(PullRequestChecksFailed.type, redChecksOn(branch, sha('4')));
      expect(await run(created.sprintRunId)).toMatchObject({ status: 'FAILED', failure: { reason: 'CHECKS_FAILED' } });
    });

    it("red checks on a push whose report the run has not handled yet fail it: the pr-service saw the head first", async () => {
      const branch = 'sprint/SP-early';
      const created = await world.client.request(createSprintRun, { sprintId: 'SP-early', productId: 'product-42', taskIds: ['T-Q1', 'T-Q2'], branch, idempotencyKey: key('sprint') });
      const first = await queuedJobOf(created.sprintRunId, 'T-Q1');
      await pushHead(first, 'runner-q1', branch, sha('5'));
      await handledByConsumer(world.db, 'job-service-sprint-runs-from-jobs', await eventIdOf(world.db, first.jobId, 'JobPushReported'));
      const second = await queuedJobOf(created.sprintRunId, 'T-Q2');
      await withReactionHeldBack(second.jobId, 'JobPushReported', async () => {
        await pushHead(second, 'runner-q2', branch, sha('6'), false);
        await deliverPrFact(PullRequestChecksFailed.type, redChecksOn(branch, sha('6')));
        expect(await run(created.sprintRunId)).toMatchObject({ status: 'FAILED', failure: { reason: 'CHECKS_FAILED' } });
      });
      await handledByConsumer(world.db, 'job-service-sprint-runs-from-jobs', await eventIdOf(world.db, second.jobId, 'JobPushReported'));
      expect((await run(created.sprintRunId)).status).toBe('FAILED');
    });

    it("a push report handled after a later one's does not make its head the current one again", async () => {
      const branch = 'sprint/SP-order-heads';
      const created = await world.client.request(createSprintRun, { sprintId: 'SP-order-heads', productId: 'product-42', taskIds: ['T-P1', 'T-P2'], branch, idempotencyKey: key('sprint') });
      const first = await queuedJobOf(created.sprintRunId, 'T-P1');
      // The run learns of the first job's push only after the second job's.
      await withReactionHeldBack(first.jobId, 'JobPushReported', async () => {
        await pushHead(first, 'runner-p1', branch, sha('7'));
        const second = await queuedJobOf(created.sprintRunId, 'T-P2');
        await pushHead(second, 'runner-p2', branch, sha('8'), false);
        await handledByConsumer(world.db, 'job-service-sprint-runs-from-jobs', await eventIdOf(world.db, second.jobId, 'JobPushReported'));
      });
      await handledByConsumer(world.db, 'job-service-sprint-runs-from-jobs', await eventIdOf(world.db, first.jobId, 'JobPushReported'));
      await deliverPrFact(PullRequestMergeConflict.type, conflictOn(branch, sha('7')));
      expect((await run(created.sprintRunId)).status).toBe('RUNNING');
      await deliverPrFact(PullRequestMergeConflict.type, conflictOn(branch, sha('8')));
      expect((await run(created.sprintRunId)).status).toBe('PAUSED');
    });
  });

  it('replaying every event through the effect processor enqueues nothing twice', async () => {
    const before = (await world.client.request(listJobs, { limit: 500 })).jobs.length;
    const effectsConsumer = 'job-service-sprint-run-effects';
    const stream = streamName(world.naming, 'jobs');
    const { state } = await world.bus.jsm.streams.info(stream);
    await world.db.query(`DELETE FROM inbox WHERE consumer = $1`, [effectsConsumer]);
    await world.bus.jsm.consumers.delete(stream, OWN_EVENTS_DURABLE);
    // The durable is recreated and delivers the whole stream again: the effects consumer handles the sprint-run events again, the others find theirs in their inboxes.
    await consumerCaughtUp(world.bus.jsm, stream, OWN_EVENTS_DURABLE, { upTo: state.last_seq });
    const { rows: [handled] } = await world.db.query(
      `SELECT (SELECT count(*)::int FROM inbox WHERE consumer = $1) AS inbox, (SELECT count(*)::int FROM events WHERE type = ANY($2)) AS events`,
      [effectsConsumer, sprintRunEventTypes],
    );
    expect(handled.inbox).toBe(handled.events);
    expect(handled.events).toBeGreaterThan(0);
    // A job the replay enqueued would have been written with its inbox row, before the acknowledgement above.
    expect((await world.client.request(listJobs, { limit: 500 })).jobs.length).toBe(before);
  });
});
