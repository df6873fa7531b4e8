import { AckPolicy, DeliverPolicy, JetStreamApiCodes, JetStreamApiError, type ConsumerConfig, type ConsumerMessages, type JsMsg, type MsgRequest } from '@nats-io/jetstream';
import type { MsgHdrs, Subscription } from '@nats-io/transport-node';
import { eventFilter, eventFilterFor, eventSubjectPrefix, streamName, type Context } from '@gantry/contracts';
import { isNotFound, withinDrainBound, type Bus } from './bus.js';

export interface ConsumerLogger {
  log(message: string, fields: Record<string, unknown>): void;
  warn(message: string, fields: Record<string, unknown>): void;
  error(message: string, fields: Record<string, unknown>): void;
}

/**
 * A message as a consumer handles it: one of its durable's, or the copy a shared durable hands
 * each of its members (`SharedDurable`). Settling it is final for this delivery.
 */
export interface Delivered {
  readonly seq: number;
  readonly subject: string;
  readonly data: Uint8Array;
  readonly headers?: MsgHdrs;
  readonly info: { readonly deliveryCount: number; readonly timestampNanos: number };
  ack(): void;
  /** Handed back, to be delivered again after `millis` (at once without). */
  nak(millis?: number): void;
  /** Never to be delivered again (a dead letter). */
  term(reason?: string): void;
  /** Still being handled: the ack wait starts again. */
  working(): void;
}

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

export type Settlement = 'ack' | 'nak' | 'term' | 'working';

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
 * Settles `msg` with the next batch of settlements. Acknowledgements are fire-and-forget: one that
 * cannot be sent (connection closed or draining) is logged and left to JetStream, which redelivers
 * after ack_wait; the inbox makes that harmless.
 */
export function settle(msg: Delivered, settlement: Settlement, argument: number | string | undefined, logger: ConsumerLogger, consumer: string): void {
  settlements.add(() => {
    try {
      if (settlement === 'ack') msg.ack();
      else if (settlement === 'nak') msg.nak(argument as number | undefined);
      else if (settlement === 'term') msg.term(argument as string | undefined);
      else msg.working();
    } catch (error) {
      logger.warn('could not settle a message; JetStream will redeliver it', { consumer, settle: settlement, sequence: msg.seq, error: String(error) });
    }
  });
}

export interface DurableReaderOptions {
  /** The durable consumer's name. */
  name: string;
  bus: Bus;
  /** Whose events: the stream of this context. */
  source: Context;
  /** One event type; without it, see `types`. (NATS 2.9 takes one filter subject per consumer.) */
  type?: string;
  /**
   * Without `type`: the types the consumer acts on (all when omitted). It reads the branch of the
   * context's subjects they are on, or the whole stream when they are on both (eventFilterFor).
   */
  types?: readonly string[] | null;
  ackWaitMs?: number;
  logger: ConsumerLogger;
  /**
   * Where a durable created now starts (default: the stream's first message); asked only when the
   * durable does not exist yet.
   */
  startAt?: () => Promise<Pick<ConsumerConfig, 'deliver_policy' | 'opt_start_seq'>>;
}

/**
 * The JetStream side of a consumer: creates its durable pull consumer (and again when it
 * disappears), pulls from it and hands what arrives to `receive`, and tells how far behind it is.
 * Each message it hands over is this process's until it is acknowledged or terminated.
 */
export class DurableReader {
  private running = false;
  private loop: Promise<void> | null = null;
  private pull: Pull | null = null;
  private ready = false;
  /** Messages this process received and has not finished (acknowledged or terminated): stream sequence → time in the stream (ms). */
  private readonly unfinished = new Map<number, number>();

  constructor(
    private readonly options: DurableReaderOptions,
    private readonly receive: (messages: AsyncIterable<Delivered>) => Promise<void>,
  ) {}

  get isReady(): boolean {
    return this.ready;
  }

  get name(): string {
    return this.options.name;
  }

  get streamName(): string {
    return streamName(this.options.bus.naming, this.options.source);
  }

  /** The durable's filter subject; '' for the whole stream. */
  get filterSubject(): string {
    const { bus, source, type, types } = this.options;
    return type === undefined ? eventFilterFor(bus.naming, source, types ?? null) : eventFilter(bus.naming, source, type);
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    this.loop = this.run();
  }

  async stop(): Promise<void> {
    this.running = false;
    settlements.flush(); // what was settled goes out before the subscription closes
    if (this.pull) await this.pull.close();
    await this.loop;
    this.loop = null;
    settlements.flush(); // and what the batch in hand settled, before the connection is closed
  }

  /** Ends the current subscription (what is in hand comes back); the reader subscribes again. */
  interrupt(): void {
    this.pull?.close().catch(() => undefined);
  }

  /** The settings of the durable that JetStream lets change on a durable that exists. */
  private get updatable(): Required<Pick<ConsumerConfig, 'ack_wait' | 'max_deliver' | 'max_ack_pending'>> {
    return { ack_wait: (this.options.ackWaitMs ?? 30_000) * 1_000_000, max_deliver: -1, max_ack_pending: 1000 };
  }

  /**
   * Creates the durable consumer if it does not exist (idempotent), and brings one that exists to
   * this code's settings (ack wait, deliveries, messages in hand): a durable outlives the version that
   * created it. A durable of this name that reads other subjects belongs to someone else: sharing it
   * would split the events between two handlers, so that is an error.
   */
  async ensureConsumer(): Promise<void> {
    const { bus, name } = this.options;
    const stream = this.streamName;
    try {
      const info = await bus.jsm.consumers.info(stream, name);
      if ((info.config.filter_subject ?? '') !== this.filterSubject) {
        throw new Error(
          `durable consumer ${name} on ${stream} reads ${info.config.filter_subject || 'every subject'}, not ${this.filterSubject || 'every subject'}: two handlers may not share a durable name`,
        );
      }
      const wanted = this.updatable;
      const changed = (Object.keys(wanted) as (keyof typeof wanted)[]).filter((key) => info.config[key] !== wanted[key]);
      if (changed.length > 0) {
        await bus.jsm.consumers.update(stream, name, wanted);
        this.options.logger.log('durable consumer updated to this version\'s settings', {
          consumer: name,
          changed: Object.fromEntries(changed.map((key) => [key, { from: info.config[key], to: wanted[key] }])),
        });
      }
      return;
    } catch (error) {
      if (!isNotFound(error)) throw error;
    }
    // The stream may be gone too (deleted, or the server started again on an empty store), and its
    // owner may publish nothing for a while: created again here, with the installation's settings, as
    // at start (docs/operations.md, "JetStream state lost").
    await bus.ensureForeignEventStream(this.options.source);
    await bus.jsm.consumers.add(stream, {
      durable_name: name,
      ack_policy: AckPolicy.Explicit,
      deliver_policy: DeliverPolicy.All,
      ...(await this.options.startAt?.()),
      ...(this.filterSubject ? { filter_subject: this.filterSubject } : {}),
      ...this.updatable,
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
      const subjects = this.filterSubject || `${eventSubjectPrefix(bus.naming, this.options.source)}>`;
      const query = { seq: info.delivered.stream_seq + 1, next_by_subj: subjects } as unknown as MsgRequest;
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
        this.pull = new Pull(await consumer.consume({ max_messages: 64 }));
        if (!this.running) {
          // Stopped while subscribing: whatever it was sent is handed back.
          const closing = this.pull.close();
          for await (const msg of this.pull.messages) this.pull.finishing(msg).nak();
          await closing;
          break;
        }
        this.ready = true;
        const watching = this.watch(this.pull).catch((error: unknown) =>
          this.options.logger.warn('consumer status watch ended', { consumer: this.options.name, error: String(error) }),
        );
        await this.receive(this.tracked(this.pull));
        await watching;
      } catch (error) {
        if (this.running) this.options.logger.warn('consumer interrupted; restarting', { consumer: this.options.name, error: String(error) });
      } finally {
        this.ready = false;
        if (this.pull) {
          await this.pull.close();
          await this.handBack(this.pull);
        }
        this.pull = null;
        // What was in hand comes back (to this process or another) and is counted again when it arrives.
        this.unfinished.clear();
      }
      if (this.running) await new Promise((r) => setTimeout(r, 250));
    }
  }

  /** The messages as they arrive, each counted as this process's until it is acknowledged or terminated. */
  private async *tracked(pull: Pull): AsyncIterable<Delivered> {
    for await (const msg of pull.messages) {
      this.unfinished.set(msg.seq, Math.floor(msg.info.timestampNanos / 1_000_000));
      const delivered = pull.finishing(msg);
      const done = () => this.unfinished.delete(msg.seq);
      yield {
        ...delivered,
        ack: () => (done(), delivered.ack()),
        term: () => (done(), delivered.term()),
      };
    }
  }

  /**
   * Sends what was handed back once the pull was closed (held by Pull), in stream order, once
   * JetStream has let go of the closed pull. A closed pull's request stays on the durable until its
   * expiry (30 s) or the durable's next look for a pull to deliver to, and NATS 2.9.10 takes a
   * message handed back while it is there as delivered again: the message then waits for its ack
   * wait all the same, and the durable steps back over the newest message it delivered, which comes
   * a second time. A consumer-info request drops the pull requests no one listens to any more, so it
   * goes first: what is handed back then goes to a live pull (another replica's), or to the next one.
   */
  private async handBack(pull: Pull): Promise<void> {
    settlements.flush(); // what the consumer settled as its reading ended
    const due = pull.handedBack();
    if (due.length === 0) return;
    if (pull.answering) await this.options.bus.jsm.consumers.info(this.streamName, this.options.name).catch((error: unknown) =>
      this.options.logger.warn('could not look at the durable before handing messages back; they may wait for their ack wait', {
        consumer: this.options.name,
        error: String(error),
      }),
    );
    for (const { seq, send } of due.sort((a, b) => a.seq - b.seq)) {
      try {
        send();
      } catch (error) {
        this.options.logger.warn('could not hand a message back; JetStream will redeliver it after its ack wait', { consumer: this.options.name, sequence: seq, error: String(error) });
      }
    }
  }

  /** A deleted consumer would otherwise leave us pulling from nothing forever. */
  private async watch(pull: Pull): Promise<void> {
    for await (const status of pull.messages.status()) {
      if (status.type === 'consumer_deleted' || status.type === 'consumer_not_found' || status.type === 'stream_not_found') {
        this.options.logger.warn('consumer disappeared; recreating', { consumer: this.options.name, status: status.type });
        await pull.close();
        return;
      }
    }
  }
}

/**
 * One subscription to a durable (`consume`) and what it was sent. Once it is closed, what the
 * consumer hands back (nak) is held until the reader sends it (DurableReader.handBack).
 */
class Pull {
  private closing: Promise<void> | null = null;
  /** False once NATS did not confirm the close: nothing more is asked of it before the hand-back. */
  answering = true;
  /** What was handed back since the pull was closed, not sent yet; null while it is open, and once sent. */
  private held: Array<{ seq: number; send: () => void }> | null = null;

  constructor(readonly messages: ConsumerMessages) {}

  /**
   * Stops the pull. JetStream may be sending it messages as it closes (a pull request cannot be
   * withdrawn): the subscription is drained rather than dropped, so that those still on their way
   * arrive, are read like the others, and are handed back with them instead of waiting for their
   * ack wait. The client's `close` drops its subscription at once, so the drain goes first; it
   * reaches into the client's pull (its `sub`), and without one the pull is closed as before.
   */
  close(): Promise<void> {
    this.held ??= [];
    this.closing ??= (async () => {
      const subscription = (this.messages as unknown as { sub?: Pick<Subscription, 'drain' | 'isClosed'> }).sub;
      // A NATS that stopped answering never confirms the drain: the stop waits for it no longer than for its other drains.
      if (subscription && !subscription.isClosed()) this.answering = await withinDrainBound(subscription.drain());
      await this.messages.close().catch(() => undefined);
    })();
    return this.closing;
  }

  /** What was handed back after the close and is now the reader's to send; later naks go at once. */
  handedBack(): Array<{ seq: number; send: () => void }> {
    const due = this.held ?? [];
    this.held = null;
    return due;
  }

  finishing(msg: JsMsg): Delivered {
    return {
      seq: msg.seq,
      subject: msg.subject,
      data: msg.data,
      headers: msg.headers,
      info: msg.info,
      ack: () => msg.ack(),
      // A message handed back is still this process's to finish, wherever it is redelivered next.
      nak: (millis) => {
        if (this.held) this.held.push({ seq: msg.seq, send: () => msg.nak(millis) });
        else msg.nak(millis);
      },
      // A plain +TERM: NATS 2.9 servers take `+TERM <reason>` for no acknowledgement at all, and the
      // message came back after every ack wait to be dead-lettered again. The reason is in the dead letter.
      term: () => msg.term(),
      working: () => msg.working(),
    };
  }
}

/**
 * Where a durable created now starts when it takes over from `durable` (on the stream of `source`): past that durable's ack
 * floor (everything at or below it was handled there), or at the stream's first message when that
 * durable does not exist.
 */
export async function startPastAckFloorOf(bus: Bus, source: Context, durable: string): Promise<Pick<ConsumerConfig, 'deliver_policy' | 'opt_start_seq'>> {
  const info = await bus.jsm.consumers.info(streamName(bus.naming, source), durable).catch((error: unknown) => {
    if (isNotFound(error)) return null;
    throw error;
  });
  if (!info) return { deliver_policy: DeliverPolicy.All };
  return { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: info.ack_floor.stream_seq + 1 };
}
