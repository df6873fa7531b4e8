import 'reflect-metadata';
import { NestFactory } from '@nestjs/core';
import type { INestApplication, LoggerService, LogLevel, Type } from '@nestjs/common';
import type { NestExpressApplication } from '@nestjs/platform-express';
import { SERVICE_CONFIG } from './runtime.module.js';
import type { ServiceConfig } from './config.js';
import { JsonLogger } from './logger.js';
import { GantryTransport } from './transport/gantry-transport.js';
import { GantryExceptionFilter } from './transport/rpc-errors.filter.js';

const SHUTDOWN_GRACE_MS = Number(process.env.GANTRY_SHUTDOWN_GRACE_MS ?? 30_000);

export interface RunServiceOptions {
  /**
   * Keep each request's raw body (`req.rawBody`) beside the parsed one, for signatures computed over
   * the exact bytes (GitHub's webhooks), and accept JSON bodies up to `jsonLimit` (express's 100 kB
   * default is below what GitHub sends).
   */
  rawBody?: { jsonLimit: string };
}

export interface ServiceAppOptions extends RunServiceOptions {
  /** Nest's logger; `false` for none (tests). */
  logger?: LoggerService | LogLevel[] | false;
}

/**
 * Creates a service's application, runs its start-up hooks and connects its transport: every
 * @CommandHandler and @DurableConsumer is served once this returns. HTTP is not listening yet
 * (`app.listen`). Tests that run a service in-process use this as well.
 */
export async function createServiceApp(module: Type<unknown>, options: ServiceAppOptions = {}): Promise<INestApplication> {
  const app = await NestFactory.create(module, {
    logger: options.logger,
    bufferLogs: false,
    forceCloseConnections: true,
    rawBody: options.rawBody !== undefined,
    // A failed start is thrown to the caller (runService logs it and exits 1), not exited on here.
    abortOnError: false,
  });
  if (options.rawBody) (app as NestExpressApplication).useBodyParser('json', { limit: options.rawBody.jsonLimit });
  let transport: GantryTransport | null = null;
  try {
    transport = app.get(GantryTransport);
  } catch {
    // A client without commands or consumers (the runner) has no transport.
  }
  try {
    // Before the transport wraps its handlers: global enhancers are read when a handler is wrapped.
    app.useGlobalFilters(new GantryExceptionFilter(app.getHttpAdapter()));
    // The transport shares the application's configuration (global pipes, guards, interceptors, filters).
    if (transport) app.connectMicroservice({ strategy: transport }, { inheritAppConfig: true });
    await app.init();
    await app.startAllMicroservices();
  } catch (error) {
    await app.close().catch(() => undefined);
    throw error;
  }
  return app;
}

/**
 * Starts a service: HTTP for health, readiness and commands. SIGTERM/SIGINT run the shutdown hooks
 * (stop taking commands, finish what is in flight, stop consumers and relay, close connections) and
 * exit 0; a shutdown that hangs past the grace period exits 1.
 */
export async function runService(module: Type<unknown>, service: string, options: RunServiceOptions = {}): Promise<INestApplication> {
  const logger = new JsonLogger(service);
  let app: INestApplication;
  try {
    app = await createServiceApp(module, { ...options, logger });
    const config = app.get<ServiceConfig>(SERVICE_CONFIG);
    await app.listen(config.port, config.httpHost);
    logger.log({ message: 'listening', port: config.port, host: config.httpHost }, 'runtime');
  } catch (error) {
    logger.fatal({ message: 'service failed to start', error: error instanceof Error ? error.message : String(error) }, 'runtime');
    process.exit(1);
  }
  let stopping = false;
  const stop = (signal: NodeJS.Signals) => {
    if (stopping) return;
    stopping = true;
    logger.log({ message: 'stopping', signal }, 'runtime');
    const force = setTimeout(() => {
      logger.error({ message: 'shutdown took too long; exiting', graceMs: SHUTDOWN_GRACE_MS }, 'runtime');
      process.exit(1);
    }, SHUTDOWN_GRACE_MS);
    force.unref();
    app.close().then(
      () => process.exit(0),
      (error: unknown) => {
        logger.error({ message: 'shutdown failed', error: String(error) }, 'runtime');
        process.exit(1);
      },
    );
  };
  process.once('SIGTERM', () => stop('SIGTERM'));
  process.once('SIGINT', () => stop('SIGINT'));
  return app;
}
