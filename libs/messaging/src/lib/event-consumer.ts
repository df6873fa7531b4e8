import pg from 'pg';
import { AckPolicy, DeliverPolicy, JetStreamApiCodes, JetStreamApiError, type ConsumerMessages, type JsMsg, type MsgRequest } from '@nats-io/jetstream';
import {
  EventEnvelopeSchema,
  eventFilter,
  GantryError,
  issuesOf,
  parseEventData,
  scrubSecrets,
  scrubStrings,
  streamName,
  type Context,
  type EventEnvelope,
  type SecretScrubber,
} from '@gantry/contracts';
import { isNotFound, type Bus } from './bus.js';

export interface ConsumerLogger {
  log(message: string, fields: Record<string, unknown>): void;
  warn(message: string, fields: Record<string, unknown>): void;
  error(message: string, fields: Record<string, unknown>): void;
}

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
  /** One event type, or all of the context's events. (NATS 2.9 takes one filter subject per consumer.) */
  type?: string;
  /**
   * The event types the handler acts on, when it reads every type of its source: the others are
   * acknowledged as they come, told by their `type` alone: no validation, no transaction, no inbox
   * row (a handler that ignores them has no effect to guard, nor a use for their payload). Omit for all.
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
  handle(event: EventEnvelope, sql: pg.PoolClient, beforeCommit: BeforeCommit): Promise<void>;
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
  /** Runs the handling of one event (its handler; alone, also its settlement and the lines logged about it) inside a context, e.g. the logs' correlation id. */
  withinEvent?: (event: EventEnvelope, work: () => Promise<void>) => Promise<void>;
}

const decoder = new TextDecoder();

/** What a consumer's readiness is judged by: attached to its durable, and how far behind it is. */
export interface ConsumerLag {
  attached: boolean;
  /** Messages waiting for this process: not yet delivered to anyone, or delivered here and not yet finished. */
  pending: number;
  /**
   * Messages delivered to another process and not yet acknowledged: a live replica's work in hand,
   * or what a dead process held until its ack wait runs out. Shown, not judged.
   */
  deliveredElsewhere: number;
  /** Age (time in the stream) of the oldest message waiting for this process; 0 when caught up. */
  oldestUnprocessedAgeMs: number;
}

type Settlement = 'ack' | 'nak' | 'term' | 'working';

/**
 * The settlements (acks, naks, …) of every consumer in the process, sent once per turn of the event
 * loop. nats.js writes what it has buffered at the end of each microtask in which something was
 * buffered, and a consumer settles each message as it finishes it, so settlements sent as they come
 * cost a socket write each: most of a busy service's writes, for the events its consumers merely
 * acknowledge. Sent together in one turn, they are one write. (The client has no setting for when
 * it writes; this is the smallest change on our side that batches them.)
 */
const settlements = new (class {
  private pending: Array<() => void> = [];

  add(send: () => void): void {
    if (this.pending.length === 0) setImmediate(() => this.flush());
    this.pending.push(send);
  }

  flush(): void {
    const due = this.pending;
    this.pending = [];
    for (const send of due) send();
  }
})();

/**
 * A durable pull consumer whose handler runs in a PostgreSQL transaction together with the inbox
 * insert, so a redelivered message changes nothing; the message is acked only after that commit.
 * Invalid payloads are dead-lettered with their validation issues and terminated; handler failures
 * are nak'ed with a growing delay; long handlers keep the message alive with `working()`; a
 * consumer that disappears is created again. When the database cannot be reached the message is
 * handed back (nak with a delay) without counting against the handler: it is never held, and never
 * dead-lettered for an outage.
 */
export class EventConsumer {
  private running = false;
  private loop: Promise<void> | null = null;
  private messages: ConsumerMessages | null = null;
  private processed = 0;
  private ready = false;
  /** Messages this process received and has not finished (acknowledged or terminated): stream sequence → time in the stream (ms). */
  private readonly unfinished = new Map<number, number>();
  private readonly handledTypes: ReadonlySet<string> | null;

  constructor(private readonly options: EventConsumerOptions) {
    this.handledTypes = options.types ? new Set(options.types) : null;
  }

  get isReady(): boolean {
    return this.ready;
  }

  get processedCount(): number {
    return this.processed;
  }

  /** The durable consumer's name, which is also its inbox scope. */
  get name(): string {
    return this.options.name;
  }

  /** Whose events it reads. */
  get source(): Context {
    return this.options.source;
  }

  get streamName(): string {
    return streamName(this.options.bus.naming, this.options.source);
  }

  private get filterSubject(): string {
    return eventFilter(this.options.bus.naming, this.options.source, this.options.type);
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    this.loop = this.run();
  }

  async stop(): Promise<void> {
    this.running = false;
    settlements.flush(); // what was settled goes out before the subscription closes
    await this.messages?.close().catch(() => undefined);
    await this.loop;
    this.loop = null;
    settlements.flush(); // and what the batch in hand settled, before the connection is closed
  }

  /**
   * Creates the durable consumer if it does not exist (idempotent). A durable of this name that
   * reads other subjects belongs to someone else: sharing it would split the events between two
   * handlers, so that is an error.
   */
  async ensureConsumer(): Promise<void> {
    const { bus, name } = this.options;
    const stream = this.streamName;
    try {
      const info = await bus.jsm.consumers.info(stream, name);
      if (info.config.filter_subject !== this.filterSubject) {
        throw new Error(
          `durable consumer ${name} on ${stream} reads ${info.config.filter_subject ?? 'every subject'}, not ${this.filterSubject}: two handlers may not share a durable name`,
        );
      }
      return;
    } catch (error) {
      if (!isNotFound(error)) throw error;
    }
    await bus.jsm.consumers.add(stream, {
      durable_name: name,
      ack_policy: AckPolicy.Explicit,
      deliver_policy: DeliverPolicy.All,
      filter_subject: this.filterSubject,
      ack_wait: (this.options.ackWaitMs ?? 30_000) * 1_000_000,
      max_deliver: -1,
      max_ack_pending: 1000,
    });
  }

  /**
   * How far behind this process is: the oldest of the messages not yet delivered to anyone (from the
   * server's view of the durable and the stream) and of those delivered here and not finished. A
   * message delivered to another process is that process's to finish: a live replica answers for it
   * in its own readiness, and one held by a process that died comes back after its ack wait, so a
   * restarted process does not wait for it to be ready.
   */
  async lag(now: Date = new Date()): Promise<ConsumerLag> {
    const { bus, name } = this.options;
    const info = await bus.jsm.consumers.info(this.streamName, name);
    // At or below the ack floor everything is acknowledged, by whichever process.
    for (const sequence of this.unfinished.keys()) if (sequence <= info.ack_floor.stream_seq) this.unfinished.delete(sequence);
    const since = [...this.unfinished.values()];
    if (info.num_pending > 0) {
      // The first message for our subjects past what the server has delivered is the oldest not delivered.
      // The server (2.9+) takes next_by_subj on the stream API's message get; nats.js types it only for direct get.
      const query = { seq: info.delivered.stream_seq + 1, next_by_subj: this.filterSubject } as unknown as MsgRequest;
      const next = await bus.jsm.streams.getMessage(this.streamName, query).catch((error: unknown) => {
        if (error instanceof JetStreamApiError && error.code === JetStreamApiCodes.NoMessageFound) return null; // delivered since the info was read
        throw error;
      });
      if (next) since.push(next.time.getTime());
    }
    const oldest = since.length > 0 ? Math.min(...since) : now.getTime();
    return {
      attached: this.ready,
      pending: info.num_pending + this.unfinished.size,
      deliveredElsewhere: Math.max(0, info.num_ack_pending - this.unfinished.size),
      oldestUnprocessedAgeMs: Math.max(0, now.getTime() - oldest),
    };
  }

  private async run(): Promise<void> {
    while (this.running) {
      try {
        await this.ensureConsumer();
        const consumer = await this.options.bus.js.consumers.get(this.streamName, this.options.name);
        const messages = await consumer.consume({ max_messages: 64 });
        this.messages = messages;
        this.ready = true;
        const watching = this.watch(messages).catch((error: unknown) =>
          this.options.logger.warn('consumer status watch ended', { consumer: this.options.name, error: String(error) }),
        );
        await this.drain(messages);
        await watching;
      } catch (error) {
        if (this.running) this.options.logger.warn('consumer interrupted; restarting', { consumer: this.options.name, error: String(error) });
      } finally {
        this.ready = false;
        await this.messages?.close().catch(() => undefined);
        this.messages = null;
        // What was in hand comes back (to this process or another) and is counted again when it arrives.
        this.unfinished.clear();
      }
      if (this.running) await new Promise((r) => setTimeout(r, 250));
    }
  }

  /** A deleted consumer would otherwise leave us pulling from nothing forever. */
  private async watch(messages: ConsumerMessages): Promise<void> {
    for await (const status of messages.status()) {
      if (status.type === 'consumer_deleted' || status.type === 'consumer_not_found' || status.type === 'stream_not_found') {
        this.options.logger.warn('consumer disappeared; recreating', { consumer: this.options.name, status: status.type });
        await messages.close().catch(() => undefined);
        return;
      }
    }
  }

  /**
   * Acknowledgements are fire-and-forget: one that cannot be sent (connection closed or draining)
   * is logged and left to JetStream, which redelivers after ack_wait; the inbox makes that harmless.
   * They go out at the end of the event loop's turn, together with every other consumer's
   * (`settlements`).
   */
  private settle(msg: JsMsg, settlement: Settlement, argument?: number | string): void {
    // A message handed back (nak) is still this process's to finish, wherever it is redelivered next.
    if (settlement === 'ack' || settlement === 'term') this.unfinished.delete(msg.seq);
    settlements.add(() => this.send(msg, settlement, argument));
  }

  private send(msg: JsMsg, settlement: Settlement, argument?: number | string): void {
    try {
      if (settlement === 'ack') msg.ack();
      else if (settlement === 'nak') msg.nak(argument as number | undefined);
      else if (settlement === 'term') msg.term(argument as string | undefined);
      else msg.working();
    } catch (error) {
      this.options.logger.warn('could not settle a message; JetStream will redeliver it', {
        consumer: this.options.name,
        settle: settlement,
        sequence: msg.seq,
        error: String(error),
      });
    }
  }

  private json(msg: JsMsg): unknown {
    try {
      return JSON.parse(decoder.decode(msg.data));
    } catch {
      throw new InvalidPayload('the payload is not valid JSON', [{ path: [], message: 'malformed JSON' }]);
    }
  }

  /**
   * Whether the handler leaves this payload alone: an event of a type it does not act on, told by
   * its `type` before anything is validated (an ignored event is not worth a schema check).
   */
  private ignores(raw: unknown): boolean {
    if (!this.handledTypes || typeof raw !== 'object' || raw === null) return false;
    const type = (raw as { type?: unknown }).type;
    return typeof type === 'string' && !this.handledTypes.has(type);
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
  private async drain(messages: ConsumerMessages): Promise<void> {
    const queue: JsMsg[] = [];
    const arrival = { wake: () => {} };
    let ended = false;
    let failure: unknown = null;
    const reading = (async () => {
      try {
        for await (const msg of messages) {
          this.unfinished.set(msg.seq, Math.floor(msg.info.timestampNanos / 1_000_000));
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
    if (failure) throw failure;
  }

  private async processBatch(msgs: JsMsg[]): Promise<void> {
    let work: Array<{ msg: JsMsg; event: EventEnvelope }> = [];
    for (const msg of msgs) {
      let event: EventEnvelope;
      try {
        const raw = this.json(msg);
        if (this.ignores(raw)) {
          this.settle(msg, 'ack');
          this.processed++;
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
    if (this.options.unaffected && work.length > 0) work = await this.withoutUnaffected(work);
    if (work.length > 1 && (await this.processTogether(work))) return;
    for (const { msg, event } of work) await this.within(event, () => this.process(msg, event));
  }

  /** Acknowledges the events `unaffected` names and returns the others (all of them when it fails). */
  private async withoutUnaffected(work: Array<{ msg: JsMsg; event: EventEnvelope }>): Promise<Array<{ msg: JsMsg; event: EventEnvelope }>> {
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
      this.settle(msg, 'ack');
      this.processed++;
      return false;
    });
  }

  private within(event: EventEnvelope, work: () => Promise<void>): Promise<void> {
    return this.options.withinEvent ? this.options.withinEvent(event, work) : work();
  }

  /** Keeps the messages from being redelivered while they are handled (see ackWaitMs). */
  private keepAlive(msgs: JsMsg[]): NodeJS.Timeout {
    const ackWait = this.options.ackWaitMs ?? 30_000;
    return setInterval(() => msgs.forEach((msg) => this.settle(msg, 'working')), Math.max(100, Math.floor(ackWait / 3)));
  }

  /**
   * Several events in one transaction: one inbox insert for all of them, each new one's handler in
   * turn, one commit, then the acks. Any failure rolls the whole batch back and returns false: the
   * caller then takes the events one at a time, where a failure is judged (and counted) per event.
   * The handlers that had run are run again then, as after a crash between their work and the commit.
   */
  private async processTogether(work: Array<{ msg: JsMsg; event: EventEnvelope }>): Promise<boolean> {
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
      for (const { event } of work) if (fresh.delete(event.eventId)) await this.within(event, () => this.options.handle(event, client!, started.add));
      await started.all();
      await client.query('COMMIT');
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

  private async process(msg: JsMsg, event: EventEnvelope): Promise<void> {
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
      if (fresh.size === 1) await this.options.handle(event, client, started.add);
      await started.all();
      handling = false;
      await client.query('COMMIT');
    } catch (error) {
      await client?.query('ROLLBACK').catch(() => undefined);
      clearInterval(keepAlive);
      // The database, not the handler, failed: hand the message back without counting it against the event.
      if (!handling || connectionLost) await this.onOutage(msg, event, error);
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

  private async onOutage(msg: JsMsg, event: EventEnvelope, error: unknown): Promise<void> {
    const delivery = msg.info.deliveryCount;
    this.options.logger.warn('database unavailable; event handed back', {
      consumer: this.options.name,
      eventId: event.eventId,
      type: event.type,
      delivery,
      error: String(error),
    });
    this.settle(msg, 'nak', this.backoff(delivery));
  }

  private async onFailure(msg: JsMsg, event: EventEnvelope, error: unknown): Promise<void> {
    const delivery = msg.info.deliveryCount;
    const maxDeliver = this.options.maxDeliver ?? 10;
    if (error instanceof RetryLater) {
      this.settle(msg, 'nak', error.delayMs);
      return;
    }
    const fields = { consumer: this.options.name, eventId: event.eventId, type: event.type, delivery, error: String(error) };
    if (delivery >= maxDeliver) {
      this.options.logger.error('event handler failed for the last time; dead-lettered', fields);
      if (await this.deadLetter(msg, event.eventId, { kind: 'handler_failed', message: String(error), deliveries: delivery })) {
        this.settle(msg, 'term', 'handler failed');
      }
      return;
    }
    this.options.logger.warn('event handler failed; will retry', fields);
    this.settle(msg, 'nak', this.backoff(delivery));
  }

  /** Records the message as a dead letter; when even that fails it is handed back to try again. */
  private async deadLetter(msg: JsMsg, eventId: string | null, failure: Record<string, unknown>): Promise<boolean> {
    const error = scrubStrings(failure, this.options.scrub ?? scrubSecrets);
    try {
      await this.options.pool.query(
        `INSERT INTO dead_letters (consumer, subject, stream_sequence, event_id, payload, error) VALUES ($1, $2, $3, $4, $5, $6)`,
        [this.options.name, msg.subject, msg.seq, eventId, decoder.decode(msg.data), JSON.stringify(error)],
      );
    } catch (writeError) {
      this.options.logger.warn('could not record a dead letter; message handed back', {
        consumer: this.options.name,
        sequence: msg.seq,
        error: String(writeError),
      });
      this.settle(msg, 'nak', this.backoff(msg.info.deliveryCount));
      return false;
    }
    this.options.logger.warn('message dead-lettered', { consumer: this.options.name, subject: msg.subject, sequence: msg.seq, error });
    return true;
  }
}

/**
 * Work a handler started and left running (a publish, say), handed to the consumer instead of awaited:
 * the transaction commits, and the events are acknowledged, only once all of it has succeeded, and
 * work that fails fails its handler. The handlers of a batch so overlap their effects' round trips
 * instead of waiting for them one after another.
 */
export type BeforeCommit = (work: Promise<unknown>) => void;

function startedWork(): { add: BeforeCommit; all: () => Promise<unknown> } {
  const works: Array<Promise<unknown>> = [];
  return {
    add: (work) => {
      works.push(work);
      work.catch(() => undefined); // a failure is seen by all(); until then it is not unhandled
    },
    all: () => Promise.all(works),
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
