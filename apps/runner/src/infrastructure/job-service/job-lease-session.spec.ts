import { commandSubject, type ClaimedJob } from '@gantry/contracts';
import { Bus, CommandClient } from '@gantry/messaging';
import { testNatsUrl, testNaming, uniqueName } from '@gantry/testing';
import { JobLeaseSession } from './job-lease-session.js';

const naming = testNaming(uniqueName('lease_session'));
const job = {
  jobId: 'job-7b1d3c9e-2f4a-4c1b-9e7d-0a1b2c3d4e5f',
  leaseToken: 4,
} as ClaimedJob;

describe('commands a runner sends under its claim', () => {
  let bus: Bus;
  let session: JobLeaseSession;

  beforeAll(async () => {
    bus = await Bus.connect({ servers: testNatsUrl, naming, name: 'lease-session-test' });
    session = new JobLeaseSession(new CommandClient(bus), 'runner-a', { ...job, leaseExpiresAt: new Date(Date.now() + 60_000).toISOString() }, Date.now() + 60_000, { timeoutMs: 300, correlationId: 'corr-1' });
  });
  afterAll(() => bus.close());

  /** The job service's subject, answered only from the `answerFrom`-th request on (earlier ones get no reply). */
  function jobServiceAnswering(name: string, answerFrom: number, result: unknown) {
    const requests: Record<string, unknown>[] = [];
    const sub = bus.nc.subscribe(commandSubject(naming, 'jobs', name), {
      callback: (_error, msg) => {
        requests.push(msg.json());
        if (requests.length >= answerFrom) msg.respond(JSON.stringify({ ok: true, result }));
      },
    });
    return { requests, close: () => sub.unsubscribe() };
  }

  it('carries the claim fencing token and sends a request without an answer again under the same idempotency key', async () => {
    const service = jobServiceAnswering('start_job', 2, { jobId: job.jobId, status: 'RUNNING' });
    try {
      expect(await session.start({ baseSha: '3f2c9a1b7d4e5f60718293a4b5c6d7e8f9012345', branch: 'feat/x' })).toEqual({ jobId: job.jobId, status: 'RUNNING' });
    } finally {
      service.close();
    }
    expect(service.requests).toHaveLength(2);
    expect(service.requests[0]).toMatchObject({ jobId: job.jobId, runnerId: 'runner-a', leaseToken: 4, correlationId: 'corr-1' });
    expect(service.requests[1]).toEqual(service.requests[0]);
  });

  it('gives each story-log entry its own key, and the same entry the same key', async () => {
    const service = jobServiceAnswering('log_test_result', 1, { jobId: job.jobId, status: 'RUNNING' });
    try {
      await session.logTestResult({ status: 'PASSED', summary: 'all green' });
      await session.logTestResult({ status: 'FAILED', summary: '1 failing' });
      await session.logTestResult({ status: 'PASSED', summary: 'all green' });
    } finally {
      service.close();
    }
    const keys = service.requests.map((r) => r.idempotencyKey);
    expect(keys[0]).not.toBe(keys[1]);
    expect(keys[2]).toBe(keys[0]);
  });

  it("gives the agent's numbered entries a key each: PASSED, FAILED, then PASSED again are three entries, a resend of one is the same", async () => {
    const service = jobServiceAnswering('log_test_result', 1, { jobId: job.jobId, status: 'RUNNING' });
    try {
      await session.logTestResult({ status: 'PASSED', summary: 'all green' }, 1);
      await session.logTestResult({ status: 'FAILED', summary: '1 failing' }, 2);
      await session.logTestResult({ status: 'PASSED', summary: 'all green' }, 3);
      await session.logTestResult({ status: 'PASSED', summary: 'all green' }, 3);
    } finally {
      service.close();
    }
    const keys = service.requests.map((r) => r.idempotencyKey);
    expect(new Set(keys.slice(0, 3)).size).toBe(3);
    expect(keys[3]).toBe(keys[2]);
  });

  it("gives up with TIMEOUT once the claim's lease has run out, when the job service never answers", async () => {
    const short = new JobLeaseSession(new CommandClient(bus), 'runner-a', { ...job, leaseExpiresAt: new Date(Date.now() + 1500).toISOString() }, Date.now() + 1500, { timeoutMs: 300, correlationId: 'corr-1' });
    const service = jobServiceAnswering('finish_job', 100, {});
    try {
      await expect(
        short.finish({
          verifyResult: 'EMPTY',
          newCommit: false,
          netDiff: { filesChanged: 0, insertions: 0, deletions: 0 },
          workAlreadyOnTarget: true,
          diffIdenticalToMergedBranch: false,
          failure: null,
          cancelled: false,
        }),
      ).rejects.toMatchObject({ code: 'TIMEOUT' });
    } finally {
      service.close();
    }
    // sent again and again under one key while the lease ran, never after it
    expect(service.requests.length).toBeGreaterThan(1);
    expect(Date.now()).toBeGreaterThanOrEqual(short.leaseExpiresAt - 2000);
    expect(new Set(service.requests.map((r) => r.idempotencyKey)).size).toBe(1);
  });

  it('counts a renewal answered after the job service was away for longer than the lease from about its answered try, not from before the outage', async () => {
    const away = new JobLeaseSession(new CommandClient(bus), 'runner-a', { ...job, leaseExpiresAt: new Date(Date.now() + 500).toISOString() }, Date.now() + 500, { timeoutMs: 300, correlationId: 'corr-1' });
    const renewal = away.renew(10_000);
    // no job service for three times the lease that was left
    await new Promise((r) => setTimeout(r, 1500));
    const servedFrom = Date.now();
    const service = jobServiceAnswering('renew_job_lease', 1, { jobId: job.jobId, leaseToken: 4, leaseExpiresAt: new Date(Date.now() + 10_000).toISOString() });
    try {
      await renewal;
    } finally {
      service.close();
    }
    // the service that answered resumed the lease at its start and renewed it from its answer
    expect(away.leaseExpiresAt).toBeGreaterThanOrEqual(servedFrom + 10_000 - 50);
    expect(away.leaseExpiresAt).toBeLessThanOrEqual(Date.now() + 10_000);
  });

  it('does not repeat a refusal', async () => {
    const requests: unknown[] = [];
    const sub = bus.nc.subscribe(commandSubject(naming, 'jobs', 'rollback_claim'), {
      callback: (_error, msg) => {
        requests.push(msg.json());
        msg.respond(JSON.stringify({ ok: false, error: { code: 'STALE_FENCE', message: 'lease 4 is stale' } }));
      },
    });
    try {
      await expect(session.rollback('agent exited with code 1', 'JOB', 1)).rejects.toMatchObject({ code: 'STALE_FENCE' });
    } finally {
      sub.unsubscribe();
    }
    expect(requests).toHaveLength(1);
  });
});
