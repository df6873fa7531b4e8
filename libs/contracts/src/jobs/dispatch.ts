import { z } from 'zod';
import { JobKindSchema } from './agent-config.js';
import { jobExampleIds } from './events.js';
import { GitRefSchema, JobIdSchema, ExternalRefSchema, SprintRunIdSchema, TimestampSchema } from './values.js';

/**
 * The offer of a queued job on `gantry.dispatch.<kind>` (a shared durable consumer, so each offer
 * reaches one runner). Only a hint: the runner answers with claim_job naming the job, and the
 * claim decides. A job is offered when it is enqueued and again after each requeue.
 */
export const JobOfferSchema = z.object({
  jobId: JobIdSchema,
  kind: JobKindSchema,
  productId: ExternalRefSchema,
  sprintRunId: SprintRunIdSchema.nullable(),
  /** The attempt the offer is for. */
  attempt: z.number().int().positive(),
  /**
   * The lease token of the claim whose end put the job back in the queue (0 for the enqueue). With the
   * job id and the attempt it names the offer (its Nats-Msg-Id): a requeue that spent no attempt is a new offer.
   */
  afterLeaseToken: z.number().int().min(0).default(0),
  /** The branch the work starts from, so the runner can resolve base_sha before claiming. */
  baseRef: GitRefSchema.nullable(),
  offeredAt: TimestampSchema,
});
export type JobOffer = z.infer<typeof JobOfferSchema>;

/** The Nats-Msg-Id of an offer: one offer per stay in the queue, so a re-published offer is dropped by the server. */
export function jobOfferMessageId(offer: Pick<JobOffer, 'jobId' | 'attempt' | 'afterLeaseToken'>): string {
  return `${offer.jobId}-offer-${offer.attempt}-${offer.afterLeaseToken}`;
}

export const jobOfferExamples = {
  valid: [
    {
      jobId: jobExampleIds.jobId,
      kind: 'TASK_IMPLEMENTATION',
      productId: 'product-42',
      sprintRunId: null,
      attempt: 1,
      afterLeaseToken: 0,
      baseRef: 'feat/story-1208',
      offeredAt: '2026-11-30T06:00:00.000Z',
    },
  ] satisfies z.input<typeof JobOfferSchema>[],
  invalid: [
    // an offer names its attempt: 0 is no attempt
    { jobId: jobExampleIds.jobId, kind: 'REVIEW', productId: 'p', sprintRunId: null, attempt: 0, baseRef: null, offeredAt: '2026-11-30T06:00:00.000Z' },
    // an unknown kind has no dispatch subject
    { jobId: jobExampleIds.jobId, kind: 'DEPLOY', productId: 'p', sprintRunId: null, attempt: 1, baseRef: null, offeredAt: '2026-11-30T06:00:00.000Z' },
  ] as unknown[],
};
