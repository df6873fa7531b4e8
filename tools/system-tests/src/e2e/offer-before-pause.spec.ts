import { randomUUID } from 'node:crypto';
import {
  claimJob,
  dispatchStreamName,
  dispatchSubject,
  ErrorCode,
  getJob,
  isGantryError,
  jobOfferMessageId,
  JobOfferSchema,
  rollbackClaim,
  type JobOffer,
} from '@gantry/contracts';
import { Bus, CommandClient } from '@gantry/messaging';
import { eventually, logRecordsOf, testNatsUrl } from '@gantry/testing';
import { E2eSystem } from './e2e-system.js';

/*
 * An offer that reaches a runner before its job's pause after a hand-back has ended (docs/jobs.md,
 * "Attempts"): what a runner sees when the offer published at the pause's end is claimed on a job-service
 * replica whose clock is a moment behind. The offer here is published early under the Nats-Msg-Id the
 * job service gives the pause's own offer, so that publish is dropped as a copy and this offer is the
 * only one: dropped by the runner, the job would wait for the offer sweep and the stream's duplicate
 * window (about three minutes).
 */
describe.each([
  { clock: 'in step with the job service', clockSkewMs: 0 },
  // Handed back by its own clock, the offer waited the longest pause, a minute, whatever the pause left.
  { clock: 'five minutes behind', clockSkewMs: -300_000 },
])('an offer that comes before its job may be claimed, the runner\'s clock $clock', ({ clockSkewMs }) => {
  const system = new E2eSystem();
  const kind = 'TASK_IMPLEMENTATION' as const;
  let bus: Bus;
  let client: CommandClient;

  beforeAll(async () => {
    await system.start();
    bus = await Bus.connect({ servers: testNatsUrl, naming: system.naming, name: 'e2e-offer-before-pause' });
    client = new CommandClient(bus);
    await system.startRunner('runner-a', { concurrency: 1, kinds: [kind], env: { LOG_LEVEL: 'info' }, clockSkewMs });
  }, 120_000);
  afterAll(async () => {
    await bus?.close();
    await system.stop();
  }, 60_000);

  /** A claim by the test itself, asked again while the job's pause refuses it. */
  const claimAsTest = (jobId: string) =>
    eventually(
      async () => {
        try {
          const reply = await client.request(claimJob, { runnerId: 'runner-test', kinds: [kind], jobId, leaseDurationMs: 60_000, idempotencyKey: `test/claim:${randomUUID()}` });
          return reply.claimed ? reply.job.leaseToken : null;
        } catch (error) {
          if (isGantryError(error) && error.code === ErrorCode.PRECONDITION_FAILED) return null;
          throw error;
        }
      },
      { what: `the test's claim of ${jobId}`, timeoutMs: 30_000, intervalMs: 100 },
    );
  const handBack = (jobId: string, leaseToken: number) =>
    client.request(rollbackClaim, { jobId, runnerId: 'runner-test', leaseToken, reason: 'the worktree service did not answer', cause: 'DEPENDENCY', idempotencyKey: `test/rollback:${jobId}-${leaseToken}` });
  const deliveries = async () => (await bus.jsm.consumers.info(dispatchStreamName(system.naming), `runner-${kind}`)).delivered.consumer_seq;

  it('is handed back until the pause ends and claimed by the runner then, without being delivered again and again meanwhile', async () => {
    // The runner is kept busy (one place) while the test claims the job and hands it back.
    const blockerRecord = system.recordFile('blocker');
    const blocker = await system.enqueue({ kind, branch: 'feat/blocker', payload: { standIn: { behaviour: 'hang', recordArgvTo: blockerRecord } } });
    await eventually(async () => (await system.agentStarts(blockerRecord)).length === 1, { what: 'the blocker running', timeoutMs: 60_000 });

    const jobId = await system.enqueue({ kind, branch: 'feat/paused', payload: { standIn: { behaviour: 'hang', recordArgvTo: system.recordFile('paused') } } });
    // Three hand-backs in a row that keep the attempt: pauses of 1, 2 and 4 s; the fourth is 8 s.
    let leaseToken = await claimAsTest(jobId);
    for (let i = 0; i < 3; i++) {
      await handBack(jobId, leaseToken);
      leaseToken = await claimAsTest(jobId);
    }
    // The runner, free again, drops the offers of the earlier stays in the queue (the job is the test's).
    await system.cancel(blocker);
    await eventually(
      async () => {
        const info = await bus.jsm.consumers.info(dispatchStreamName(system.naming), `runner-${kind}`);
        return info.num_pending === 0 && info.num_ack_pending === 0;
      },
      { what: 'the earlier offers taken and dropped', timeoutMs: 60_000, intervalMs: 200 },
    );

    await handBack(jobId, leaseToken);
    const { offerNotBefore, productId, attempt } = await client.request(getJob, { jobId });
    expect(offerNotBefore).not.toBeNull();
    const pauseEnds = Date.parse(offerNotBefore!);
    const offer: JobOffer = JobOfferSchema.parse({ jobId, kind, productId, sprintRunId: null, attempt, afterLeaseToken: leaseToken, baseRef: 'main', offeredAt: new Date().toISOString() });
    const deliveredBefore = await deliveries();
    await bus.js.publish(dispatchSubject(system.naming, kind), JSON.stringify(offer), { msgID: jobOfferMessageId(offer) });

    const claim = await eventually(
      async () => (await system.events(jobId)).find((e) => e.type === 'JobClaimed' && e.data.runnerId === 'runner-a') ?? null,
      { what: 'the runner claiming the job once its pause ended', timeoutMs: Math.max(0, pauseEnds - Date.now()) + 15_000, intervalMs: 200 },
    );
    expect(Date.parse(claim.data.claimedAt as string)).toBeGreaterThanOrEqual(pauseEnds);
    // Refused for the pause before it ended, the offer went back until then: one delivery more, not a loop.
    const refused = logRecordsOf(system.output('runner-a')).filter((r) => r.message === 'claim refused for the job\'s pause; the offer goes back until it ends' && r.jobId === jobId);
    expect(refused.length).toBeGreaterThanOrEqual(1);
    expect((await deliveries()) - deliveredBefore).toBeLessThanOrEqual(refused.length + 1);
    expect(refused.length).toBeLessThanOrEqual(3);

    await system.cancel(jobId);
    expect((await system.terminal(jobId)).status).toBe('CANCELLED');
    await system.leasesReleased(jobId);
  }, 240_000);
});
