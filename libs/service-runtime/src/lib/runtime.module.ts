import {
  Global,
  Inject,
  Injectable,
  Module,
  type BeforeApplicationShutdown,
  type DynamicModule,
  type Type,
  type Provider,
  type OnApplicationBootstrap,
  type OnApplicationShutdown,
} from '@nestjs/common';
import { ConfigModule, registerAs } from '@nestjs/config';
import { DiscoveryModule, DiscoveryService, MetadataScanner } from '@nestjs/core';
import { TerminusModule } from '@nestjs/terminus';
import { InjectPinoLogger, PinoLogger } from 'nestjs-pino';
import { PATTERN_EXTRAS_METADATA } from '@nestjs/microservices/constants.js';
import { secretScrubber, secretValuesIn, type Context, type SecretScrubber } from '@gantry/contracts';
import { createPool, EventStore, migrate, type MigrationClass, type Projection } from '@gantry/eventstore';
import { Bus, CommandClient, OutboxRelay, type Companions } from '@gantry/messaging';
import { redactUrl, SERVICE_CONFIG, serviceSettings, type ServiceConfig } from './config.js';
import { CommandsController, HealthController } from './http.controllers.js';
import { DeadLettersController, ProjectionsController } from './maintenance.controllers.js';
import { MetricsController, observeWriteBatch, reportOnScrape } from './metrics.js';
import { gantryHandlerOf } from './transport/decorators.js';
import { GantryTransport } from './transport/gantry-transport.js';
import { componentLogger, loggingModule, withinLogContext, type LogLevelSource } from './logging.js';
import { ConsumerLagHealthIndicator, NatsHealthIndicator, PostgresHealthIndicator, RelayHealthIndicator } from './health-indicators.js';
import { Liveness, Readiness } from './readiness.js';
import { RetentionPruner } from './retention.js';
import { readSettings, type SettingsPart } from './settings.js';

export { SERVICE_CONFIG };

export interface RuntimeOptions {
  service: string;
  /** The bounded context this service owns (its schema, stream and command namespace). */
  context: Context;
  defaultPort: number;
  migrations?: MigrationClass[];
  /** Read models kept in the same transaction as the append. */
  projections?: Projection[];
  /** Also provision the runners' dispatch stream. */
  dispatchStream?: boolean;
  /** Messages the relay publishes with an event that calls for them (see OutboxRelay's Companions). */
  companions?: Companions;
  /** The app's own settings, validated at boot with the runtime's (docs/configuration.md). */
  settings?: AnySettingsPart[];
}

// Parts differ in their variables; each is typed where it is defined.
type AnySettingsPart = SettingsPart<unknown, any>;

const SECRETS_KEY = 'secretValues';

/**
 * The process's SecretScrubber: credentials by their shape and its environment's secret values.
 * Events are written and commands sent through it (docs/configuration.md, "Secrets in events").
 */
export const SECRET_SCRUBBER = Symbol('gantry:secret-scrubber');

/**
 * The service's configuration: one validated read of the environment for the runtime's part and
 * the app's, under the `gantry` namespace of @nestjs/config, each part also provided under its
 * token. The read happens when the application is created (not when the module is imported), so a
 * bad value fails the start like any other provider and names every refused variable at once.
 */
function configuration(parts: AnySettingsPart[]): { imports: DynamicModule['imports']; providers: Provider[]; tokens: symbol[]; logLevel: LogLevelSource } {
  // The same read collects the environment's secret values, which the scrubber masks verbatim.
  const gantry = registerAs('gantry', () => ({ ...readSettings(parts, process.env), [SECRETS_KEY]: secretValuesIn(process.env) }));
  type Read = Record<string, unknown> & { [SECRETS_KEY]: string[] };
  const settingsModule = ConfigModule.forRoot({ ignoreEnvFile: true, load: [gantry] });
  return {
    imports: [settingsModule],
    // The logger module is built from the same read: the runtime's part holds the level.
    logLevel: { imports: [settingsModule], inject: [gantry.KEY], level: (settings) => (settings['runtime'] as ServiceConfig).logLevel },
    providers: [
      ...parts.map((part) => ({ provide: part.token, inject: [gantry.KEY], useFactory: (settings: Read) => settings[part.name] })),
      { provide: SECRET_SCRUBBER, inject: [gantry.KEY], useFactory: (settings: Read) => secretScrubber(settings[SECRETS_KEY]) },
    ],
    tokens: [...parts.map((part) => part.token), SECRET_SCRUBBER],
  };
}


export const RUNTIME_OPTIONS = Symbol('gantry:runtime-options');

/** @nestjs/terminus for /health and /ready; a failing check is named in the 503 body, not logged at every probe. */
const healthModule = () => TerminusModule.forRoot({ logger: false });

@Injectable()
class RuntimeLifecycle implements OnApplicationBootstrap, BeforeApplicationShutdown, OnApplicationShutdown {
  /** Takes this service out of what /metrics reads at a scrape. */
  private stopReporting: () => void = () => undefined;

  constructor(
    @Inject(RUNTIME_OPTIONS) private readonly options: RuntimeOptions,
    @Inject(SERVICE_CONFIG) private readonly config: ServiceConfig,
    @Inject(DiscoveryService) private readonly discovery: DiscoveryService,
    @Inject(MetadataScanner) private readonly scanner: MetadataScanner,
    @Inject(GantryTransport) private readonly transport: GantryTransport,
    @Inject(OutboxRelay) private readonly relay: OutboxRelay,
    @Inject(EventStore) private readonly store: EventStore,
    @Inject(Bus) private readonly bus: Bus,
    @Inject(Readiness) private readonly readiness: Readiness,
    @Inject(NatsHealthIndicator) private readonly nats: NatsHealthIndicator,
    @Inject(PostgresHealthIndicator) private readonly database: PostgresHealthIndicator,
    @Inject(RelayHealthIndicator) private readonly relayHealth: RelayHealthIndicator,
    @Inject(ConsumerLagHealthIndicator) private readonly consumerLag: ConsumerLagHealthIndicator,
    @InjectPinoLogger('runtime') private readonly log: PinoLogger,
  ) {}

  onApplicationBootstrap(): void {
    this.assertEveryHandlerIsServed();
    this.readiness.add('database', () => this.database.isHealthy('database'));
    this.readiness.add('nats', () => this.nats.isHealthy('nats'));
    this.readiness.add('relay', () => this.relayHealth.isHealthy('relay'));
    this.readiness.add('consumers', () => this.consumerLag.isHealthy('consumers'));
    this.store.onAppended(() => this.relay.appended());
    this.store.onBatchWritten(observeWriteBatch);
    this.stopReporting = reportOnScrape({
      relayBacklog: () => this.relay.backlog(),
      relayPublished: () => this.relay.publishedCount,
      databasePool: () => {
        const { pool } = this.store;
        return { max: pool.options.max, open: pool.totalCount, idle: pool.idleCount, waiting: pool.waitingCount };
      },
      consumers: () => this.transport.consumers,
      deadLetters: async () => {
        const { rows } = await this.store.pool.query<{ consumer: string; n: number }>(`SELECT consumer, count(*)::int AS n FROM dead_letters GROUP BY consumer`);
        return new Map(rows.map((r) => [r.consumer, r.n]));
      },
    });
    this.relay.start();
    this.log.info(
      {
        boundedContext: this.options.context,
        schema: this.config.schema,
        database: redactUrl(this.config.databaseUrl),
        nats: redactUrl(this.config.natsUrl),
        subjectRoot: this.config.naming.subjectRoot,
        commands: this.transport.commandNames,
        consumers: this.transport.consumers.map((c) => c.name),
      },
      'service started',
    );
  }

  /**
   * Every @CommandHandler / @DurableConsumer method must have reached the transport: one on a
   * provider (not a controller), or an application not started with createServiceApp, would
   * otherwise be silently never served.
   */
  private assertEveryHandlerIsServed(): void {
    const declared = (wrappers: Array<{ instance: unknown }>) => {
      const found: string[] = [];
      for (const { instance } of wrappers) {
        if (!instance || typeof instance !== 'object') continue;
        const prototype = Object.getPrototypeOf(instance) as Record<string, unknown>;
        for (const method of this.scanner.getAllMethodNames(prototype)) {
          const fn = prototype[method];
          if (typeof fn === 'function' && gantryHandlerOf(Reflect.getMetadata(PATTERN_EXTRAS_METADATA, fn))) {
            found.push(`${prototype.constructor.name}.${method}`);
          }
        }
      }
      return found;
    };
    const onProviders = declared(this.discovery.getProviders());
    if (onProviders.length > 0) {
      throw new Error(`${onProviders.join(', ')}: command and consumer handlers belong on controllers (@Controller(), the module's controllers)`);
    }
    const onControllers = declared(this.discovery.getControllers());
    const served = this.transport.commandNames.length + this.transport.consumers.length;
    if (onControllers.length !== served) {
      throw new Error(`${onControllers.length} handlers declared, ${served} registered with the transport: start the service with createServiceApp()`);
    }
  }

  async beforeApplicationShutdown(): Promise<void> {
    this.stopReporting();
    await this.transport.close();
    await this.relay.stop();
  }

  async onApplicationShutdown(): Promise<void> {
    await this.bus.close();
    await this.store.pool.end();
    this.log.info('service stopped');
  }
}

@Injectable()
class ClientLifecycle implements OnApplicationBootstrap, OnApplicationShutdown {
  constructor(
    @Inject(Bus) private readonly bus: Bus,
    @Inject(Readiness) private readonly readiness: Readiness,
    @Inject(NatsHealthIndicator) private readonly nats: NatsHealthIndicator,
  ) {}

  onApplicationBootstrap(): void {
    this.readiness.add('nats', () => this.nats.isHealthy('nats'));
  }

  async onApplicationShutdown(): Promise<void> {
    await this.bus.close();
  }
}

export interface ClientRuntimeOptions {
  service: string;
  defaultPort: number;
  /** The app's own settings, validated at boot with the runtime's (docs/configuration.md). */
  settings?: AnySettingsPart[];
}

/**
 * Everything a Gantry service stands on: configuration from the environment, its schema and
 * migrations, the event store, the NATS bus with its stream, the command server, the relay, the
 * durable consumers, /health and /ready, and an orderly stop on SIGTERM.
 */
@Global()
@Module({})
export class GantryRuntimeModule {
  /** For a process that owns no state (the runner): configuration, logs, the bus, health and readiness. */
  static forClient(options: ClientRuntimeOptions): DynamicModule {
    const config = configuration([
      serviceSettings({ service: options.service, schema: 'runner', port: options.defaultPort, commandsOverHttp: false }),
      ...(options.settings ?? []),
    ]);
    return {
      module: GantryRuntimeModule,
      imports: [loggingModule(options.service, config.logLevel), healthModule(), ...(config.imports ?? [])],
      controllers: [HealthController, MetricsController],
      providers: [
        ...config.providers,
        {
          provide: Bus,
          inject: [SERVICE_CONFIG, PinoLogger],
          useFactory: (config: ServiceConfig, logger: PinoLogger) => connectServiceBus(config, options.service, logger),
        },
        { provide: CommandClient, inject: [Bus, SECRET_SCRUBBER], useFactory: (bus: Bus, scrub: SecretScrubber) => new CommandClient(bus, { scrub }) },
        Readiness,
        Liveness,
        NatsHealthIndicator,
        ClientLifecycle,
      ],
      exports: [...config.tokens, Bus, CommandClient, Readiness, Liveness],
    };
  }

  static forRoot(options: RuntimeOptions): DynamicModule {
    const config = configuration([
      serviceSettings({ service: options.service, schema: options.context, port: options.defaultPort, commandsOverHttp: true }),
      ...(options.settings ?? []),
    ]);
    return {
      module: GantryRuntimeModule,
      imports: [DiscoveryModule, loggingModule(options.service, config.logLevel), healthModule(), ...(config.imports ?? [])],
      controllers: [HealthController, MetricsController, CommandsController, DeadLettersController, ProjectionsController],
      providers: [
        { provide: RUNTIME_OPTIONS, useValue: options },
        ...config.providers,
        {
          provide: EventStore,
          inject: [SERVICE_CONFIG, SECRET_SCRUBBER, Bus],
          useFactory: async (config: ServiceConfig, scrub: SecretScrubber, bus: Bus) => {
            await migrate({ url: config.databaseUrl, schema: config.schema, migrations: options.migrations, timeouts: config.databaseTimeouts });
            const pool = createPool({
              url: config.databaseUrl,
              schema: config.schema,
              applicationName: `${options.service}:${config.schema}`,
              max: config.databasePoolMax,
              timeouts: config.databaseTimeouts,
            });
            return new EventStore({
              pool,
              schema: config.schema,
              inlineProjections: options.projections,
              groupCommit: config.groupCommit ?? undefined,
              receiptTtlMs: config.retention.receiptTtlMs,
              scrub,
              // An event the relay could not publish would stop it for good: refused at its append.
              maxEventBytes: bus.nc.info?.max_payload,
            });
          },
        },
        {
          provide: Bus,
          inject: [SERVICE_CONFIG, PinoLogger],
          useFactory: async (config: ServiceConfig, logger: PinoLogger) => {
            const bus = await connectServiceBus(config, options.service, logger);
            await bus.ensureEventStream(options.context);
            if (options.dispatchStream) await bus.ensureDispatchStream();
            return bus;
          },
        },
        {
          provide: GantryTransport,
          inject: [SERVICE_CONFIG, EventStore, Bus, PinoLogger],
          useFactory: (config: ServiceConfig, store: EventStore, bus: Bus, logger: PinoLogger) =>
            new GantryTransport({
              bus,
              pool: store.pool,
              context: options.context,
              logger: componentLogger(logger, 'transport'),
              scrub: store.scrub,
              maxConcurrentCommands: config.commandConcurrency,
              withinLogContext,
            }),
        },
        { provide: CommandClient, inject: [Bus, SECRET_SCRUBBER], useFactory: (bus: Bus, scrub: SecretScrubber) => new CommandClient(bus, { scrub }) },
        {
          provide: OutboxRelay,
          inject: [SERVICE_CONFIG, EventStore, Bus, PinoLogger],
          useFactory: (config: ServiceConfig, store: EventStore, bus: Bus, logger: PinoLogger) =>
            new OutboxRelay({
              databaseUrl: config.databaseUrl,
              pool: store.pool,
              schema: config.schema,
              bus,
              context: options.context,
              logger: componentLogger(logger, 'relay'),
              timeouts: config.databaseTimeouts,
              ...(options.companions ? { companions: options.companions } : {}),
            }),
        },
        Readiness,
        Liveness,
        NatsHealthIndicator,
        PostgresHealthIndicator,
        RelayHealthIndicator,
        ConsumerLagHealthIndicator,
        RetentionPruner,
        RuntimeLifecycle,
      ],
      exports: [...config.tokens, RUNTIME_OPTIONS, EventStore, Bus, GantryTransport, CommandClient, OutboxRelay, Readiness, Liveness, RetentionPruner],
    };
  }
}

/**
 * The options a service module gave GantryRuntimeModule.forRoot (found in its imports), for what
 * runs from the service's binary without starting it (its maintenance commands); null for a module
 * built with forClient (the runner), which keeps no event log.
 */
export function runtimeOptionsOf(module: Type<unknown>): RuntimeOptions | null {
  // Nest keeps a module's `imports` as metadata of its class under this key (MODULE_METADATA.IMPORTS).
  const imports = (Reflect.getMetadata('imports', module) ?? []) as unknown[];
  for (const imported of imports) {
    const dynamic = imported as Partial<DynamicModule> | undefined;
    if (dynamic?.module !== GantryRuntimeModule) continue;
    for (const provider of dynamic.providers ?? []) {
      if (typeof provider === 'object' && 'provide' in provider && provider.provide === RUNTIME_OPTIONS && 'useValue' in provider) return provider.useValue as RuntimeOptions;
    }
  }
  return null;
}

/**
 * The service's bus, with the installation's stream settings: a stream it owns that exists with other
 * settings is brought to them at start, and what changed is logged (docs/operations.md, "Changing a
 * stream's settings").
 */
function connectServiceBus(config: ServiceConfig, service: string, logger: PinoLogger): Promise<Bus> {
  const log = componentLogger(logger, 'streams');
  return Bus.connect({
    servers: config.natsUrl,
    naming: config.naming,
    name: service,
    streams: { replicas: config.streamReplicas, ...config.streamLimits },
    onStreamSettingsChanged: (stream, changes) => log.log('stream settings changed', { stream, changes }),
  });
}
