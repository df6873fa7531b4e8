import { commandSubject, type ClaimedJob } from '@gantry/contracts';
import { Bus, CommandClient } from '@gantry/messaging';
import { testNatsUrl, testNaming, uniqueName } from '@gantry/testing';
import { CommandJobReporter } from './command-job-reporter.js';
import { JobLeaseSession } from './job-lease-session.js';

const naming = testNaming(uniqueName('job_reporter'));
const job = { jobId: 'job-5c0e7a51-8d2b-4f6e-a1c3-9b8d7e6f5a4b', leaseToken: 2 } as ClaimedJob;

describe("the agent's story-log calls, as the runner keeps them", () => {
  let bus: Bus;
  let reporter: CommandJobReporter;

  beforeAll(async () => {
    bus = await Bus.connect({ servers: testNatsUrl, naming, name: 'job-reporter-test' });
  });
  beforeEach(() => {
    const session = new JobLeaseSession(new CommandClient(bus), 'runner-a', { ...job, leaseExpiresAt: new Date(Date.now() + 60_000).toISOString() }, Date.now() + 60_000, { timeoutMs: 300, correlationId: 'corr-1' });
    reporter = new CommandJobReporter(session, null);
  });
  afterAll(() => bus.close());

  /** The job service's log_implementation: no answer to the first `silent` requests, then `answer` to each. */
  function jobService(silent: number, answer: unknown) {
    let requests = 0;
    const sub = bus.nc.subscribe(commandSubject(naming, 'jobs', 'log_implementation'), {
      callback: (_error, msg) => {
        requests += 1;
        if (requests > silent) msg.respond(JSON.stringify(answer));
      },
    });
    return { requests: () => requests, close: () => sub.unsubscribe() };
  }

  it('a call the agent stopped waiting for (the job service away, the agent gone) is counted once it is answered: settled() waits for it', async () => {
    const service = jobService(2, { ok: true, result: { jobId: job.jobId, status: 'RUNNING' } });
    try {
      // The agent's side gives up on the call; the runner's goes on sending it under its key.
      const call = reporter.logImplementation({ summary: 'added the index' });
      expect(reporter.storyLog.implementation).toBe(0);
      await reporter.settled();
      expect(service.requests()).toBe(3);
      expect(reporter.storyLog).toEqual({ implementation: 1, commits: 0, testResults: false });
      await expect(call).resolves.toMatchObject({ entryId: expect.stringContaining(job.jobId) });
    } finally {
      service.close();
    }
  });

  it('a refused call is not counted, and settled() ends with it', async () => {
    const service = jobService(1, { ok: false, error: { code: 'STALE_FENCE', message: 'lease 2 is stale' } });
    try {
      const call = reporter.logImplementation({ summary: 'added the index' });
      await reporter.settled();
      await expect(call).rejects.toMatchObject({ code: 'STALE_FENCE' });
      expect(reporter.storyLog.implementation).toBe(0);
    } finally {
      service.close();
    }
  });

  it('settled() with no call under way ends at once', async () => {
    await expect(reporter.settled()).resolves.toBeUndefined();
  });
});
