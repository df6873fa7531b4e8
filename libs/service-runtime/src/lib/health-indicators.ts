import { Inject, Injectable } from '@nestjs/common';
import { HealthIndicatorService, type HealthIndicatorResult } from '@nestjs/terminus';
import { EventStore } from '@gantry/eventstore';
import { Bus, OutboxRelay } from '@gantry/messaging';
import { SERVICE_CONFIG, type ServiceConfig } from './config.js';
import { verdict } from './readiness.js';
import { GantryTransport } from './transport/gantry-transport.js';

/*
 * The runtime's readiness checks as @nestjs/terminus health indicators (terminus has none for
 * nats.js, pg or the relay). What each one judges, and why: docs/operations.md.
 */

/** NATS by the client's connection state, then a real round trip: a client that is reconnecting is not ready. */
@Injectable()
export class NatsHealthIndicator {
  constructor(
    @Inject(HealthIndicatorService) private readonly health: HealthIndicatorService,
    @Inject(Bus) private readonly bus: Bus,
  ) {}

  async isHealthy(key: string): Promise<HealthIndicatorResult> {
    const { ok, ...detail } = await this.bus.health();
    return verdict(this.health, key, ok, detail);
  }
}

/** PostgreSQL by a query on the service's pool. */
@Injectable()
export class PostgresHealthIndicator {
  constructor(
    @Inject(HealthIndicatorService) private readonly health: HealthIndicatorService,
    @Inject(EventStore) private readonly store: EventStore,
  ) {}

  async isHealthy(key: string): Promise<HealthIndicatorResult> {
    try {
      await this.store.pool.query('SELECT 1');
      return this.health.check(key).up();
    } catch (error) {
      return this.health.check(key).down(error instanceof Error ? error.message : String(error));
    }
  }
}

/**
 * The relay by the age of the oldest committed event not yet in JetStream, the same on every
 * replica (the active one and the standbys): a backlog is fine while it moves.
 */
@Injectable()
export class RelayHealthIndicator {
  constructor(
    @Inject(HealthIndicatorService) private readonly health: HealthIndicatorService,
    @Inject(OutboxRelay) private readonly relay: OutboxRelay,
    @Inject(SERVICE_CONFIG) private readonly config: ServiceConfig,
  ) {}

  async isHealthy(key: string): Promise<HealthIndicatorResult> {
    const { pending, oldestAgeMs } = await this.relay.backlog();
    const detail = { pending, oldestAgeMs, maxAgeMs: this.config.readyRelayMaxAgeMs, active: this.relay.isLeader };
    return verdict(this.health, key, oldestAgeMs <= this.config.readyRelayMaxAgeMs, detail);
  }
}

/**
 * Each durable consumer attached to its durable, and its lag under the limit: the age of the oldest
 * event it has not been delivered yet or that this process holds unfinished (see EventConsumer.lag).
 */
@Injectable()
export class ConsumerLagHealthIndicator {
  constructor(
    @Inject(HealthIndicatorService) private readonly health: HealthIndicatorService,
    @Inject(GantryTransport) private readonly transport: GantryTransport,
    @Inject(SERVICE_CONFIG) private readonly config: ServiceConfig,
  ) {}

  async isHealthy(key: string): Promise<HealthIndicatorResult> {
    const consumers: Record<string, unknown> = {};
    let ok = true;
    for (const consumer of this.transport.consumers) {
      const lag = await consumer.lag().catch((error: unknown) => ({ attached: false, error: String(error) }) as const);
      const behind = 'oldestUnprocessedAgeMs' in lag && lag.oldestUnprocessedAgeMs > this.config.readyConsumerMaxLagMs;
      if (!lag.attached || behind) ok = false;
      consumers[consumer.name] = lag;
    }
    return verdict(this.health, key, ok, { maxLagMs: this.config.readyConsumerMaxLagMs, consumers });
  }
}
