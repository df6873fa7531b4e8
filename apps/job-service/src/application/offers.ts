import { Controller, Inject } from '@nestjs/common';
import { dispatchSubject, JobOfferSchema, jobOfferMessageId, type EventEnvelope } from '@gantry/contracts';
import { EventStore } from '@gantry/eventstore';
import { Bus } from '@gantry/messaging';
import { RetryLater } from '@gantry/messaging';
import { DurableConsumer, type ConsumerContext } from '@gantry/service-runtime';
import { jobOfferFor, offerDueAt, type JobEvent } from '../domain/index.js';
import { jobOf } from '../infrastructure/job-store.js';
import { OWN_EVENTS_DURABLE } from './durables.js';

export const OFFERS_CONSUMER = 'job-service-offers';

/** The events after which a job may be queued (see jobOfferFor); the others are acknowledged without a transaction. */
const OFFERING_EVENTS = new Set<string>(['JobEnqueued', 'JobLeaseExpired', 'JobClaimRolledBack'] satisfies JobEvent['type'][]);

/**
 * Offers queued jobs on `<root>.dispatch.<kind>`. Driven by a durable consumer of the service's own
 * jobs stream, so an offer follows every committed enqueue / requeue even across a crash between
 * commit and publish; `Nats-Msg-Id` is one per stay in the queue, so a redelivered event's re-publish
 * is dropped by the server. A job no longer queued at that point is not offered (the offer is a hint).
 */
@Controller()
export class JobOffers {
  constructor(
    @Inject(EventStore) private readonly store: EventStore,
    @Inject(Bus) private readonly bus: Bus,
  ) {}

  @DurableConsumer({ name: OFFERS_CONSUMER, source: 'jobs', durable: OWN_EVENTS_DURABLE, types: [...OFFERING_EVENTS] })
  async offer(envelope: EventEnvelope, context: ConsumerContext): Promise<void> {
    const { sql } = context;
    if (!OFFERING_EVENTS.has(envelope.type)) return;
    // One read of the stream: the job as the event left it, and as it is now.
    const events = await this.store.readStream(envelope.streamId, sql);
    const job = jobOf(events, envelope.streamVersion);
    if (!job) return;
    const event = { type: envelope.type, data: envelope.data } as JobEvent;
    const offer = jobOfferFor(event, job);
    if (!offer) return;
    const current = jobOf(events);
    if (!current || current.status !== 'QUEUED' || current.attempt !== offer.attempt || current.lastLeaseToken !== offer.afterLeaseToken) return;
    // A requeue that spent no attempt is offered after its pause (docs/jobs.md, "Attempts"): the
    // event comes back when it is due, and runners are not handed a job that would fail the same way at once.
    const due = offerDueAt(event);
    const wait = due === null ? 0 : Date.parse(due) - this.store.clock().getTime();
    if (wait > 0) throw new RetryLater(`the offer of job ${offer.jobId} is due at ${due}`, wait);
    // Acknowledged once JetStream has it, with the batch's other offers: they go out together.
    context.beforeCommit(
      this.bus.js.publish(dispatchSubject(this.bus.naming, offer.kind), JSON.stringify(JobOfferSchema.parse(offer)), {
        msgID: jobOfferMessageId(offer),
      }),
    );
  }
}
