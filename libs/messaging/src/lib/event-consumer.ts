import type pg from 'pg';
import { AckPolicy, DeliverPolicy, type ConsumerMessages, type JsMsg } from '@nats-io/jetstream';
import {
  EventEnvelopeSchema,
  eventFilter,
  GantryError,
  issuesOf,
  parseEventData,
  streamName,
  type Context,
  type EventEnvelope,
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
  handle(event: EventEnvelope, sql: pg.PoolClient): Promise<void>;
  logger: ConsumerLogger;
  /** After this many deliveries a failing message is dead-lettered and terminated. */
  maxDeliver?: number;
  ackWaitMs?: number;
  backoffMs?: (delivery: number) => number;
  /** Validate `data` against the registered event contract (default true). */
  validate?: boolean;
}

const decoder = new TextDecoder();

/**
 * A durable pull consumer whose handler runs in a PostgreSQL transaction together with the inbox
 * insert, so a redelivered message changes nothing; the message is acked only after that commit.
 * Invalid payloads are dead-lettered with their validation issues and terminated; handler failures
 * are nak'ed with a growing delay; long handlers keep the message alive with `working()`; a
 * consumer that disappears is created again.
 */
export class EventConsumer {
  private running = false;
  private loop: Promise<void> | null = null;
  private messages: ConsumerMessages | null = null;
  private processed = 0;
  private ready = false;

  constructor(private readonly options: EventConsumerOptions) {}

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

  get streamName(): string {
    return streamName(this.options.bus.naming, this.options.source);
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    this.loop = this.run();
  }

  async stop(): Promise<void> {
    this.running = false;
    await this.messages?.close().catch(() => undefined);
    await this.loop;
    this.loop = null;
  }

  /** Creates the durable consumer if it does not exist (idempotent). */
  async ensureConsumer(): Promise<void> {
    const { bus, name, source, type } = this.options;
    const stream = this.streamName;
    try {
      await bus.jsm.consumers.info(stream, name);
      return;
    } catch (error) {
      if (!isNotFound(error)) throw error;
    }
    await bus.jsm.consumers.add(stream, {
      durable_name: name,
      ack_policy: AckPolicy.Explicit,
      deliver_policy: DeliverPolicy.All,
      filter_subject: eventFilter(bus.naming, source, type),
      ack_wait: (this.options.ackWaitMs ?? 30_000) * 1_000_000,
      max_deliver: -1,
      max_ack_pending: 1000,
    });
  }

  private async run(): Promise<void> {
    while (this.running) {
      try {
        await this.ensureConsumer();
        const consumer = await this.options.bus.js.consumers.get(this.streamName, this.options.name);
        const messages = await consumer.consume({ max_messages: 64 });
        this.messages = messages;
        this.ready = true;
        void this.watch(messages);
        for await (const msg of messages) {
          await this.process(msg);
          if (!this.running) break;
        }
      } catch (error) {
        if (this.running) this.options.logger.warn('consumer interrupted; restarting', { consumer: this.options.name, error: String(error) });
      } finally {
        this.ready = false;
        await this.messages?.close().catch(() => undefined);
        this.messages = null;
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

  private decode(msg: JsMsg): EventEnvelope {
    let raw: unknown;
    try {
      raw = JSON.parse(decoder.decode(msg.data));
    } catch {
      throw new InvalidPayload('the payload is not valid JSON', [{ path: [], message: 'malformed JSON' }]);
    }
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

  private async process(msg: JsMsg): Promise<void> {
    let event: EventEnvelope;
    try {
      event = this.decode(msg);
    } catch (error) {
      if (!(error instanceof InvalidPayload)) throw error;
      await this.deadLetter(msg, null, { kind: 'invalid_payload', message: error.message, issues: error.issues });
      msg.term(error.message);
      return;
    }
    const ackWait = this.options.ackWaitMs ?? 30_000;
    const keepAlive = setInterval(() => msg.working(), Math.max(100, Math.floor(ackWait / 3)));
    const client = await this.options.pool.connect();
    try {
      await client.query('BEGIN');
      const fresh = await client.query(
        'INSERT INTO inbox (consumer, event_id) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING 1',
        [this.options.name, event.eventId],
      );
      if (fresh.rowCount === 1) await this.options.handle(event, client);
      await client.query('COMMIT');
      msg.ack();
      this.processed++;
    } catch (error) {
      await client.query('ROLLBACK').catch(() => undefined);
      await this.onFailure(msg, event, error);
    } finally {
      clearInterval(keepAlive);
      client.release();
    }
  }

  private async onFailure(msg: JsMsg, event: EventEnvelope, error: unknown): Promise<void> {
    const delivery = msg.info.deliveryCount;
    const maxDeliver = this.options.maxDeliver ?? 10;
    if (error instanceof RetryLater) {
      msg.nak(error.delayMs);
      return;
    }
    const fields = { consumer: this.options.name, eventId: event.eventId, type: event.type, delivery, error: String(error) };
    if (delivery >= maxDeliver) {
      this.options.logger.error('event handler failed for the last time; dead-lettered', fields);
      await this.deadLetter(msg, event.eventId, { kind: 'handler_failed', message: String(error), deliveries: delivery });
      msg.term('handler failed');
      return;
    }
    this.options.logger.warn('event handler failed; will retry', fields);
    const backoff = this.options.backoffMs ?? ((n: number) => Math.min(30_000, 200 * 2 ** (n - 1)));
    msg.nak(backoff(delivery));
  }

  private async deadLetter(msg: JsMsg, eventId: string | null, error: Record<string, unknown>): Promise<void> {
    await this.options.pool.query(
      `INSERT INTO dead_letters (consumer, subject, stream_sequence, event_id, payload, error) VALUES ($1, $2, $3, $4, $5, $6)`,
      [this.options.name, msg.subject, msg.seq, eventId, decoder.decode(msg.data), JSON.stringify(error)],
    );
    this.options.logger.warn('message dead-lettered', { consumer: this.options.name, subject: msg.subject, sequence: msg.seq, error });
  }
}

class InvalidPayload extends Error {
  constructor(message: string, readonly issues: unknown[]) {
    super(message);
  }
}
