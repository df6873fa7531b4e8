import type { INestApplication } from '@nestjs/common';
import { EventStore } from '@gantry/eventstore';
import { askQuestion, claimJob, enqueueJob, ErrorCode, finishJob, logImplementation, logTestResult, reportAgentStatus, startJob } from '@gantry/contracts';
import { createWorld, key, registerProducts, startInProcess, type TestWorld } from './harness.js';

describe('the agent reports its status and asks questions under the claim (report_agent_status, ask_question)', () => {
  let world: TestWorld;
  let app: INestApplication;

  beforeAll(async () => {
    world = await createWorld('agent_reports');
    app = await startInProcess(world);
    await registerProducts(world.client, ['product-r']);
  });
  afterAll(async () => {
    await app?.close();
    await world?.close();
  });

  async function claimed(runnerId = 'runner-reports-1') {
    const { jobId } = await world.client.request(enqueueJob, { kind: 'PLAN_CHAT', productId: 'product-r', idempotencyKey: key('enqueue'), excludeFromCoalescing: true });
    const reply = await world.client.request(claimJob, { runnerId, kinds: ['PLAN_CHAT'], jobId, idempotencyKey: key('claim') });
    if (!reply.claimed) throw new Error('not claimed');
    return { jobId, runnerId, leaseToken: reply.job.leaseToken };
  }

  async function reports(jobId: string) {
    const { rows } = await world.db.query(`SELECT type, data FROM events WHERE stream_id = $1 ORDER BY stream_version`, [`agentreports-${jobId}`]);
    return rows as { type: string; data: Record<string, unknown> }[];
  }

  it('records each status report and question in the job\'s report stream, leaving the job as it was', async () => {
    const fence = await claimed();
    const status = await world.client.request(reportAgentStatus, { ...fence, status: 'PARTIAL', summary: 'half done', idempotencyKey: key('status') });
    expect(status).toMatchObject({ jobId: fence.jobId, status: 'PARTIAL' });
    const question = await world.client.request(askQuestion, { ...fence, question: 'Drop the table?', options: ['yes', 'no'], idempotencyKey: key('question') });
    expect(question).toMatchObject({ jobId: fence.jobId, answer: null, questionId: expect.stringMatching(/^question-/) });
    expect(await reports(fence.jobId)).toEqual([
      { type: 'AgentStatusReported', data: expect.objectContaining({ status: 'PARTIAL', summary: 'half done', error: null, leaseToken: fence.leaseToken }) },
      { type: 'AgentQuestionAsked', data: expect.objectContaining({ questionId: question.questionId, question: 'Drop the table?', options: ['yes', 'no'] }) },
    ]);
    const jobEvents = await world.db.query(`SELECT type FROM events WHERE stream_id = $1 ORDER BY stream_version`, [fence.jobId]);
    expect(jobEvents.rows.map((r) => r.type)).toEqual(['JobEnqueued', 'JobClaimed']);
  });

  it('a repeated report with the same key is recorded once', async () => {
    const fence = await claimed();
    const idempotencyKey = key('repeat');
    const first = await world.client.request(reportAgentStatus, { ...fence, status: 'IN_PROGRESS', summary: 'working', idempotencyKey });
    const second = await world.client.request(reportAgentStatus, { ...fence, status: 'IN_PROGRESS', summary: 'working', idempotencyKey });
    expect(second).toEqual(first);
    expect(await reports(fence.jobId)).toHaveLength(1);
  });

  it('refuses a stale token, another runner and a finished job, recording nothing', async () => {
    const fence = await claimed();
    await expect(world.client.request(reportAgentStatus, { ...fence, leaseToken: fence.leaseToken + 1, status: 'DONE', summary: 'x', idempotencyKey: key('s') })).rejects.toMatchObject({
      code: ErrorCode.STALE_FENCE,
    });
    await expect(world.client.request(askQuestion, { ...fence, runnerId: 'runner-intruder', question: 'x?', idempotencyKey: key('q') })).rejects.toMatchObject({
      code: ErrorCode.STALE_FENCE,
    });
    await world.client.request(startJob, { ...fence, idempotencyKey: key('start') });
    await world.client.request(logImplementation, { ...fence, summary: 'start', idempotencyKey: key('impl') });
    await world.client.request(logTestResult, { ...fence, status: 'PASSED', summary: 'ok', idempotencyKey: key('test') });
    await world.client.request(finishJob, {
      ...fence,
      idempotencyKey: key('finish'),
      facts: { verifyResult: 'NOT_APPLICABLE', newCommit: false, netDiff: { filesChanged: 0, insertions: 0, deletions: 0 }, workAlreadyOnTarget: false, diffIdenticalToMergedBranch: false, failure: null, cancelled: false },
    });
    await expect(world.client.request(reportAgentStatus, { ...fence, status: 'DONE', summary: 'late', idempotencyKey: key('late') })).rejects.toMatchObject({
      code: ErrorCode.INVALID_TRANSITION,
    });
    expect(await reports(fence.jobId)).toEqual([]);
  });

  it('judges the lease and stamps the report by the event store\'s clock, as the job commands do', async () => {
    const store = app.get(EventStore) as { clock: () => Date };
    const systemClock = store.clock;
    // the store's clock three hours behind the system's: the claim's 30-minute lease is live by it
    const storeNow = new Date(Date.now() - 3 * 3600_000);
    store.clock = () => storeNow;
    try {
      const fence = await claimed('runner-reports-clock');
      const status = await world.client.request(reportAgentStatus, { ...fence, status: 'IN_PROGRESS', summary: 'on it', idempotencyKey: key('clock') });
      expect(status.reportedAt).toBe(storeNow.toISOString());
      const question = await world.client.request(askQuestion, { ...fence, question: 'Which table?', idempotencyKey: key('clock-q') });
      expect(await reports(fence.jobId)).toEqual([
        { type: 'AgentStatusReported', data: expect.objectContaining({ reportedAt: storeNow.toISOString() }) },
        { type: 'AgentQuestionAsked', data: expect.objectContaining({ questionId: question.questionId, askedAt: storeNow.toISOString() }) },
      ]);
    } finally {
      store.clock = systemClock;
    }
  });

  it('refuses a job that does not exist', async () => {
    await expect(
      world.client.request(reportAgentStatus, {
        jobId: 'job-00000000-0000-4000-8000-000000000000',
        runnerId: 'runner-x',
        leaseToken: 1,
        status: 'DONE',
        summary: 'x',
        idempotencyKey: key('ghost'),
      }),
    ).rejects.toMatchObject({ code: ErrorCode.NOT_FOUND });
  });
});
