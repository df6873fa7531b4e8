import type { JobOffer } from '@gantry/contracts';
import type { JobEvent } from './events.js';
import type { Job } from './state.js';

/**
 * The offer a job event calls for, or null: a job is offered when it is enqueued and again when a
 * lease expiry or a rollback returns it to the queue. `job` is the job's state after the event.
 */
export function jobOfferFor(event: JobEvent, job: Job): JobOffer | null {
  switch (event.type) {
    case 'JobEnqueued':
      return offer(job, event.data.enqueuedAt);
    case 'JobLeaseExpired':
      return event.data.outcome === 'REQUEUED' ? offer(job, event.data.expiredAt) : null;
    case 'JobClaimRolledBack':
      return event.data.outcome === 'REQUEUED' ? offer(job, event.data.rolledBackAt) : null;
    default:
      return null;
  }
}

/** When the offer an event calls for is due: after the pause of a requeue that spent no attempt; null: at once. */
export function offerDueAt(event: JobEvent): string | null {
  return event.type === 'JobClaimRolledBack' ? (event.data.offerNotBefore ?? null) : null;
}

function offer(job: Job, offeredAt: string): JobOffer {
  return {
    jobId: job.jobId,
    kind: job.kind,
    productId: job.productId,
    sprintRunId: job.sprintRunId,
    attempt: job.attempt,
    afterLeaseToken: job.lastLeaseToken,
    baseRef: job.baseRef,
    offeredAt,
  };
}
