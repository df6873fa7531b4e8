import { Inject, Injectable, type BeforeApplicationShutdown, type OnApplicationBootstrap } from '@nestjs/common';
import { InjectPinoLogger, PinoLogger } from 'nestjs-pino';
import type pg from 'pg';
import { EventStore, pruneExpired, type PruneResult } from '@gantry/eventstore';
import { Bus, isNotFound } from '@gantry/messaging';
import { SERVICE_CONFIG, type ServiceConfig } from './config.js';
import { Sweep } from './sweep.js';
import { GantryTransport } from './transport/gantry-transport.js';

/**
 * Inbox rows are kept this much longer than their stream keeps messages: the row is stamped by
 * PostgreSQL's clock and the message's age by the NATS server's, which need not agree exactly.
 */
const CLOCK_MARGIN = 1.1;

/** What a service's own retention step is given at each pass of the pruning job (RetentionPruner.register). */
export interface RetentionPass {
  /** The service's clock at the start of the pass. */
  now: Date;
  pool: pg.Pool;
  /**
   * How long after its publication an event may still reach the durable consumer of this name from
   * its source stream: the stream's max age as JetStream has it, with the clock margin. 0 when the
   * stream keeps messages without an age limit (or does not exist): nothing is known to be gone.
   */
  redeliveryWindowMs(consumer: string): number;
  /** GANTRY_RECEIPT_TTL_MS: how long a dead letter may be handed back without `force`. */
  receiptTtlMs: number;
}

/**
 * How long after an event reached the durable consumer `consumer` another one about the same thing,
 * published before it, may still reach it, by the longest way: redelivered from its stream while the
 * stream holds it (the redelivery window); dead-lettered within that, handed back by an operator
 * within the receipt window (an older one is skipped without `force`), and delivered from the stream
 * within the window again. A `republish` without `--force` puts back no event older than the window,
 * delivered within another: inside the same bound. 0 when the stream keeps events without an age
 * limit: nothing is known to be gone, and nothing that waits for the last such event is pruned.
 */
export function lateEventMs(pass: Pick<RetentionPass, 'redeliveryWindowMs' | 'receiptTtlMs'>, consumer: string): number {
  const windowMs = pass.redeliveryWindowMs(consumer);
  return windowMs > 0 ? pass.receiptTtlMs + 2 * windowMs : 0;
}

/** A service's own pruning, run by the pruning job after the log's: the rows it deleted, by name (for the log line). */
export type RetentionStep = (pass: RetentionPass) => Promise<Record<string, number>>;

/**
 * The pruning job of a service's log (every replica runs it; the deletes are idempotent):
 * receipts past their window, inbox rows of events their source stream no longer holds (a
 * stream without an age limit keeps its consumers' rows), dead letters past their retention; then
 * the steps the service registered for its own tables, on the same schedule.
 * See docs/DEVELOPING.md (retention).
 */
@Injectable()
export class RetentionPruner implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly sweep: Sweep;
  private readonly steps = new Map<string, RetentionStep>();

  constructor(
    @Inject(SERVICE_CONFIG) private readonly config: ServiceConfig,
    @Inject(EventStore) private readonly store: EventStore,
    @Inject(Bus) private readonly bus: Bus,
    @Inject(GantryTransport) private readonly transport: GantryTransport,
    @InjectPinoLogger('retention') private readonly log: PinoLogger,
  ) {
    this.sweep = new Sweep({ name: 'retention', everyMs: config.retention.pruneIntervalMs, run: () => this.pruneOnce(), log });
  }

  onApplicationBootstrap(): void {
    this.sweep.start();
  }

  async beforeApplicationShutdown(): Promise<void> {
    await this.sweep.stop();
  }

  /** Adds a step of the service's own (one per name) to every pass, after the log's pruning. */
  register(name: string, step: RetentionStep): void {
    if (this.steps.has(name)) throw new Error(`a retention step named ${name} is registered already`);
    this.steps.set(name, step);
  }

  async pruneOnce(): Promise<PruneResult & Record<string, number>> {
    const now = this.store.clock();
    const inboxBefore: Array<{ consumer: string; before: Date }> = [];
    const maxAgeOf = new Map<string, number>();
    const windowOf = new Map<string, number>();
    for (const consumer of this.transport.consumers) {
      const stream = consumer.streamName;
      if (!maxAgeOf.has(stream)) maxAgeOf.set(stream, await this.streamMaxAgeMs(stream));
      const maxAgeMs = maxAgeOf.get(stream)!;
      const windowMs = maxAgeMs > 0 ? Math.ceil(maxAgeMs * CLOCK_MARGIN) : 0;
      windowOf.set(consumer.name, windowMs);
      if (windowMs > 0) inboxBefore.push({ consumer: consumer.name, before: new Date(now.getTime() - windowMs) });
    }
    const result: PruneResult & Record<string, number> = {
      ...(await pruneExpired(this.store.pool, {
        now,
        inboxBefore,
        deadLettersBefore: new Date(now.getTime() - this.config.retention.deadLetterRetentionMs),
      })),
    };
    const pass: RetentionPass = {
      now,
      pool: this.store.pool,
      redeliveryWindowMs: (consumer) => windowOf.get(consumer) ?? 0,
      receiptTtlMs: this.config.retention.receiptTtlMs,
    };
    for (const step of this.steps.values()) Object.assign(result, await step(pass));
    if (Object.values(result).some((n) => n > 0)) this.log.info({ ...result }, 'pruned');
    return result;
  }

  /** 0 when the stream keeps messages without an age limit, or does not exist (nothing is known to be gone). */
  private async streamMaxAgeMs(stream: string): Promise<number> {
    try {
      const info = await this.bus.jsm.streams.info(stream);
      return Math.floor((info.config.max_age ?? 0) / 1_000_000);
    } catch (error) {
      if (isNotFound(error)) return 0;
      throw error;
    }
  }
}
