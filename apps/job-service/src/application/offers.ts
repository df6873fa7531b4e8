import { Controller, Inject } from '@nestjs/common';
import { dispatchSubject, JobOfferSchema, jobOfferMessageId, type EventEnvelope } from '@gantry/contracts';
import { EventStore, type StoredEvent } from '@gantry/eventstore';
import { Bus, RetryLater, type Companions, type PayloadFields } from '@gantry/messaging';
import { DurableConsumer, type ConsumerContext } from '@gantry/service-runtime';
import { jobOfferFor, offerDueAt, type JobEvent } from '../domain/index.js';
import { jobOf } from '../infrastructure/job-store.js';
import { OWN_EVENTS_DURABLE } from './durables.js';

export const OFFERS_CONSUMER = 'job-service-offers';

/** The events after which a job may be queued (see jobOfferFor); the others are acknowledged without a transaction. */
const OFFERING_EVENTS = new Set<string>(['JobEnqueued', 'JobLeaseExpired', 'JobClaimRolledBack'] satisfies JobEvent['type'][]);

/**
 * An enqueue the relay published with its offer (enqueueOffers; the envelope counts it): its offer
 * has gone, and it is acknowledged without a transaction, or even a schema check. An enqueue
 * published without it, by a relay of a version before companions, is offered here as it used to be.
 */
function offeredWithItsEvent(payload: PayloadFields): boolean {
  return payload.type === 'JobEnqueued' && payload.companions !== undefined;
}

/**
 * The offer an enqueue calls for, published by the relay with the `JobEnqueued` event (a companion,
 * see OutboxRelay): the event is the job's first, so the job as it left it is the event alone.
 * Published within moments of the commit, and again with the event after a crash between commit
 * and publish (the offer's `Nats-Msg-Id` drops the copy). Like every offer it is a hint: a job
 * claimed or cancelled in between makes the runner's claim answer so.
 */
export const enqueueOffers: Companions = (event, naming) => {
  if (event.type !== 'JobEnqueued' || event.streamVersion !== 1) return [];
  const job = jobOf([event]);
  const offer = job ? jobOfferFor({ type: event.type, data: event.data } as JobEvent, job) : null;
  if (!offer) return [];
  return [{ subject: dispatchSubject(naming, offer.kind), payload: JSON.stringify(JobOfferSchema.parse(offer)), msgID: jobOfferMessageId(offer) }];
};

/**
 * Offers queued jobs on `<root>.dispatch.<kind>`. An enqueue's offer goes out with its event
 * (enqueueOffers); a job put back in the queue (a lease that expired, a claim rolled back) is offered
 * by this durable consumer of the service's own jobs stream, so an offer follows every committed
 * requeue even across a crash between commit and publish, after the pause a requeue that spent no
 * attempt waits. `Nats-Msg-Id` is one per stay in the queue, so a redelivered event's re-publish is
 * dropped by the server. A job no longer queued at that point is not offered (the offer is a hint).
 */
@Controller()
export class JobOffers {
  /** The job streams of a batch's offering events, read once for the whole batch, at its first. */
  private readonly batchStreams = new WeakMap<readonly EventEnvelope[], Promise<Map<string, StoredEvent[]>>>();

  constructor(
    @Inject(EventStore) private readonly store: EventStore,
    @Inject(Bus) private readonly bus: Bus,
  ) {}

  private streamsOf({ batch, sql }: ConsumerContext): Promise<Map<string, StoredEvent[]>> {
    let streams = this.batchStreams.get(batch);
    if (!streams) {
      streams = this.store.readStreams(batch.filter((e) => OFFERING_EVENTS.has(e.type)).map((e) => e.streamId), sql);
      this.batchStreams.set(batch, streams);
    }
    return streams;
  }

  @DurableConsumer({ name: OFFERS_CONSUMER, source: 'jobs', durable: OWN_EVENTS_DURABLE, types: [...OFFERING_EVENTS], passOver: offeredWithItsEvent })
  async offer(envelope: EventEnvelope, context: ConsumerContext): Promise<void> {
    if (!OFFERING_EVENTS.has(envelope.type)) return;
    // One read of the stream: the job as the event left it, and as it is now.
    const events = (await this.streamsOf(context)).get(envelope.streamId) ?? [];
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
    // Published with the batch's other offers, once its handlers have all run (one write for all of
    // them); acknowledged once JetStream has it.
    const payload = JSON.stringify(JobOfferSchema.parse(offer));
    context.beforeCommit(() => this.bus.js.publish(dispatchSubject(this.bus.naming, offer.kind), payload, { msgID: jobOfferMessageId(offer) }));
  }
}
