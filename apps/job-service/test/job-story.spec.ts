import type { INestApplication } from '@nestjs/common';
import {
  claimJob,
  enqueueJob,
  ErrorCode,
  getJob,
  getJobStory,
  logCommit,
  logImplementation,
  logTestResult,
  rollbackClaim,
  startJob,
  type RequestOf,
  type StoryEntryView,
} from '@gantry/contracts';
import { readAllPages } from '@gantry/messaging';
import { createWorld, key, registerProducts, sha, startInProcess, type TestWorld } from './harness.js';

/*
 * get_job carries the story log's counts; get_job_story reads its entries, every attempt's, in
 * pages bounded by count and by bytes (docs/jobs.md, "The story log"; docs/architecture.md, "Paged
 * queries"). The job service in this process, on real PostgreSQL and NATS.
 */
describe('get_job_story: a job\'s story log in pages', () => {
  let world: TestWorld;
  let app: INestApplication;

  beforeAll(async () => {
    world = await createWorld('jobstory');
    app = await startInProcess(world);
    await registerProducts(world.client, ['product-1']);
  });
  afterAll(async () => {
    await app?.close();
    await world?.close();
  });

  const cursorOf = (k: Record<string, unknown>) => Buffer.from(JSON.stringify(k)).toString('base64url');
  const story = (request: RequestOf<typeof getJobStory>) => world.client.request(getJobStory, request, { timeoutMs: 30_000 });
  const summaries = (entries: StoryEntryView[]) => entries.map((e) => e.summary);

  async function claimed(jobId: string, runnerId: string) {
    const reply = await world.client.request(claimJob, { runnerId, kinds: ['TASK_IMPLEMENTATION'], jobId, baseSha: sha('b'), idempotencyKey: key('claim') });
    if (!reply.claimed) throw new Error('not claimed');
    const lease = { jobId, runnerId, leaseToken: reply.job.leaseToken };
    await world.client.request(startJob, { ...lease, branch: 'feat/story-1', idempotencyKey: key('start') });
    return lease;
  }

  async function runningJob() {
    const { jobId } = await world.client.request(enqueueJob, {
      kind: 'TASK_IMPLEMENTATION', productId: 'product-1', storyId: 'ST-1', taskId: `T-${Math.random().toString(36).slice(2, 8)}`,
      prompt: 'Implement it', baseRef: 'feat/story-1', idempotencyKey: key('enqueue'),
    });
    return claimed(jobId, 'runner-a');
  }

  /** Logs entries n..n+count-1 under the lease, in turn an implementation, a commit and a test result. */
  async function log(lease: { jobId: string; runnerId: string; leaseToken: number }, from: number, count: number, text = 0) {
    for (let n = from; n < from + count; n++) {
      const summary = `entry ${n}${' '.repeat(text)}`;
      const k = key('log');
      if (n % 3 === 0) await world.client.request(logImplementation, { ...lease, summary, ...(text ? { plan: 'p'.repeat(text) } : {}), idempotencyKey: k });
      else if (n % 3 === 1) await world.client.request(logCommit, { ...lease, commitSha: sha('c'), message: 'feat: x', summary, idempotencyKey: k });
      else await world.client.request(logTestResult, { ...lease, status: 'PASSED', summary, idempotencyKey: k });
    }
  }

  const numbered = (from: number, count: number) => Array.from({ length: count }, (_, i) => `entry ${from + i}`);

  it('answers a request without a cursor with the first page, and reads on to every attempt\'s entries in the order logged', async () => {
    const first = await runningJob();
    await log(first, 0, 3);
    await world.client.request(rollbackClaim, { ...first, reason: 'agent exited 1', exitCode: 1, idempotencyKey: key('rb') });
    const second = await claimed(first.jobId, 'runner-b');
    await log(second, 3, 55);

    const page = await story({ jobId: first.jobId } as RequestOf<typeof getJobStory>);
    expect(page.entries).toHaveLength(50);
    expect(page.total).toBe(58);
    expect(page.nextCursor).toEqual(expect.any(String));

    const entries = await readAllPages((cursor) => story({ jobId: first.jobId, limit: 20, ...(cursor ? { cursor } : {}) }), (p) => p.entries);
    expect(summaries(entries)).toEqual(numbered(0, 58));
    expect(entries.slice(0, 3).map((e) => [e.kind, e.leaseToken, e.runnerId])).toEqual([
      ['implementation', 1, 'runner-a'],
      ['commit', 1, 'runner-a'],
      ['test_result', 1, 'runner-a'],
    ]);
    expect(entries.slice(3).every((e) => e.leaseToken === 2)).toBe(true);
    // get_job: the current attempt's counts, not the entries
    expect((await world.client.request(getJob, { jobId: first.jobId })).storyLog).toEqual({ implementationEntries: 19, commitEntries: 18, testResultEntries: 18 });
  });

  it('ends a page at 512 KiB of entries, however many the limit allows', async () => {
    const lease = await runningJob();
    // implementation entries of about 40 KB (a plan and a summary of 20 000 characters each): 30 are over one NATS message
    await log(lease, 0, 90, 19_990);
    const first = await story({ jobId: lease.jobId, limit: 500 });
    expect(first.entries.length).toBeGreaterThan(0);
    expect(first.entries.length).toBeLessThan(90);
    expect(Buffer.byteLength(JSON.stringify(first.entries))).toBeLessThanOrEqual(512 * 1024);
    const entries = await readAllPages((cursor) => story({ jobId: lease.jobId, limit: 500, ...(cursor ? { cursor } : {}) }), (p) => p.entries);
    expect(entries.map((e) => e.summary.trimEnd())).toEqual(numbered(0, 90));
  });

  it('neither skips nor repeats an entry while the job logs more between pages', async () => {
    const lease = await runningJob();
    await log(lease, 0, 10);
    const seen: StoryEntryView[] = [];
    let page = await story({ jobId: lease.jobId, limit: 4 });
    seen.push(...page.entries);
    await log(lease, 10, 3);
    while (page.nextCursor) {
      page = await story({ jobId: lease.jobId, limit: 4, cursor: page.nextCursor });
      seen.push(...page.entries);
    }
    expect(summaries(seen)).toEqual(numbered(0, 13));
  });

  it('refuses a cursor it did not hand out, another job\'s among them, with INVALID_COMMAND, and an unknown job with NOT_FOUND', async () => {
    const lease = await runningJob();
    await log(lease, 0, 3);
    const other = await runningJob();
    await log(other, 0, 3);
    const othersCursor = (await story({ jobId: other.jobId, limit: 1 })).nextCursor!;
    expect(othersCursor).toEqual(expect.any(String));
    const foreign = [
      'not a cursor',
      othersCursor,
      cursorOf({ after: '5' }), // a list_jobs cursor
      cursorOf({ q: 'get_job_story', jobId: lease.jobId, after: 0 }),
      cursorOf({ q: 'get_job_story', jobId: lease.jobId, after: '2' }),
      cursorOf({ q: 'get_job_story', jobId: lease.jobId, after: 2 ** 40 }),
    ];
    for (const cursor of foreign) {
      await expect(story({ jobId: lease.jobId, limit: 10, cursor })).rejects.toMatchObject({ code: ErrorCode.INVALID_COMMAND, issues: [{ path: ['cursor'] }] });
    }
    await expect(story({ jobId: 'job-00000000-0000-4000-8000-000000000000', limit: 10 })).rejects.toMatchObject({ code: ErrorCode.NOT_FOUND });
  });
});
