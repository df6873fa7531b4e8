import { Inject, Injectable, type BeforeApplicationShutdown, type OnApplicationBootstrap } from '@nestjs/common';
import { InjectPinoLogger, PinoLogger } from 'nestjs-pino';
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

/**
 * The pruning job of a service's log (every replica runs it; the deletes are idempotent):
 * receipts past their window, inbox rows of events their source stream no longer holds (a
 * stream without an age limit keeps its consumers' rows), dead letters past their retention.
 * See docs/DEVELOPING.md (retention).
 */
@Injectable()
export class RetentionPruner implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly sweep: Sweep;

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

  async pruneOnce(): Promise<PruneResult> {
    const now = this.store.clock();
    const inboxBefore: Array<{ consumer: string; before: Date }> = [];
    const maxAgeOf = new Map<string, number>();
    for (const consumer of this.transport.consumers) {
      const stream = consumer.streamName;
      if (!maxAgeOf.has(stream)) maxAgeOf.set(stream, await this.streamMaxAgeMs(stream));
      const maxAgeMs = maxAgeOf.get(stream)!;
      if (maxAgeMs > 0) inboxBefore.push({ consumer: consumer.name, before: new Date(now.getTime() - Math.ceil(maxAgeMs * CLOCK_MARGIN)) });
    }
    const result = await pruneExpired(this.store.pool, {
      now,
      inboxBefore,
      deadLettersBefore: new Date(now.getTime() - this.config.retention.deadLetterRetentionMs),
    });
    if (result.receipts + result.inbox + result.deadLetters > 0) this.log.info({ ...result }, 'pruned');
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
