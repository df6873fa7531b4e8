import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { dispatchStreamName, dispatchSubject, JobOfferSchema, type JobOffer } from '@gantry/contracts';
import { dispatchConsumerName } from '../../../../apps/runner/src/infrastructure/job-service/offer-intake.js';
import { connectTestNats, eventually } from '@gantry/testing';
import { E2eSystem } from './e2e-system.js';

/*
 * An offer that reaches a runner twice (docs/jobs.md, "Claims"). The dispatch stream drops a
 * re-published offer by its Nats-Msg-Id only within its duplicate window (2 minutes): a relay that
 * publishes an enqueue's offer again after a longer outage of its service puts a second copy in the
 * stream. The runner claims under a key derived from the offer, so the second copy's claim answers
 * with the live claim the first one holds: the runner must not start the job a second time.
 */
/** The offer of a queued job's first attempt, as the job service publishes it. */
function firstOffer(job: { jobId: string; kind: JobOffer['kind']; productId: string }): JobOffer {
  return JobOfferSchema.parse({ jobId: job.jobId, kind: job.kind, productId: job.productId, sprintRunId: null, attempt: 1, afterLeaseToken: 0, baseRef: 'main', offeredAt: new Date().toISOString() });
}

/** Publishes `offer` again with no Nats-Msg-Id, so the dispatch stream keeps it beside the first. */
async function offerAgain(system: E2eSystem, offer: JobOffer): Promise<void> {
  const nc = await connectTestNats('duplicate-offer');
  try {
    await jetstream(nc).publish(dispatchSubject(system.naming, offer.kind), JSON.stringify(offer));
  } finally {
    await nc.close();
  }
}

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
    await offerAgain(system, firstOffer(job));

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

/*
 * A copy of an offer taken by another runner while the first runs its job (docs/architecture.md,
 * "Consumers and their duplicates"): each runner claims under its own key, the job service grants one
 * claim, and the other runner drops its copy.
 */
describe('an offer delivered twice, once to each of two runners', () => {
  const system = new E2eSystem();

  beforeAll(async () => {
    await system.start();
    await system.startRunner('runner-a', { concurrency: 1 });
    await system.startRunner('runner-b', { concurrency: 1 });
  }, 60_000);
  afterAll(() => system.stop(), 60_000);

  it('the job is claimed once and its agent started once; the other runner drops its copy', async () => {
    const record = system.recordFile('two-runners');
    const jobId = await system.enqueue({ branch: 'feat/offered-to-two', payload: { standIn: { behaviour: 'hang', recordArgvTo: record } } });
    const job = await system.job(jobId);
    // At once with the job service's own offer: the two runners each take one.
    await offerAgain(system, firstOffer(job));
    await eventually(async () => (await system.agentStarts(record)).length === 1, { what: 'the agent started', timeoutMs: 30_000 });
    // Both copies taken, and one of them settled: the other is the offer runner-a holds while its job runs.
    const nc = await connectTestNats('duplicate-offer-watch');
    try {
      const jsm = await jetstreamManager(nc);
      await eventually(async () => {
        const info = await jsm.consumers.info(dispatchStreamName(system.naming), dispatchConsumerName(job.kind));
        return (info.num_pending === 0 && info.num_ack_pending === 1) || (await system.agentStarts(record)).length > 1;
      }, { what: 'the copy of the offer handled', timeoutMs: 30_000 });
    } finally {
      await nc.close();
    }

    expect(await system.agentStarts(record)).toHaveLength(1);
    expect((await system.events(jobId)).filter((e) => e.type === 'JobClaimed')).toHaveLength(1);

    await system.cancel(jobId);
    expect((await system.terminal(jobId)).status).toBe('CANCELLED');
    await system.leasesReleased(jobId);
  }, 120_000);
});
