import pg from 'pg';
import { commit, storableScrubber, storableText, TransactionAbortedError } from '@gantry/eventstore';
import {
  EventEnvelopeSchema,
  eventSubjectPrefix,
  eventTypeOfSubject,
  GantryError,
  issuesOf,
  parseEventData,
  scrubSecrets,
  scrubStrings,
  type Context,
  type EventEnvelope,
  type SecretScrubber,
} from '@gantry/contracts';
import { DurableReader, settle, startPastAckFloorOf, type ConsumerLag, type ConsumerLogger, type Delivered, type Settlement } from './durable-reader.js';
import type { Bus } from './bus.js';
import type { SharedDurable } from './shared-durable.js';
import { REPLAYED_FOR_HEADER } from './dead-letters.js';
import { outOfReachOf, type OutOfReach } from './out-of-reach.js';

/** Thrown by a handler that cannot act yet (an earlier event has not arrived): retried, never dead-lettered early. */
export class RetryLater extends Error {
  constructor(reason: string, readonly delayMs = 1000) {
    super(reason);
    this.name = 'RetryLater';
  }
}

export interface EventConsumerOptions {
  /** Durable consumer name; also the inbox scope. Unique per consuming service and purpose. */
  name: string;
  bus: Bus;
  /** The consuming service's pool: inbox, dead letters and the handler's writes share its transaction. */
  pool: pg.Pool;
  /** Whose events: the stream of this context. */
  source: Context;
  /**
   * One event type; without it, the branch of the context's subjects that `types` are on, or the
   * whole stream (DurableReaderOptions.types). (NATS 2.9 takes one filter subject per consumer.)
   */
  type?: string;
  /**
   * A consumer a newer version added to take over part of what an older consumer did (the durable
   * named here): created, it starts past what that durable had acknowledged — the older consumer did
   * that work — and at the stream's first message where that durable does not exist (a new
   * installation). Not with `via`.
   */
  startsAfter?: string;
  /**
   * The durable this consumer shares with others of the service that read the same stream, instead
   * of a durable of its own (see SharedDurable). Its `name` stays its inbox scope.
   */
  via?: SharedDurable;
  /**
   * The event types the handler acts on, when it reads every type of its source: the others are
   * acknowledged as they come, told by the type their subject names (else by their payload's
   * `type`): no parsing, no validation, no transaction, no inbox row (a handler that ignores them has
   * no effect to guard, nor a use for their payload). Omit for all.
   */
  types?: readonly string[];
  /**
   * The events of a batch the handler would do nothing for, asked once for the whole batch before
   * its transaction (their ids): they are acknowledged like ignored types, with no transaction and
   * no inbox row. It is asked outside the handler's transaction, so it may only go by facts that
   * never change once true (e.g. a job's sprint run, fixed when the job is enqueued). When it fails,
   * every event is handled.
   */
  unaffected?: (events: readonly EventEnvelope[], pool: pg.Pool) => Promise<ReadonlySet<string>>;
  /**
   * Events the handler has nothing left to do for, told from the payload's own fields before it is
   * validated, and acknowledged like ignored types: e.g. an event whose companion message, which the
   * handler would otherwise send, the relay published with it (the envelope's `companions`). Like
   * `types`, it may only pass over an event the handler would leave without effect.
   */
  passOver?: (payload: PayloadFields) => boolean;
  /**
   * Handles one event in the open transaction `sql`. `batch` is every event handled in that
   * transaction, this one among them, in the order they are handled: a handler that reads for each
   * event may read for all of them at its first (one round trip instead of one per event).
   */
  handle(event: EventEnvelope, sql: pg.PoolClient, beforeCommit: BeforeCommit, batch: readonly EventEnvelope[]): Promise<void>;
  logger: ConsumerLogger;
  /** After this many deliveries a failing message is dead-lettered and terminated. */
  maxDeliver?: number;
  ackWaitMs?: number;
  backoffMs?: (delivery: number) => number;
  /** Validate `data` against the registered event contract (default true). */
  validate?: boolean;
  /** Events already delivered that are handled in one transaction at most (default 32). */
  batchSize?: number;
  /**
   * Masks secrets in a dead letter's error (its message, issues) before it is stored: a handler's
   * error may quote a URL with its password or a token (docs/configuration.md, "Secrets in events").
   * Default: by their shape only.
   */
  scrub?: SecretScrubber;
  /**
   * Told of each message this consumer settles: `ack` (handled, a duplicate, or nothing to do),
   * `nak` (handed back to come again later) or `term` (given up: dead-lettered, or not an event).
   * For the service's metrics; it must be quick and must not throw.
   */
  onSettled?: (settlement: Exclude<Settlement, 'working'>) => void;
  /**
   * Told of each delivery handed back for an outage, with what was out of reach: `consumer` (its own
   * transaction's database), or what the handler needed (`database`, `service`; see outOfReachOf).
   * For the service's metrics; it must be quick and must not throw.
   */
  onOutage?: (outOfReach: OutageOf) => void;
  /** Runs the handling of one event (its handler; alone, also its settlement and the lines logged about it) inside a context, e.g. the logs' correlation id. */
  withinEvent?: (event: EventEnvelope, work: () => Promise<void>) => Promise<void>;
}

const decoder = new TextDecoder();

/**
 * A durable pull consumer whose handler runs in a PostgreSQL transaction together with the inbox
 * insert, so a redelivered message changes nothing; the message is acked only after that commit.
 * Invalid payloads are dead-lettered with their validation issues and terminated; handler failures
 * are nak'ed with a growing delay; long handlers keep the message alive with `working()`; a
 * consumer that disappears is created again. When the database cannot be reached — the consumer's
 * own, or one the handler uses — or the handler's command finds another service out of reach, the
 * message is handed back (nak with the growing delay, up to its ceiling) without counting against
 * the handler: it is never held, and never dead-lettered for an outage, however long it lasts.
 */
export class EventConsumer {
  private running = false;
  private processed = 0;
  /** Its own durable's reader; null when it shares one (`via`). */
  private readonly reader: DurableReader | null;
  private readonly handledTypes: ReadonlySet<string> | null;
  /** What the subjects of the source's events start with; their type follows. */
  private readonly subjectPrefix: string;
  /**
   * Deliveries of a message (by stream sequence) this process handed back without its handler
   * failing — RetryLater, or an outage (outOfReachOf): JetStream counts them among its deliveries,
   * but they do not count towards `maxDeliver`. Kept until the message is settled for good, for the
   * most recent messages at most (a message handed back and then delivered to another replica is
   * not seen again here); a process that did not hand them back counts every delivery.
   */
  private readonly excused = new Map<number, number>();

  constructor(private readonly options: EventConsumerOptions) {
    this.handledTypes = options.types ? new Set(options.types) : null;
    this.subjectPrefix = eventSubjectPrefix(options.bus.naming, options.source);
    if (options.via) {
      options.via.join(this);
      this.reader = null;
    } else {
      const { startsAfter } = options;
      this.reader = new DurableReader(
        { ...options, ...(startsAfter === undefined ? {} : { startAt: () => startPastAckFloorOf(options.bus, options.source, startsAfter) }) },
        (messages) => this.drain(messages),
      );
    }
  }

  get isReady(): boolean {
    return this.reader ? this.reader.isReady : this.options.via!.isReady;
  }

  get processedCount(): number {
    return this.processed;
  }

  /** The consumer's name: its inbox scope, and the name of its durable unless it shares one. */
  get name(): string {
    return this.options.name;
  }

  /** Whose events it reads. */
  get source(): Context {
    return this.options.source;
  }

  /** The event types it acts on (null: all of its source's). */
  get types(): ReadonlySet<string> | null {
    return this.handledTypes;
  }

  get ackWaitMs(): number {
    return this.options.ackWaitMs ?? 30_000;
  }

  get streamName(): string {
    return (this.reader ?? this.options.via!).streamName;
  }

  /** Starts reading: its own durable, or the shared one with all its members. */
  start(): void {
    if (this.reader) {
      this.running = true;
      this.reader.start();
    } else {
      this.options.via!.start();
    }
  }

  async stop(): Promise<void> {
    if (this.reader) {
      this.running = false;
      await this.reader.stop();
    } else {
      await this.options.via!.stop();
    }
  }

  /** Creates the durable it reads if it does not exist (idempotent); see DurableReader.ensureConsumer. */
  ensureConsumer(): Promise<void> {
    return (this.reader ?? this.options.via!).ensureConsumer();
  }

  /** How far behind this process is on the durable it reads (see DurableReader.lag). */
  lag(now: Date = new Date()): Promise<ConsumerLag> {
    return (this.reader ?? this.options.via!).lag(now);
  }

  /**
   * Handles what a shared durable hands this member, until `messages` ends or `halt` is called
   * (SharedDurable's side of `start` / `stop`).
   */
  drainShared(messages: AsyncIterable<Delivered>): Promise<void> {
    this.running = true;
    return this.drain(messages);
  }

  halt(): void {
    this.running = false;
  }

  private settle(msg: Delivered, settlement: Settlement, argument?: number | string): void {
    if (settlement === 'ack' || settlement === 'term') this.excused.delete(msg.seq);
    settle(msg, settlement, argument, this.options.logger, this.options.name);
    if (settlement !== 'working') this.options.onSettled?.(settlement);
  }

  private json(msg: Delivered): unknown {
    try {
      return JSON.parse(decoder.decode(msg.data));
    } catch {
      throw new InvalidPayload('the payload is not valid JSON', [{ path: [], message: 'malformed JSON' }]);
    }
  }

  /**
   * Whether the handler leaves this message alone: an event of a type it does not act on, told by
   * the type its subject names, before its payload is even parsed. Most of what a consumer of some
   * types receives is of the others, and they would otherwise cost a parse each.
   */
  private ignoresSubject(msg: Delivered): boolean {
    // An event handed back from another consumer's dead letters is that consumer's alone: this one
    // handled it when it came (its inbox row may be pruned since), docs/operations.md, "Dead letters".
    const replayedFor = msg.headers?.get(REPLAYED_FOR_HEADER);
    if (replayedFor && replayedFor !== this.options.name) return true;
    if (!this.handledTypes) return false;
    const type = eventTypeOfSubject(this.subjectPrefix, msg.subject);
    return type !== null && !this.handledTypes.has(type);
  }

  /**
   * Whether the handler leaves this payload alone: an event of a type it does not act on, told by
   * its `type` before anything is validated (an ignored event is not worth a schema check).
   */
  private ignores(raw: unknown): boolean {
    if (typeof raw !== 'object' || raw === null) return false;
    const type = (raw as PayloadFields).type;
    if (this.handledTypes && typeof type === 'string' && !this.handledTypes.has(type)) return true;
    return this.options.passOver?.(raw as PayloadFields) ?? false;
  }

  private decode(raw: unknown): EventEnvelope {
    const envelope = EventEnvelopeSchema.safeParse(raw);
    if (!envelope.success) throw new InvalidPayload('the envelope does not match its schema', issuesOf(envelope.error));
    if (this.options.validate === false) return envelope.data;
    try {
      return { ...envelope.data, data: parseEventData(this.options.source, envelope.data) };
    } catch (error) {
      if (error instanceof GantryError) throw new InvalidPayload(error.message, error.issues ?? []);
      throw error;
    }
  }

  private backoff(delivery: number): number {
    return (this.options.backoffMs ?? ((n: number) => Math.min(30_000, 200 * 2 ** (n - 1))))(delivery);
  }

  /**
   * Handles what has arrived, a batch at a time: the iterator is read into a queue as messages
   * come, and whatever waits there when the previous batch is done makes the next one (under load
   * many events share a transaction; alone, an event is handled as soon as it arrives).
   */
  private async drain(messages: AsyncIterable<Delivered>): Promise<void> {
    const queue: Delivered[] = [];
    const arrival = { wake: () => {} };
    let ended = false;
    let failure: unknown = null;
    const reading = (async () => {
      try {
        for await (const msg of messages) {
          queue.push(msg);
          arrival.wake();
        }
      } catch (error) {
        failure = error; // thrown below, once the batch in hand is done
      } finally {
        ended = true;
        arrival.wake();
      }
    })();
    while (this.running) {
      if (queue.length === 0) {
        if (ended) break;
        await new Promise<void>((resolve) => (arrival.wake = resolve));
        arrival.wake = () => {};
        continue;
      }
      await this.processBatch(queue.splice(0, this.options.batchSize ?? 32));
    }
    await reading;
    // Stopped with events received and not begun (those still on their way when the pull closed
    // among them): handed back now, so that another replica (or this service started again) has them
    // at once rather than after their ack wait. The reader sends them once JetStream has let go of
    // the closed pull (DurableReader.handBack).
    for (const msg of queue.splice(0)) this.settle(msg, 'nak');
    if (failure) throw failure;
  }

  private async processBatch(msgs: Delivered[]): Promise<void> {
    let work: Array<{ msg: Delivered; event: EventEnvelope }> = [];
    for (const msg of msgs) {
      if (this.ignoresSubject(msg)) {
        this.pass(msg);
        continue;
      }
      let event: EventEnvelope;
      try {
        const raw = this.json(msg);
        if (this.ignores(raw)) {
          this.pass(msg);
          continue;
        }
        event = this.decode(raw);
      } catch (error) {
        if (!(error instanceof InvalidPayload)) throw error;
        if (await this.deadLetter(msg, null, { kind: 'invalid_payload', message: error.message, issues: error.issues })) {
          this.settle(msg, 'term', error.message);
        }
        continue;
      }
      work.push({ msg, event });
    }
    if (work.some(({ msg }) => msg.info.deliveryCount > 1)) work = await this.withoutDeadLettered(work);
    if (this.options.unaffected && work.length > 0) work = await this.withoutUnaffected(work);
    if (work.length > 1 && (await this.processTogether(work))) return;
    for (const { msg, event } of work) await this.within(event, () => this.process(msg, event));
  }

  /**
   * Gives up at once, without running the handler, the messages of `work` that come again after
   * this consumer dead-lettered them (their term lost: the process killed after the dead letter's
   * write, NATS away, or the message delivered again as the write waited; or, on a shared durable,
   * brought back by another member's retry), and returns the others. Run again, the handler could do
   * its effect a second time, or succeed with the event recorded dead. One look-up for the batch's
   * redeliveries, by the dead letters' unique index; a first delivery has none to find. When the
   * look-up fails, the redelivered ones are handed back as in an outage: none of them runs unchecked.
   */
  private async withoutDeadLettered(work: Array<{ msg: Delivered; event: EventEnvelope }>): Promise<Array<{ msg: Delivered; event: EventEnvelope }>> {
    const again = work.filter(({ msg }) => msg.info.deliveryCount > 1);
    let dead: Set<number>;
    try {
      const { rows } = await this.options.pool.query<{ seq: string }>(
        `SELECT m.seq FROM unnest($2::bigint[], $3::text[]) AS m(seq, payload)
          WHERE EXISTS (SELECT 1 FROM dead_letters d WHERE d.consumer = $1 AND d.stream_sequence = m.seq AND md5(d.payload) = md5(m.payload))`,
        [this.options.name, again.map(({ msg }) => msg.seq), again.map(({ msg }) => storedPayload(msg))],
      );
      dead = new Set(rows.map((r) => Number(r.seq)));
    } catch (error) {
      for (const { msg, event } of again) await this.handBackForOutage(msg, event, error);
      return work.filter(({ msg }) => msg.info.deliveryCount <= 1);
    }
    if (dead.size === 0) return work;
    return work.filter(({ msg }) => {
      if (!dead.has(msg.seq)) return true;
      this.sayDeadLetteredBefore(msg);
      this.settle(msg, 'term', 'dead-lettered before');
      return false;
    });
  }

  /** Acknowledges the events `unaffected` names and returns the others (all of them when it fails). */
  private async withoutUnaffected(work: Array<{ msg: Delivered; event: EventEnvelope }>): Promise<Array<{ msg: Delivered; event: EventEnvelope }>> {
    let unaffected: ReadonlySet<string>;
    try {
      unaffected = await this.options.unaffected!(work.map((w) => w.event), this.options.pool);
    } catch (error) {
      this.options.logger.warn('could not tell which events need no handling; handling them all', { consumer: this.options.name, error: String(error) });
      return work;
    }
    if (unaffected.size === 0) return work;
    return work.filter(({ msg, event }) => {
      if (!unaffected.has(event.eventId)) return true;
      this.pass(msg);
      return false;
    });
  }

  /** Acknowledges a message the handler has nothing to do for: no transaction, no inbox row. */
  private pass(msg: Delivered): void {
    this.settle(msg, 'ack');
    this.processed++;
  }

  private within(event: EventEnvelope, work: () => Promise<void>): Promise<void> {
    return this.options.withinEvent ? this.options.withinEvent(event, work) : work();
  }

  /** Keeps the messages from being redelivered while they are handled (see ackWaitMs). */
  private keepAlive(msgs: Delivered[]): NodeJS.Timeout {
    const ackWait = this.options.ackWaitMs ?? 30_000;
    return setInterval(() => msgs.forEach((msg) => this.settle(msg, 'working')), Math.max(100, Math.floor(ackWait / 3)));
  }

  /**
   * Several events in one transaction: one inbox insert for all of them, each new one's handler in
   * turn, one commit, then the acks. Any failure rolls the whole batch back and returns false: the
   * caller then takes the events one at a time, where a failure is judged (and counted) per event.
   * The handlers that had run are run again then, as after a crash between their work and the commit.
   */
  private async processTogether(work: Array<{ msg: Delivered; event: EventEnvelope }>): Promise<boolean> {
    const keepAlive = this.keepAlive(work.map((w) => w.msg));
    let client: pg.PoolClient | null = null;
    let connectionLost = false;
    const onConnectionError = () => {
      connectionLost = true;
    };
    try {
      client = await this.options.pool.connect();
      client.on('error', onConnectionError);
      const fresh = await beginWithInbox(client, this.options.name, work.map((w) => w.event.eventId));
      const started = startedWork();
      // A copy delivered twice in one batch is handled once: its id leaves the set with the first.
      const batch = work.map((w) => w.event).filter((event) => fresh.delete(event.eventId));
      for (const event of batch) await this.within(event, () => this.options.handle(event, client!, started.add, batch));
      await started.all();
      await commit(client);
    } catch {
      await client?.query('ROLLBACK').catch(() => undefined);
      return false;
    } finally {
      clearInterval(keepAlive);
      client?.off('error', onConnectionError);
      client?.release(connectionLost ? true : undefined);
    }
    for (const { msg } of work) this.settle(msg, 'ack');
    this.processed += work.length;
    return true;
  }

  private async process(msg: Delivered, event: EventEnvelope): Promise<void> {
    let keepAlive: NodeJS.Timeout | undefined;
    let client: pg.PoolClient | null = null;
    let handling = false;
    let connectionLost = false;
    const onConnectionError = () => {
      connectionLost = true;
    };
    try {
      keepAlive = this.keepAlive([msg]);
      client = await this.options.pool.connect();
      client.on('error', onConnectionError);
      const fresh = await beginWithInbox(client, this.options.name, [event.eventId]);
      handling = true;
      const started = startedWork();
      if (fresh.size === 1) await this.options.handle(event, client, started.add, [event]);
      await started.all();
      handling = false;
      await commit(client);
    } catch (error) {
      await client?.query('ROLLBACK').catch(() => undefined);
      clearInterval(keepAlive);
      // The database, not the handler, failed: hand the message back without counting it against the event.
      // A transaction the handler's caught SQL error aborted is the handler's failure, not an outage.
      // The handler met an outage of something else it needs (outOfReachOf): handed back alike.
      const outage: OutageOf | null = (!handling && !(error instanceof TransactionAbortedError)) || connectionLost ? 'consumer' : outOfReachOf(error);
      if (outage) await this.handBackForOutage(msg, event, error, outage);
      else await this.onFailure(msg, event, error);
      return;
    } finally {
      clearInterval(keepAlive);
      client?.off('error', onConnectionError);
      client?.release(connectionLost ? true : undefined);
    }
    this.settle(msg, 'ack');
    this.processed++;
  }

  private async handBackForOutage(msg: Delivered, event: EventEnvelope, error: unknown, outage: OutageOf = 'consumer'): Promise<void> {
    const delivery = msg.info.deliveryCount;
    this.options.logger.warn(outage === 'consumer' ? 'database unavailable; event handed back' : 'what the handler needs is out of reach; event handed back', {
      consumer: this.options.name,
      eventId: event.eventId,
      type: event.type,
      delivery,
      outOfReach: outage,
      error: String(error),
    });
    this.options.onOutage?.(outage);
    this.excuse(msg);
    // Each try waits longer, up to the backoff's ceiling, while the outage lasts.
    this.settle(msg, 'nak', this.backoff(delivery));
  }

  /** This delivery of the message does not count towards `maxDeliver` (see `excused`). */
  private excuse(msg: Delivered): void {
    const before = this.excused.get(msg.seq) ?? 0;
    this.excused.delete(msg.seq); // to the end of the order: the oldest go first below
    this.excused.set(msg.seq, before + 1);
    if (this.excused.size > EXCUSED_REMEMBERED) this.excused.delete(this.excused.keys().next().value!);
  }

  private async onFailure(msg: Delivered, event: EventEnvelope, error: unknown): Promise<void> {
    const delivery = msg.info.deliveryCount;
    const maxDeliver = this.options.maxDeliver ?? 10;
    if (error instanceof RetryLater) {
      this.excuse(msg);
      this.settle(msg, 'nak', error.delayMs);
      return;
    }
    // The handler's failures: its deliveries, less those handed back without a failure of its own.
    const failures = delivery - (this.excused.get(msg.seq) ?? 0);
    const fields = { consumer: this.options.name, eventId: event.eventId, type: event.type, delivery, failures, error: String(error) };
    if (failures >= maxDeliver) {
      this.options.logger.error('event handler failed for the last time; dead-lettered', fields);
      if (await this.deadLetter(msg, event.eventId, { kind: 'handler_failed', message: String(error), deliveries: delivery, failures })) {
        this.settle(msg, 'term', 'handler failed');
      }
      return;
    }
    this.options.logger.warn('event handler failed; will retry', fields);
    this.settle(msg, 'nak', this.backoff(failures));
  }

  /** Records the message as a dead letter; when even that fails it is handed back to try again. */
  private async deadLetter(msg: Delivered, eventId: string | null, failure: Record<string, unknown>): Promise<boolean> {
    // Its secrets masked, as text PostgreSQL can keep (see storedPayload).
    const error = scrubStrings(failure, storableScrubber(this.options.scrub ?? scrubSecrets));
    let written: boolean;
    try {
      // A message dead-lettered already (its term lost: a crash, NATS away, or the ack wait over
      // before it was sent) keeps its first dead letter; it is terminated again, as it should have been.
      const result = await this.options.pool.query(
        `INSERT INTO dead_letters (consumer, subject, stream_sequence, event_id, payload, error) VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (consumer, stream_sequence, md5(payload)) DO NOTHING`,
        [this.options.name, msg.subject, msg.seq, eventId, storedPayload(msg), JSON.stringify(error)],
      );
      written = result.rowCount === 1;
    } catch (writeError) {
      this.options.logger.warn('could not record a dead letter; message handed back', {
        consumer: this.options.name,
        sequence: msg.seq,
        error: String(writeError),
      });
      this.settle(msg, 'nak', this.backoff(msg.info.deliveryCount));
      return false;
    }
    if (written) this.options.logger.warn('message dead-lettered', { consumer: this.options.name, subject: msg.subject, sequence: msg.seq, error });
    else this.sayDeadLetteredBefore(msg);
    return true;
  }

  private sayDeadLetteredBefore(msg: Delivered): void {
    this.options.logger.warn('message dead-lettered before; terminated again', { consumer: this.options.name, subject: msg.subject, sequence: msg.seq });
  }
}

/**
 * A message's payload as its dead letter keeps it: as text PostgreSQL can keep (a NUL character
 * would fail the insert, and the message would be handed back for ever). The dead letter is found
 * again by it (`dead_letters_once`: consumer, stream sequence, md5 of the payload).
 */
function storedPayload(msg: Delivered): string {
  return storableText(decoder.decode(msg.data));
}

/** What an outage that handed an event back kept from its consumer: its own transaction's database, or what its handler needed. */
export type OutageOf = 'consumer' | OutOfReach;

/** Messages whose excused deliveries a consumer remembers, at most (about its durable's max_ack_pending). */
const EXCUSED_REMEMBERED = 1000;

/** An event payload's fields as they came, not validated yet (see EventConsumerOptions.passOver). */
export type PayloadFields = { readonly [field in keyof EventEnvelope]?: unknown };

/**
 * Work a handler hands to the consumer instead of doing it itself (a publish, say): `start` is called
 * once every handler of the batch has run, all of them in one go, and the transaction commits, and
 * the events are acknowledged, only once all of that work has succeeded; work that fails fails its
 * handler. The batch's pieces of work so overlap their round trips instead of waiting for them one
 * after another, and the messages they publish leave together (the NATS client writes what was
 * published in one turn with one system call, where publishes a handler apart would each take one).
 */
export type BeforeCommit = (start: () => Promise<unknown>) => void;

function startedWork(): { add: BeforeCommit; all: () => Promise<unknown> } {
  const starts: Array<() => Promise<unknown>> = [];
  return {
    add: (start) => {
      starts.push(start);
    },
    all: () =>
      Promise.all(
        starts.map((start) => {
          try {
            return start();
          } catch (error) {
            return Promise.reject(error as Error);
          }
        }),
      ),
  };
}

/**
 * Opens the transaction and inserts the events' inbox rows in one round trip (one simple-protocol
 * message, the values written as literals); returns the ids that were not there yet, i.e. the
 * events this consumer has not handled before.
 */
async function beginWithInbox(client: pg.PoolClient, consumer: string, eventIds: string[]): Promise<Set<string>> {
  const values = eventIds.map((id) => `(${pg.escapeLiteral(consumer)}, ${pg.escapeLiteral(id)})`).join(', ');
  const results = (await client.query(
    `BEGIN; INSERT INTO inbox (consumer, event_id) VALUES ${values} ON CONFLICT DO NOTHING RETURNING event_id`,
  )) as unknown as pg.QueryResult<{ event_id: string }>[];
  return new Set(results[1]!.rows.map((r) => r.event_id));
}

class InvalidPayload extends Error {
  constructor(message: string, readonly issues: unknown[]) {
    super(message);
  }
}
