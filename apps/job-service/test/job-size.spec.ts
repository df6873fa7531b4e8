import type { INestApplication } from '@nestjs/common';
import {
  askQuestion,
  cancelJob,
  cancelSprintRun,
  claimJob,
  createSprintRun,
  enqueueJob,
  ErrorCode,
  finishJob,
  getJob,
  getJobStory,
  getSprintRun,
  listJobs,
  logCommit,
  logImplementation,
  logTestResult,
  renewJobLease,
  reportAgentStatus,
  reportPush,
  rollbackClaim,
  startJob,
  jsonBytes,
  MAX_JOB_INPUT_BYTES,
  MAX_JOB_REQUEST_BYTES,
  MAX_SPRINT_TASK_PAYLOAD_BYTES,
  type VerificationFacts,
} from '@gantry/contracts';
import { eventually, relayed } from '@gantry/testing';
import { createWorld, finishClaimedDone, key, registerProducts, sha, startInProcess, taskEnqueueRequest, type TestWorld } from './harness.js';


/** The costliest character in JSON: one UTF-16 unit, one byte of UTF-8, six bytes escaped (`\u0001`). */
const costly = (n: number) => '\u0001'.repeat(n);
/** A text of `n` characters written as long as JSON writes any text of that length. */
const longest = costly;

/** A payload of exactly `bytes` bytes as JSON. */
const payloadOf = (bytes: number) => ({ blob: 'b'.repeat(bytes - jsonBytes({ blob: '' })) });

describe('what a job carries fits one NATS message, whatever was accepted (docs/jobs.md, "How large a job may be")', () => {
  let world: TestWorld;
  let app: INestApplication;

  beforeAll(async () => {
    world = await createWorld('jobsize');
    app = await startInProcess(world);
    await registerProducts(world.client, ['product-size']);
    await registerProducts(world.client, ['product-size-sprint'], { prStrategy: 'SPRINT' });
  });

  afterAll(async () => {
    await app?.close();
    await world?.close();
  });

  const enqueue = (over: Parameters<typeof taskEnqueueRequest>[1] = {}) => world.client.request(enqueueJob, taskEnqueueRequest('product-size', over));
  const countEvents = async () => Number((await world.db.query(`SELECT count(*) AS n FROM events`)).rows[0].n);

  /** Every event of the streams was published by the relay: nothing stays stuck in the outbox behind them. */
  async function allRelayed(...streamIds: string[]) {
    const { rows } = await world.db.query<{ event_id: string }>(`SELECT event_id FROM events WHERE stream_id = ANY($1)`, [streamIds]);
    expect(rows.length).toBeGreaterThan(0);
    for (const row of rows) await relayed(world.db, row.event_id);
  }

  it('an enqueue whose prompt and payload are over MAX_JOB_INPUT_BYTES as JSON is refused INVALID_COMMAND naming the limit, and nothing is recorded', async () => {
    // 100,000 characters of UTF-8 but 600,002 bytes of JSON, with a payload: it fits the bus and its event would fit too.
    const before = await countEvents();
    const error = await enqueue({ taskId: 'T-too-large', prompt: costly(100_000), payload: payloadOf(300_000) }).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: ErrorCode.INVALID_COMMAND, message: expect.stringContaining(`at most ${MAX_JOB_INPUT_BYTES} bytes`) });
    expect(await countEvents()).toBe(before);
    expect((await world.client.request(listJobs, { taskId: 'T-too-large' })).jobs).toEqual([]);
  });

  it('coalescing counts a prompt as JSON writes it: jobs of control-character prompts can each be read and claimed', async () => {
    // 40,000 control characters are 40 KB of UTF-8 and 240 KB of JSON: counted as UTF-8, six of them made one job of 1.4 MB.
    const review = { kind: 'REVIEW' as const, reason: 'size-coalesced', agentProfile: { id: 'profile-size', model: 'claude-opus-4-7', thinkingBudget: 12000 } };
    const jobIds = new Set<string>();
    for (let n = 0; n < 6; n++) jobIds.add((await enqueue({ ...review, prompt: `${n}${costly(40_000)}`, payload: { n } })).jobId);
    let prompts = 0;
    for (const jobId of jobIds) {
      const job = await world.client.request(getJob, { jobId });
      prompts += job.prompts.length;
      const claim = await world.client.request(claimJob, { runnerId: 'runner-size', kinds: ['REVIEW'], jobId, idempotencyKey: key('claim') });
      expect(claim).toMatchObject({ claimed: true, job: { jobId } });
    }
    expect(prompts).toBe(6);
  });

  it('the largest request each write command accepts is recorded, answered and published: no event of theirs can stop the relay', async () => {
    // The enqueue: prompt and payload at MAX_JOB_INPUT_BYTES in the costliest characters, the job's configuration as large as the request allows.
    const prompt = costly(40_000);
    const input = { prompt, payload: payloadOf(MAX_JOB_INPUT_BYTES - jsonBytes(prompt)) };
    const tools = Array.from({ length: 100 }, (_, i) => `${i}`.padEnd(200, '\u0001'));
    const request = taskEnqueueRequest('product-size', {
      ...input,
      storyId: longest(200),
      taskId: `T-${longest(198)}`,
      reason: longest(200),
      configOverrides: { job: { model: longest(200), allowedTools: tools } },
    });
    expect(jsonBytes(request)).toBeGreaterThan(MAX_JOB_REQUEST_BYTES - 16 * 1024);
    const { jobId } = await world.client.request(enqueueJob, request);
    const view = await world.client.request(getJob, { jobId });
    expect(view.prompts).toEqual([prompt]);
    // The largest job leaves room in its answers for what it gathers later (docs/jobs.md).
    expect(jsonBytes(view)).toBeLessThan(512 * 1024);
    expect((await world.client.request(listJobs, { storyId: request.storyId!, limit: 500 })).jobs.map((j) => j.jobId)).toEqual([jobId]);
    const claimed = await world.client.request(claimJob, { runnerId: 'runner-size', kinds: ['TASK_IMPLEMENTATION'], jobId, baseSha: sha('b'), idempotencyKey: key('claim') });
    if (!claimed.claimed) throw new Error('not claimed');
    expect(claimed.job.agentConfig.allowedTools).toEqual(expect.arrayContaining(tools));
    expect(jsonBytes(claimed)).toBeLessThan(512 * 1024);
    const fence = { jobId, runnerId: 'runner-size', leaseToken: claimed.job.leaseToken };

    await world.client.request(renewJobLease, { ...fence, leaseDurationMs: 7_200_000 });
    await world.client.request(startJob, { ...fence, baseSha: sha('b'), branch: `b/${'x'.repeat(253)}`, idempotencyKey: key('start') });
    await world.client.request(logImplementation, {
      ...fence, taskId: longest(200), branch: `b/${'x'.repeat(253)}`, plan: longest(20_000), summary: longest(20_000),
      alreadyPresent: { extent: 'PARTIAL', commitSha: sha('a') }, idempotencyKey: key('log'),
    });
    await world.client.request(logCommit, { ...fence, commitSha: sha('c'), message: longest(10_000), summary: longest(20_000), idempotencyKey: key('log') });
    await world.client.request(logTestResult, { ...fence, status: 'PASSED', summary: longest(20_000), idempotencyKey: key('log') });
    await world.client.request(reportAgentStatus, { ...fence, status: 'FAILED', summary: longest(20_000), error: longest(20_000), idempotencyKey: key('status') });
    await world.client.request(askQuestion, {
      ...fence, question: longest(10_000), context: longest(50_000), options: Array.from({ length: 20 }, () => longest(500)), idempotencyKey: key('question'),
    });
    const facts: VerificationFacts = {
      verifyResult: 'ALIGNED', newCommit: true, netDiff: { filesChanged: 1, insertions: 1, deletions: 0 }, workAlreadyOnTarget: false,
      diffIdenticalToMergedBranch: false, failure: { kind: 'TEST', message: longest(4_000) }, cancelled: false, headSha: sha('c'), planCheck: 'NO_EXPECTED_CHANGES',
    };
    await world.client.request(reportPush, { ...fence, branch: `b/${'x'.repeat(253)}`, headSha: sha('c'), pushed: true, facts, idempotencyKey: key('push') });
    await world.client.request(finishJob, { ...fence, facts, idempotencyKey: key('finish') });
    const story = await world.client.request(getJobStory, { jobId });
    expect(story.entries.length).toBeGreaterThan(0);

    // A rollback and a cancel, each with its longest reason, on jobs of their own.
    const rolledBack = (await enqueue({})).jobId;
    const claim = await world.client.request(claimJob, { runnerId: 'runner-size', kinds: ['TASK_IMPLEMENTATION'], jobId: rolledBack, idempotencyKey: key('claim') });
    if (!claim.claimed) throw new Error('not claimed');
    await world.client.request(rollbackClaim, { jobId: rolledBack, runnerId: 'runner-size', leaseToken: claim.job.leaseToken, reason: longest(2_000), exitCode: 1, idempotencyKey: key('rollback') });
    const cancelled = (await enqueue({})).jobId;
    await world.client.request(cancelJob, { jobId: cancelled, reason: longest(2_000), idempotencyKey: key('cancel') });

    await allRelayed(jobId, `agentreports-${jobId}`, rolledBack, cancelled);
  });

  it('a sprint run whose task payload would make a job over MAX_JOB_INPUT_BYTES is refused INVALID_COMMAND naming the limit, and nothing is recorded', async () => {
    const before = await countEvents();
    const error = await world.client
      .request(createSprintRun, {
        sprintId: 'SP-too-large', productId: 'product-size-sprint', taskIds: ['T-1', 'T-2'], branch: 'sprint/too-large',
        taskPayloads: { 'T-1': payloadOf(300_000) }, idempotencyKey: key('sprint-run'),
      })
      .catch((e: unknown) => e);
    expect(error).toMatchObject({ code: ErrorCode.INVALID_COMMAND, message: expect.stringContaining(`at most ${MAX_SPRINT_TASK_PAYLOAD_BYTES} bytes`) });
    expect(await countEvents()).toBe(before);
  });

  it('the largest sprint run accepted is recorded, published and answered, and each of its jobs can be read and claimed', async () => {
    const taskIds = ['T-a', 'T-b'];
    const request = {
      sprintId: longest(200), productId: 'product-size-sprint', taskIds, branch: `sprint/${'x'.repeat(248)}`,
      taskPayloads: { 'T-a': payloadOf(MAX_SPRINT_TASK_PAYLOAD_BYTES), 'T-b': payloadOf(MAX_JOB_REQUEST_BYTES - MAX_SPRINT_TASK_PAYLOAD_BYTES - 4 * 1024) },
      idempotencyKey: key('sprint-run'),
    };
    const { sprintRunId } = await world.client.request(createSprintRun, request);
    // The run queues its tasks one after the other: the first is done before the second is queued.
    const jobs = [];
    for (const taskId of taskIds) {
      const { jobId } = await eventually(
        async () => (await world.client.request(listJobs, { sprintRunId })).jobs.find((j) => j.taskId === taskId) ?? null,
        { what: `the sprint run's job of ${taskId}` },
      );
      jobs.push({ jobId });
      expect((await world.client.request(getJob, { jobId })).payloads).toHaveLength(1);
      const claim = await world.client.request(claimJob, { runnerId: 'runner-size', kinds: ['SPRINT_IMPLEMENTATION'], jobId, idempotencyKey: key('claim') });
      expect(claim).toMatchObject({ claimed: true, job: { jobId } });
      if (claim.claimed && taskId !== taskIds.at(-1)) await finishClaimedDone(world.client, { jobId, runnerId: 'runner-size', leaseToken: claim.job.leaseToken });
    }
    expect((await world.client.request(getSprintRun, { sprintRunId })).taskIds).toEqual(taskIds);
    await world.client.request(cancelSprintRun, { sprintRunId, reason: longest(2_000), idempotencyKey: key('cancel-sprint-run') });
    await allRelayed(sprintRunId, ...jobs.map((j) => j.jobId));
  });
});
