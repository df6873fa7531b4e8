import { defaultNaming, dispatchSubject, JobOfferSchema } from '@gantry/contracts';
import type { StoredEvent } from '@gantry/eventstore';
import { claimed, enqueued, JOB } from '../domain/testing/job-fixtures.js';
import type { JobEvent } from '../domain/index.js';
import { enqueueOffers } from './offers.js';

const stored = (event: JobEvent, streamVersion: number): StoredEvent => ({
  position: streamVersion,
  eventId: `00000000-0000-4000-8000-00000000000${streamVersion}`,
  streamId: JOB,
  streamVersion,
  type: event.type,
  schemaVersion: 1,
  data: event.data,
  metadata: { correlationId: 'c', causationId: null, idempotencyKey: null, actor: null },
  occurredAt: '2026-01-01T00:00:00.000Z',
});

describe('the offer an enqueue calls for, published with its event', () => {
  it('is the job\'s first offer, on its kind\'s dispatch subject, with the message id of that stay in the queue', () => {
    const [companion, ...more] = enqueueOffers(stored(enqueued(), 1), defaultNaming);
    expect(more).toEqual([]);
    expect(companion!.subject).toBe(dispatchSubject(defaultNaming, 'TASK_IMPLEMENTATION'));
    expect(companion!.msgID).toBe(`${JOB}-offer-1-0`);
    expect(JobOfferSchema.parse(JSON.parse(companion!.payload))).toMatchObject({ jobId: JOB, attempt: 1, afterLeaseToken: 0 });
  });

  it('goes with no other event: a requeue is offered by the offers consumer, once its pause is over', () => {
    expect(enqueueOffers(stored(claimed(1, 1, 10), 2), defaultNaming)).toEqual([]);
  });
});
