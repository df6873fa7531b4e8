import { Controller, Inject } from '@nestjs/common';
import { dispatchSubject, JobOfferSchema, jobOfferMessageId, type EventEnvelope } from '@gantry/contracts';
import { EventStore, type StoredEvent } from '@gantry/eventstore';
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

  @DurableConsumer({ name: OFFERS_CONSUMER, source: 'jobs', durable: OWN_EVENTS_DURABLE, types: [...OFFERING_EVENTS] })
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
