import { jobOfferMessageId, JobOfferSchema } from '@gantry/contracts';
import { at, claimed, enqueued, JOB, leaseExpired, started } from '../testing/job-fixtures.js';
import { jobDecider } from './decider.js';
import type { JobEvent } from './events.js';
import { jobOfferFor, offerDueAt } from './offer.js';
import type { Job } from './state.js';

const after = (events: JobEvent[]) => events.reduce(jobDecider.evolve, jobDecider.initialState) as Job;

describe('job offers on the dispatch subject', () => {
  it('an enqueued job is offered for its first attempt', () => {
    const offer = jobOfferFor(enqueued(), after([enqueued()]));
    expect(JobOfferSchema.parse(offer)).toEqual({
      jobId: JOB,
      kind: 'TASK_IMPLEMENTATION',
      productId: 'product-42',
      sprintRunId: null,
      attempt: 1,
      afterLeaseToken: 0,
      baseRef: 'feat/story-1208',
      offeredAt: at(0),
    });
  });

  it('a job requeued by an expired lease is offered again for the next attempt', () => {
    const history = [enqueued(), claimed(1, 1, 10), leaseExpired(1, 1, 190)];
    expect(jobOfferFor(history[2]!, after(history))).toMatchObject({ attempt: 2, afterLeaseToken: 1, offeredAt: at(190) });
  });

  it('a requeue that spent no attempt is a new offer of the same attempt, due after its pause', () => {
    const free: JobEvent = {
      type: 'JobClaimRolledBack',
      data: {
        jobId: JOB, runnerId: 'runner-a', leaseToken: 1, attempt: 1, outcome: 'REQUEUED', nextAttempt: 1, error: null,
        reason: 'the worktree service did not answer', exitCode: null, cause: 'DEPENDENCY', offerNotBefore: at(31), rolledBackAt: at(30),
      },
    };
    const history = [enqueued(), claimed(1, 1, 10), free];
    const offer = jobOfferFor(free, after(history))!;
    expect(offer).toMatchObject({ attempt: 1, afterLeaseToken: 1 });
    expect(jobOfferMessageId(offer)).not.toBe(jobOfferMessageId(jobOfferFor(enqueued(), after([enqueued()]))!));
    expect(offerDueAt(free)).toBe(at(31));
    expect(offerDueAt(enqueued())).toBeNull();
  });

  it('a rollback that requeues offers again; one that fails the job does not', () => {
    const rolledBack = (outcome: 'REQUEUED' | 'FAILED'): JobEvent => ({
      type: 'JobClaimRolledBack',
      data: {
        jobId: JOB,
        runnerId: 'runner-a',
        leaseToken: 1,
        attempt: 1,
        outcome,
        nextAttempt: outcome === 'REQUEUED' ? 2 : null,
        error: outcome === 'REQUEUED' ? null : 'max',
        reason: 'exit 1',
        exitCode: 1,
        rolledBackAt: at(30),
      },
    });
    const base = [enqueued(), claimed(1, 1, 10), started(1, 11)];
    expect(jobOfferFor(rolledBack('REQUEUED'), after([...base, rolledBack('REQUEUED')]))).toMatchObject({ attempt: 2 });
    expect(jobOfferFor(rolledBack('FAILED'), after([...base, rolledBack('FAILED')]))).toBeNull();
  });

  it('a claim or a start offers nothing', () => {
    const history = [enqueued(), claimed(1, 1, 10), started(1, 11)];
    expect(jobOfferFor(history[1]!, after(history.slice(0, 2)))).toBeNull();
    expect(jobOfferFor(history[2]!, after(history))).toBeNull();
  });
});
