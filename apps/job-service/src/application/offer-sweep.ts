import { Inject, Injectable, type BeforeApplicationShutdown, type OnApplicationBootstrap } from '@nestjs/common';
import { InjectPinoLogger, PinoLogger } from 'nestjs-pino';
import { JetStreamApiCodes, JetStreamApiError, type MsgRequest } from '@nats-io/jetstream';
import { dispatchStreamName, dispatchSubject, JobOfferSchema, jobOfferMessageId, type JobOffer } from '@gantry/contracts';
import { EventStore, type StoredEvent } from '@gantry/eventstore';
import { Bus, isNotFound } from '@gantry/messaging';
import { Sweep } from '@gantry/service-runtime';
import { jobOfferFor, offerDueAt, type JobEvent } from '../domain/index.js';
import { jobOf } from '../infrastructure/job-store.js';
import { JOB_SERVICE_CONFIG, type JobServiceConfig } from './job-service-settings.js';

/** Job streams read at once while looking for the offers a kind's queued jobs call for. */
const READ_CHUNK = 500;

/**
 * The offer a job's current stay in the queue calls for, and when it became due; null when the job
 * is not queued. It is the offer of the job's last queueing event (an enqueue, a requeue), the same
 * one, under the same `Nats-Msg-Id`, as JobOffers and the relay publish (docs/jobs.md, "Attempts").
 */
export function currentOffer(events: StoredEvent[]): { offer: JobOffer; dueAt: number } | null {
  const current = jobOf(events);
  if (!current || current.status !== 'QUEUED') return null;
  for (let i = events.length - 1; i >= 0; i--) {
    const stored = events[i]!;
    const event = { type: stored.type, data: stored.data } as JobEvent;
    const job = jobOf(events, stored.streamVersion);
    const offer = job ? jobOfferFor(event, job) : null;
    if (!offer) continue;
    if (offer.attempt !== current.attempt || offer.afterLeaseToken !== current.lastLeaseToken) return null;
    const notBefore = offerDueAt(event);
    return { offer, dueAt: Math.max(Date.parse(offer.offeredAt), notBefore === null ? 0 : Date.parse(notBefore)) };
  }
  return null;
}

/**
 * Offers again the queued jobs whose offer is no longer on the dispatch stream (docs/jobs.md, "Offers
 * lost by JetStream"): the stream purged, deleted or emptied with the server's store, or an offer
 * discarded by the stream's limits. Runners claim offered jobs, so such a job would otherwise stay
 * QUEUED for ever. Every replica runs it at start and every `GANTRY_OFFER_SWEEP_MS`; two replicas
 * publishing one offer at once publish it under one `Nats-Msg-Id`, and the server keeps one.
 */
@Injectable()
export class OfferSweep implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly sweeps: Sweep;

  constructor(
    @Inject(EventStore) private readonly store: EventStore,
    @Inject(Bus) private readonly bus: Bus,
    @InjectPinoLogger('offer-sweep') private readonly log: PinoLogger,
    @Inject(JOB_SERVICE_CONFIG) private readonly config: JobServiceConfig,
  ) {
    this.sweeps = new Sweep({ name: 'offer-sweep', everyMs: config.offerSweepMs, run: () => this.sweep(), log });
  }

  onApplicationBootstrap(): void {
    this.sweeps.start({ now: true });
  }

  async beforeApplicationShutdown(): Promise<void> {
    await this.sweeps.stop();
  }

  /** One pass; returns the number of offers published again. */
  async sweep(): Promise<number> {
    const stream = dispatchStreamName(this.bus.naming);
    const { rows } = await this.store.pool.query<{ kind: string; queued: string }>(`SELECT kind, count(*) AS queued FROM jobs WHERE status = 'QUEUED' GROUP BY kind`);
    if (rows.length === 0) return 0;
    const onStream = await this.offersPerSubject(stream);
    let published = 0;
    for (const row of rows) {
      const subject = dispatchSubject(this.bus.naming, row.kind);
      // As many offers of the kind as queued jobs: none can be missing but behind an offer left for
      // a job no longer queued, which the kind's runners take and drop; the next pass looks again.
      if ((onStream.get(subject) ?? 0) >= Number(row.queued)) continue;
      published += await this.offerMissing(stream, row.kind, subject);
    }
    return published;
  }

  /** The number of messages on each dispatch subject; the stream is created again when it is gone. */
  private async offersPerSubject(stream: string): Promise<Map<string, number>> {
    try {
      const info = await this.bus.jsm.streams.info(stream, { subjects_filter: `${this.bus.naming.subjectRoot}.dispatch.>` });
      return new Map(Object.entries(info.state.subjects ?? {}));
    } catch (error) {
      if (!isNotFound(error)) throw error;
      this.log.warn({ stream }, 'the dispatch stream is gone; creating it again');
      await this.bus.ensureDispatchStream();
      return new Map();
    }
  }

  private async offerMissing(stream: string, kind: string, subject: string): Promise<number> {
    // The stream first, then the jobs: an offer published meanwhile is of a job queued too lately
    // to be looked at (below), and one a runner took meanwhile was seen here.
    const present = await this.offerIdsOn(stream, subject);
    const settledBefore = this.store.clock().getTime() - this.config.offerSweepMs;
    const { rows } = await this.store.pool.query<{ job_id: string }>(`SELECT job_id FROM jobs WHERE status = 'QUEUED' AND kind = $1 ORDER BY enqueue_position`, [kind]);
    let published = 0;
    for (let i = 0; i < rows.length; i += READ_CHUNK) {
      const streams = await this.store.readStreams(rows.slice(i, i + READ_CHUNK).map((r) => r.job_id));
      const offers: JobOffer[] = [];
      for (const events of streams.values()) {
        const found = currentOffer(events);
        // Not yet due, or due so lately that its own publish may still be on its way (the relay, JobOffers).
        if (!found || found.dueAt > settledBefore || present.has(jobOfferMessageId(found.offer))) continue;
        offers.push(found.offer);
      }
      const acks = await Promise.all(offers.map((offer) => this.bus.js.publish(subject, JSON.stringify(JobOfferSchema.parse(offer)), { msgID: jobOfferMessageId(offer) })));
      offers.forEach((offer, n) => {
        const fields = { jobId: offer.jobId, attempt: offer.attempt, offer: jobOfferMessageId(offer) };
        // A stream purged keeps its duplicate window: an offer published within it before the purge
        // is dropped as a copy until the window has passed, and a later pass publishes it.
        if (acks[n]!.duplicate) this.log.info(fields, 'a queued job has no offer on the dispatch stream; it is offered again once the duplicate window has passed');
        else {
          this.log.warn(fields, 'a queued job had no offer on the dispatch stream; offered again');
          published++;
        }
      });
    }
    return published;
  }

  /** The `Nats-Msg-Id`s of the offers on one dispatch subject, read one message after another. */
  private async offerIdsOn(stream: string, subject: string): Promise<Set<string>> {
    const ids = new Set<string>();
    let seq = 1;
    for (;;) {
      // The server (2.9+) takes next_by_subj on the stream API's message get; nats.js types it only for direct get.
      const query = { seq, next_by_subj: subject } as unknown as MsgRequest;
      const msg = await this.bus.jsm.streams.getMessage(stream, query).catch((error: unknown) => {
        if (error instanceof JetStreamApiError && error.code === JetStreamApiCodes.NoMessageFound) return null;
        throw error;
      });
      if (!msg) return ids;
      const parsed = JobOfferSchema.safeParse(safeJson(msg.data));
      if (parsed.success) ids.add(jobOfferMessageId(parsed.data));
      seq = msg.seq + 1;
    }
  }
}

function safeJson(data: Uint8Array): unknown {
  try {
    return JSON.parse(new TextDecoder().decode(data));
  } catch {
    return null;
  }
}
