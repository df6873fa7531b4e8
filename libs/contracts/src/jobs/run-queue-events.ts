import { z } from 'zod';
import { defineEvent } from '../registry.js';
import { canonicalHash } from '../hashing.js';
import { JobKindSchema } from './agent-config.js';
import { ExternalRefSchema, JobIdSchema, TimestampSchema } from './values.js';
import { jobExampleIds } from './events.js';

/**
 * What makes two enqueue requests the same work for coalescing: the product, the kind, the agent
 * profile and the reason. Each key has a stream of its own, which records the jobs it opened.
 */
export const CoalescingKeySchema = z.object({
  productId: ExternalRefSchema,
  kind: JobKindSchema,
  agentProfileId: z.string().min(1).max(200),
  reason: z.string().min(1).max(200).nullable(),
});
export type CoalescingKey = z.output<typeof CoalescingKeySchema>;

/** The stream of one coalescing key (a hash: the key's parts need not be subject tokens). */
export function coalescingStreamId(key: CoalescingKey): string {
  return `coalescing-${canonicalHash(key).slice(0, 32)}`;
}

/**
 * A new job was created under a coalescing key: requests for the same key within the coalescing
 * window join it while it is queued. Appended at the key stream's version, so two concurrent
 * requests cannot both open a job for the same key.
 */
export const CoalescingWindowOpened = defineEvent({
  context: 'jobs',
  type: 'CoalescingWindowOpened',
  schemaVersion: 1,
  data: CoalescingKeySchema.extend({ jobId: JobIdSchema, openedAt: TimestampSchema }),
  examples: {
    valid: [
      {
        productId: 'product-42',
        kind: 'REVIEW',
        agentProfileId: 'profile-reviewer',
        reason: 'review_started',
        jobId: jobExampleIds.jobId,
        openedAt: '2026-11-30T06:00:00.000Z',
      },
    ],
    // a window belongs to the job it opened
    invalid: [{ productId: 'product-42', kind: 'REVIEW', agentProfileId: 'profile-reviewer', reason: null, openedAt: '2026-11-30T06:00:00.000Z' }],
  },
});

export type CoalescingWindowOpenedData = z.output<typeof CoalescingWindowOpened.data>;

export const runQueueEventContracts = [CoalescingWindowOpened] as const;
