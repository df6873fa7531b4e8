import type { INestApplication } from '@nestjs/common';
import {
  agentReportsStreamId,
  askQuestion,
  cancelJob,
  cancelSprintRun,
  claimJob,
  createSprintRun,
  enqueueJob,
  finishJob,
  getJob,
  logCommit,
  logImplementation,
  logTestResult,
  reportAgentStatus,
  reportPush,
  rollbackClaim,
  startJob,
} from '@gantry/contracts';
import { createWorld, key, registerProducts, sha, startInProcess, taskEnqueueRequest, type TestWorld } from './harness.js';

/**
 * A command delivered several times at once under its key (a caller's retry that overtook its first
 * try after a lost reply, a NATS redelivery): every copy gets the one answer, and the stream records it
 * once (docs/architecture.md, idempotency). A claim's copies are one claim though the claims of one
 * process pick different jobs when they arrive together: one job is claimed, every copy gets that job,
 * and the others stay in the queue.
 */
describe('commands asked several times at once under one key', () => {
  let world: TestWorld;
  let app: INestApplication;

  beforeAll(async () => {
    world = await createWorld('jobs_claim_dup');
    app = await startInProcess(world);
    await registerProducts(world.client, ['product-dup']);
  });
  afterAll(async () => {
    await app?.close();
    await world?.close();
  });

  it('claims one job, answers every copy with it, and leaves the other jobs queued', async () => {
    const jobs: string[] = [];
    for (let i = 0; i < 4; i++) jobs.push((await world.client.request(enqueueJob, taskEnqueueRequest('product-dup'))).jobId);
    const request = { runnerId: 'runner-dup', kinds: ['TASK_IMPLEMENTATION' as const], idempotencyKey: key('claim') };
    const replies = await Promise.all(Array.from({ length: 4 }, () => world.client.request(claimJob, request, { timeoutMs: 30_000 })));
    const first = replies[0]!;
    if (!first.claimed) throw new Error('not claimed');
    for (const reply of replies) expect(reply).toMatchObject({ claimed: true, job: { jobId: first.job.jobId, leaseToken: first.job.leaseToken } });
    const statuses = await Promise.all(jobs.map(async (jobId) => (await world.client.request(getJob, { jobId })).status));
    expect(statuses.filter((s) => s === 'CLAIMED')).toHaveLength(1);
    expect(statuses.filter((s) => s === 'QUEUED')).toHaveLength(3);
  });

  const events = async (streamId: string) => (await world.db.query(`SELECT type FROM events WHERE stream_id = $1 ORDER BY stream_version`, [streamId])).rows.map((r) => r.type);
  /** The four answers, which must be one. */
  const fourAtOnce = async <T>(send: () => Promise<T>): Promise<T> => {
    const answers = await Promise.all(Array.from({ length: 4 }, send));
    expect(answers.slice(1)).toEqual([answers[0], answers[0], answers[0]]);
    return answers[0]!;
  };

  it("a job's life, each step four times at once: one answer per step, one event per step", async () => {
    const enqueue = taskEnqueueRequest('product-dup');
    const answers = await Promise.all(Array.from({ length: 4 }, () => world.client.request(enqueueJob, enqueue)));
    const jobId = answers[0]!.jobId;
    expect(answers.map((a) => [a.jobId, a.outcome]).sort()).toEqual([
      [jobId, 'created'],
      [jobId, 'deduplicated'],
      [jobId, 'deduplicated'],
      [jobId, 'deduplicated'],
    ]);
    const claim = await world.client.request(claimJob, { runnerId: 'runner-dup', kinds: ['TASK_IMPLEMENTATION'], jobId, idempotencyKey: key('claim') });
    if (!claim.claimed) throw new Error('not claimed');
    const lease = { jobId, runnerId: 'runner-dup', leaseToken: claim.job.leaseToken };

    const start = { ...lease, idempotencyKey: key('start') };
    expect(await fourAtOnce(() => world.client.request(startJob, start))).toEqual({ jobId, status: 'RUNNING' });
    const implementation = { ...lease, summary: 'start', idempotencyKey: key('log') };
    await fourAtOnce(() => world.client.request(logImplementation, implementation));
    const commit = { ...lease, commitSha: sha('a'), message: 'feat', summary: 'one file', idempotencyKey: key('log') };
    await fourAtOnce(() => world.client.request(logCommit, commit));
    const tests = { ...lease, status: 'PASSED' as const, summary: 'green', idempotencyKey: key('log') };
    await fourAtOnce(() => world.client.request(logTestResult, tests));
    const status = { ...lease, status: 'IN_PROGRESS' as const, summary: 'half way', idempotencyKey: key('status') };
    await fourAtOnce(() => world.client.request(reportAgentStatus, status));
    const question = { ...lease, question: 'which port?', idempotencyKey: key('ask') };
    await fourAtOnce(() => world.client.request(askQuestion, question));
    expect(await events(agentReportsStreamId(jobId))).toEqual(['AgentStatusReported', 'AgentQuestionAsked']);
    const push = { ...lease, branch: claim.job.branch!, headSha: sha('a'), pushed: true, idempotencyKey: key('push') };
    await fourAtOnce(() => world.client.request(reportPush, push));
    const finish = {
      ...lease,
      idempotencyKey: key('finish'),
      facts: {
        verifyResult: 'ALIGNED' as const, newCommit: true, netDiff: { filesChanged: 1, insertions: 3, deletions: 0 },
        workAlreadyOnTarget: false, diffIdenticalToMergedBranch: false, failure: null, cancelled: false,
      },
    };
    expect(await fourAtOnce(() => world.client.request(finishJob, finish))).toEqual({ jobId, jobStatus: 'DONE', taskStatus: 'DONE', error: null });
    expect(await events(jobId)).toEqual(['JobEnqueued', 'JobClaimed', 'JobStarted', 'ImplementationLogged', 'CommitLogged', 'TestResultLogged', 'JobPushReported', 'JobFinished']);
  }, 60_000);

  it('a hand-back and a cancel, each four times at once: one event each', async () => {
    const { jobId } = await world.client.request(enqueueJob, taskEnqueueRequest('product-dup'));
    const claim = await world.client.request(claimJob, { runnerId: 'runner-dup-2', kinds: ['TASK_IMPLEMENTATION'], jobId, idempotencyKey: key('claim') });
    if (!claim.claimed) throw new Error('not claimed');
    const rollback = { jobId, runnerId: 'runner-dup-2', leaseToken: claim.job.leaseToken, reason: 'agent exited 1', cause: 'RUNNER' as const, idempotencyKey: key('rollback') };
    expect(await fourAtOnce(() => world.client.request(rollbackClaim, rollback))).toMatchObject({ jobId, status: 'QUEUED' });
    const cancel = { jobId, reason: 'not wanted', idempotencyKey: key('cancel') };
    expect(await fourAtOnce(() => world.client.request(cancelJob, cancel))).toEqual({ jobId, status: 'CANCELLED' });
    expect(await events(jobId)).toEqual(['JobEnqueued', 'JobClaimed', 'JobClaimRolledBack', 'JobCancelled']);
  }, 60_000);

  it('a sprint run created four times at once under one key is one run; its cancel four times at once, one cancel', async () => {
    const create = { sprintId: 'SP-dup', productId: 'product-dup', taskIds: ['T-dup-1'], branch: 'sprint/SP-dup', idempotencyKey: key('sprint') };
    const created = await fourAtOnce(() => world.client.request(createSprintRun, create));
    expect((await world.db.query(`SELECT sprint_run_id FROM sprint_runs WHERE branch = 'sprint/SP-dup'`)).rows).toEqual([{ sprint_run_id: created.sprintRunId }]);
    const cancel = { sprintRunId: created.sprintRunId, reason: 'not wanted', idempotencyKey: key('cancel') };
    expect(await fourAtOnce(() => world.client.request(cancelSprintRun, cancel))).toEqual({ sprintRunId: created.sprintRunId, status: 'CANCELLED' });
    expect((await events(created.sprintRunId)).filter((t) => t === 'SprintRunCancelled')).toHaveLength(1);
  }, 60_000);
});
