import { DeliverPolicy } from '@nats-io/jetstream';
import { eventSubjectPrefix, eventTypeOfSubject, type Context } from '@gantry/contracts';
import type { Bus } from './bus.js';
import { DurableReader, settle, type ConsumerLag, type ConsumerLogger, type Delivered } from './durable-reader.js';
import type { EventConsumer } from './event-consumer.js';

export interface SharedDurableOptions {
  /** The durable consumer's name. */
  name: string;
  bus: Bus;
  /** Whose events: the stream of this context (its members read the same). */
  source: Context;
  logger: ConsumerLogger;
}

/**
 * One durable consumer read by several consumers of a service (its members), each of which
 * handles the events of its types with its own transactions, inbox scope, retries and dead
 * letters, exactly as on a durable of its own.
 *
 * NATS 2.9 gives a consumer one filter subject, so a consumer of some of a stream's types is sent
 * every event of the stream and acknowledges the others. Consumers of one stream that each had
 * their own durable were each sent every event; sharing one, the stream's events are delivered and
 * acknowledged once, parsed by no member that does not take their type, and copied to those that
 * do. A message is acknowledged once every member given a copy has finished it; when one member
 * hands its copy back, the message is handed back (after the shortest delay asked) once all have
 * settled theirs, and comes again to all of them: those that had handled it find it in their inbox
 * and do nothing. So a member's deliveries count the message's, including those another member
 * caused, and a member that fails holds back the acknowledgement, never the handling, of the
 * message for the others.
 *
 * A shared durable created where its members had durables of their own starts at the oldest
 * message any of them had not acknowledged (those handled already are found in the inboxes). The
 * old durables are left to the operator to delete (docs/architecture.md, "Durable consumers").
 */
export class SharedDurable {
  private readonly members: EventConsumer[] = [];
  private readonly reader: DurableReader;
  private readonly subjectPrefix: string;
  private started = false;
  private stopping: Promise<void> | null = null;

  constructor(private readonly options: SharedDurableOptions) {
    const shared = this;
    this.reader = new DurableReader(
      {
        ...options,
        get ackWaitMs() {
          return Math.min(...shared.members.map((m) => m.ackWaitMs));
        },
        // The branches of the stream its members' types are on (all when one takes every type).
        get types() {
          return shared.members.some((m) => m.types === null) ? null : shared.members.flatMap((m) => [...m.types!]);
        },
        startAt: () => this.startAt(),
      },
      (messages) => this.fanOut(messages),
    );
    this.subjectPrefix = eventSubjectPrefix(options.bus.naming, options.source);
  }

  get name(): string {
    return this.options.name;
  }

  get isReady(): boolean {
    return this.reader.isReady;
  }

  get streamName(): string {
    return this.reader.streamName;
  }

  /** Called by a member's constructor; members join before the durable is started. */
  join(member: EventConsumer): void {
    if (this.started) throw new Error(`consumer ${member.name} joins shared durable ${this.name} after it started`);
    if (member.source !== this.options.source) {
      throw new Error(`consumer ${member.name} reads ${member.source}, but shared durable ${this.name} reads ${this.options.source}`);
    }
    if (member.name === this.name || this.members.some((m) => m.name === member.name)) {
      throw new Error(`shared durable ${this.name} has two members named ${member.name}`);
    }
    this.members.push(member);
  }

  /** Starts reading for every member (idempotent: each member's start calls it). */
  start(): void {
    if (this.started) return;
    this.started = true;
    this.stopping = null;
    this.reader.start();
  }

  /** Stops reading; the members finish the batch in hand (idempotent: each member's stop calls it). */
  stop(): Promise<void> {
    if (!this.started) return this.stopping ?? Promise.resolve();
    this.started = false;
    for (const member of this.members) member.halt();
    this.stopping = this.reader.stop();
    return this.stopping;
  }

  ensureConsumer(): Promise<void> {
    return this.reader.ensureConsumer();
  }

  lag(now: Date = new Date()): Promise<ConsumerLag> {
    return this.reader.lag(now);
  }

  /**
   * Hands each message to the members that take its type (told by its subject), as a copy each;
   * acknowledges at once the messages none of them takes. Each member drains its copies as it
   * would its own durable's messages, for as long as the durable's messages come.
   */
  private async fanOut(messages: AsyncIterable<Delivered>): Promise<void> {
    const feeds = this.members.map(() => new Feed());
    let failure: unknown = null;
    const draining = this.members.map((member, i) =>
      member.drainShared(feeds[i]!).catch((error: unknown) => {
        // A member that cannot go on ends the session for all, as a consumer of its own would
        // restart its subscription: what is in hand comes back.
        failure ??= error;
        this.reader.interrupt();
      }),
    );
    try {
      for await (const msg of messages) {
        const type = eventTypeOfSubject(this.subjectPrefix, msg.subject);
        const takers = this.members.flatMap((member, i) => (type === null || member.types === null || member.types.has(type) ? [i] : []));
        if (takers.length === 0) {
          settle(msg, 'ack', undefined, this.options.logger, this.name);
          continue;
        }
        const copies = shareOut(msg, takers.length);
        takers.forEach((member, k) => feeds[member]!.push(copies[k]!));
      }
    } finally {
      for (const feed of feeds) feed.end();
      await Promise.all(draining);
    }
    if (failure) throw failure;
  }

  /**
   * Where the durable starts when it is created: at the oldest message not acknowledged on any of
   * the members' own durables, where they had them; else at the stream's first message.
   */
  private async startAt(): Promise<{ deliver_policy: DeliverPolicy; opt_start_seq?: number }> {
    const floors: number[] = [];
    for (const member of this.members) {
      const info = await this.options.bus.jsm.consumers.info(this.streamName, member.name).catch(() => null);
      if (info) floors.push(info.ack_floor.stream_seq);
    }
    if (floors.length === 0) return { deliver_policy: DeliverPolicy.All };
    this.options.logger.log('shared durable starts where its members left their own durables', {
      consumer: this.name,
      members: this.members.map((m) => m.name),
      startSequence: Math.min(...floors) + 1,
    });
    return { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: Math.min(...floors) + 1 };
  }
}

/**
 * `count` copies of a message, one per member. Each copy is settled once (later calls are ignored);
 * once all are, the message is acknowledged, or handed back after the shortest delay a copy asked
 * if any was handed back. A terminated copy (a member's dead letter) is finished for that member.
 */
function shareOut(msg: Delivered, count: number): Delivered[] {
  let open = count;
  let handBackAfter: number | null = null;
  const finish = (handBack: number | null) => {
    if (handBack !== null) handBackAfter = handBackAfter === null ? handBack : Math.min(handBackAfter, handBack);
    if (--open > 0) return;
    if (handBackAfter === null) msg.ack();
    else msg.nak(handBackAfter);
  };
  return Array.from({ length: count }, () => {
    let settled = false;
    const once = (handBack: number | null) => {
      if (settled) return;
      settled = true;
      finish(handBack);
    };
    return {
      seq: msg.seq,
      subject: msg.subject,
      data: msg.data,
      headers: msg.headers,
      info: msg.info,
      ack: () => once(null),
      nak: (millis?: number) => once(millis ?? 0),
      term: () => once(null),
      working: () => {
        if (!settled) msg.working();
      },
    };
  });
}

/** The copies for one member, as an async iterable its drain reads, ended by the durable. */
class Feed implements AsyncIterable<Delivered> {
  private readonly queue: Delivered[] = [];
  private ended = false;
  private wake: (() => void) | null = null;

  push(msg: Delivered): void {
    this.queue.push(msg);
    this.wake?.();
  }

  end(): void {
    this.ended = true;
    this.wake?.();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<Delivered> {
    for (;;) {
      while (this.queue.length > 0) yield this.queue.shift()!;
      if (this.ended) return;
      await new Promise<void>((resolve) => (this.wake = resolve));
      this.wake = null;
    }
  }
}
