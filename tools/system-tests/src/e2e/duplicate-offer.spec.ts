import { jetstream } from '@nats-io/jetstream';
import { dispatchSubject, JobOfferSchema, type JobOffer } from '@gantry/contracts';
import { connectTestNats, eventually } from '@gantry/testing';
import { E2eSystem } from './e2e-system.js';

/*
 * An offer that reaches a runner twice (docs/jobs.md, "Claims"). The dispatch stream drops a
 * re-published offer by its Nats-Msg-Id only within its duplicate window (2 minutes): a relay that
 * publishes an enqueue's offer again after a longer outage of its service puts a second copy in the
 * stream. The runner claims under a key derived from the offer, so the second copy's claim answers
 * with the live claim the first one holds: the runner must not start the job a second time.
 */
describe('an offer delivered twice to the runner that runs its job', () => {
  const system = new E2eSystem();

  beforeAll(async () => {
    await system.start();
    await system.startRunner('runner-a', { concurrency: 2 });
  }, 60_000);
  afterAll(() => system.stop(), 60_000);

  it('runs the job once: the copy is dropped while the first run goes on, and the agent is started once', async () => {
    const record = system.recordFile('twice');
    const jobId = await system.enqueue({ branch: 'feat/offered-twice', payload: { standIn: { behaviour: 'hang', recordArgvTo: record } } });
    await eventually(async () => (await system.agentStarts(record)).length === 1, { what: 'the agent started', timeoutMs: 30_000 });
    const job = await system.job(jobId);
    expect(job.status).toBe('RUNNING');

    // The same offer again, as a re-publish after the duplicate window: no Nats-Msg-Id the stream still knows.
    const offer: JobOffer = JobOfferSchema.parse({
      jobId,
      kind: job.kind,
      productId: job.productId,
      sprintRunId: null,
      attempt: 1,
      afterLeaseToken: 0,
      baseRef: 'main',
      offeredAt: new Date().toISOString(),
    });
    const nc = await connectTestNats('duplicate-offer');
    try {
      await jetstream(nc).publish(dispatchSubject(system.naming, offer.kind), JSON.stringify(offer));
    } finally {
      await nc.close();
    }

    // Handled either way: dropped (said in the runner's log), or run again (a second agent start).
    await eventually(async () => system.output('runner-a').includes('offer dropped: this runner is running the job') || (await system.agentStarts(record)).length > 1, {
      what: 'the copy of the offer handled',
      timeoutMs: 30_000,
    });
    expect(await system.agentStarts(record)).toHaveLength(1);

    await system.cancel(jobId);
    expect((await system.terminal(jobId)).status).toBe('CANCELLED');
    await system.leasesReleased(jobId);
    // The first run reported its stop: it was not disturbed by the copy.
    expect((await system.events(jobId)).filter((e) => e.type === 'JobRunStopped')).toHaveLength(1);
  }, 120_000);
});
