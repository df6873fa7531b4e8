import 'reflect-metadata';
import type { Server } from 'node:http';
import { ModulesContainer, NestFactory } from '@nestjs/core';
import type { INestApplication, Type } from '@nestjs/common';
import type { NestExpressApplication } from '@nestjs/platform-express';
import { Logger, PinoLogger } from 'nestjs-pino';
import type pino from 'pino';
import { runRepublishCommand, type MaintenanceOutput } from './republish-command.js';
import { runtimeOptionsOf, SERVICE_CONFIG } from './runtime.module.js';
import { shutdownGraceSetting, type ServiceConfig } from './config.js';
import { processStop } from './process-stop.js';
import { refuseWithoutToken } from './http-auth.js';
import { bootLogger, nestBootLogger } from './logging.js';
import { GantryTransport } from './transport/gantry-transport.js';
import { GantryExceptionFilter } from './transport/rpc-errors.filter.js';
import { isRequestCharset, requestText } from './transport/request-text.js';
import { holdHereIfAsked } from './test-crash.js';

export interface RunServiceOptions {
  /**
   * Routes whose body is read as its bytes and never parsed (`req.body` is a Buffer, at most `limit`):
   * for signatures computed over the exact bytes (GitHub's webhooks), which the route checks before it
   * parses anything. Every other route takes JSON up to HTTP_JSON_LIMIT.
   */
  rawBodyRoutes?: { path: string; limit: string }[];
}

/** The JSON body a service takes over HTTP unless it names its own: NATS's default max_payload, the most a command carries there. */
export const HTTP_JSON_LIMIT = '1mb';

export interface ServiceAppOptions extends RunServiceOptions {
  /** `false`: Nest's own lines (modules, routes) are not logged (tests); the service's lines are. */
  nestLogs?: false;
  /** Where Nest's lines go until the service's own logger exists (a failed start): `runService`'s boot logger. */
  bootLog?: pino.Logger;
}

/**
 * Creates a service's application, runs its start-up hooks and connects its transport: every
 * @CommandHandler and @DurableConsumer is served once this returns. HTTP is not listening yet
 * (`app.listen`). Tests that run a service in-process use this as well.
 */
export async function createServiceApp(module: Type<unknown>, options: ServiceAppOptions = {}): Promise<INestApplication> {
  const app = await NestFactory.create(module, {
    // Nest's own lines wait for the service's pino logger (nestjs-pino), which exists once the modules do.
    ...(options.nestLogs === false ? { logger: false } : { bufferLogs: true, ...(options.bootLog ? { logger: nestBootLogger(options.bootLog) } : {}) }),
    forceCloseConnections: true,
    // A failed start is thrown to the caller (runService logs it and exits 1), not exited on here.
    abortOnError: false,
  });
  if (options.nestLogs !== false) app.useLogger(app.get(Logger));
  // A client without commands or consumers (the runner) has no transport. Looked for, not asked for:
  // the application's `get` of a provider it lacks logs an error before it throws.
  const hasTransport = [...app.get(ModulesContainer).values()].some((m) => m.providers.has(GantryTransport));
  const transport = hasTransport ? app.get(GantryTransport) : null;
  try {
    // Before the body parser: a caller without the service's token is refused before its body is read.
    const config = serviceConfigOf(app);
    if (config?.httpToken) {
      const authLog = await app.resolve(PinoLogger);
      authLog.setContext('http');
      app.use(refuseWithoutToken(config.httpToken, authLog));
    }
    // A route that checks a signature over the body's bytes gets them unparsed, before the JSON parser
    // (which then leaves the request alone): nothing of an unsigned body is parsed.
    for (const route of options.rawBodyRoutes ?? []) {
      (app as NestExpressApplication).useBodyParser('raw', { limit: route.limit, type: (req: { url?: string }) => samePath(req.url, route.path) });
    }
    // A command over HTTP may be as large as one over NATS (express's default, 100 kB, refused a job
    // its contract accepts), and its bytes are read as over NATS: UTF-8 only, never leniently.
    (app as NestExpressApplication).useBodyParser('json', { limit: HTTP_JSON_LIMIT, verify: refuseBodyNotUtf8 });
    // Before the transport wraps its handlers: global enhancers are read when a handler is wrapped.
    const filterLog = await app.resolve(PinoLogger);
    filterLog.setContext('http');
    app.useGlobalFilters(new GantryExceptionFilter(app.getHttpAdapter(), filterLog));
    // The transport shares the application's configuration (global pipes, guards, interceptors, filters).
    if (transport) app.connectMicroservice({ strategy: transport }, { inheritAppConfig: true });
    await app.init();
    keepConnectionsAlive(app);
    await app.startAllMicroservices();
  } catch (error) {
    await app.close().catch(() => undefined);
    throw error;
  }
  return app;
}

/**
 * The JSON parser's check of a body's bytes before it decodes them, by the rule the transport reads
 * a request over NATS with (request-text.ts): a charset other than UTF-8 (415), bytes that are not
 * UTF-8 or a byte order mark (400) are refused with their issue rather than decoded.
 */
function refuseBodyNotUtf8(_req: unknown, _res: unknown, body: Buffer, charset: string | null): void {
  if (!isRequestCharset(charset)) {
    const message = `the body's charset is ${charset}; a request is UTF-8 JSON`;
    throw Object.assign(new Error(message), { status: 415, type: 'charset.unsupported', issue: { path: [], code: 'unsupported_charset', message } });
  }
  const read = requestText(body);
  if ('issue' in read) throw Object.assign(new Error(read.issue.message), { status: 400, type: 'entity.parse.failed', issue: read.issue });
}

/** Whether a request's URL is `path`, as express routes it (any case, a trailing slash, a query). */
function samePath(url: string | undefined, path: string): boolean {
  const pathname = (url ?? '').split('?')[0]!.replace(/\/+$/, '').toLowerCase();
  return pathname === path.replace(/\/+$/, '').toLowerCase();
}

/**
 * Idle kept-alive connections stay open GANTRY_HTTP_KEEP_ALIVE_MS (docs/configuration.md), not Node's
 * 5 s. On a stop, Nest closes them all (forceCloseConnections).
 */
function keepConnectionsAlive(app: INestApplication): void {
  const config = serviceConfigOf(app);
  if (!config) return;
  const { httpKeepAliveMs } = config;
  const server = app.getHttpServer() as Server;
  server.keepAliveTimeout = httpKeepAliveMs;
}

/** The runtime's settings, when the application has them (looked for, not asked for, as the transport is). */
function serviceConfigOf(app: INestApplication): ServiceConfig | null {
  const hasConfig = [...app.get(ModulesContainer).values()].some((m) => m.providers.has(SERVICE_CONFIG));
  return hasConfig ? app.get<ServiceConfig>(SERVICE_CONFIG) : null;
}

/** The services' maintenance commands, run from their binary: `node apps/<service>/dist/main.js <command> ...`. */
const MAINTENANCE_COMMANDS = ['republish'];

/**
 * Runs a maintenance command of the service (docs/operations.md) instead of the service, and answers
 * its exit code. An unknown word is refused rather than ignored: a mistyped command must not start a
 * second copy of the service.
 */
async function runMaintenanceCommand(module: Type<unknown>, service: string, command: string, args: string[], output: MaintenanceOutput): Promise<number> {
  if (!MAINTENANCE_COMMANDS.includes(command)) {
    output.err(`${service}: unknown command '${command}'; its maintenance command is: ${MAINTENANCE_COMMANDS.join(', ')} (without arguments, ${service} starts)`);
    return 2;
  }
  const runtime = runtimeOptionsOf(module);
  if (runtime === null) {
    output.err(`${service} keeps no event log: ${command} is a command of the services that own one (job-service, workflow-engine, pr-service, worktree-service)`);
    return 2;
  }
  return runRepublishCommand(args, { service, context: runtime.context, defaultPort: runtime.defaultPort, env: process.env, output });
}

/** Lets what was written to stdout and stderr out before the process exits (a pipe's writes are asynchronous). */
async function flushOutput(): Promise<void> {
  await Promise.all([process.stdout, process.stderr].map((stream) => new Promise<void>((resolve) => stream.write('', () => resolve()))));
}

/** Closes the application (its shutdown hooks) and exits 0, or 1 when the close fails. */
function closeAndExit(app: INestApplication, log: pino.Logger): void {
  app.close().then(
    () => process.exit(0),
    (error: unknown) => {
      log.error({ error: String(error) }, 'shutdown failed');
      process.exit(1);
    },
  );
}

/** GANTRY_SHUTDOWN_GRACE_MS as the runtime's settings read it; their default when it is not a valid value (the start then refuses it). */
function shutdownGraceOf(env: NodeJS.ProcessEnv): number {
  const read = shutdownGraceSetting().safeParse(env.GANTRY_SHUTDOWN_GRACE_MS);
  return read.success ? read.data : shutdownGraceSetting().parse(undefined);
}

/** Listens on the port, or says which setting to change when the port or address cannot be had. */
async function listening(app: INestApplication, port: number, host: string): Promise<void> {
  try {
    await app.listen(port, host);
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    if (code === 'EADDRINUSE') throw new Error(`port ${port} on ${host} is taken by another program: set PORT to a free port, or stop that program`);
    if (code === 'EADDRNOTAVAIL') throw new Error(`${host} is not an address of this machine: set GANTRY_HTTP_HOST to one of its addresses`);
    if (code === 'EACCES') throw new Error(`port ${port} may not be opened by this user: set PORT to 1024 or above`);
    throw error;
  }
}

/**
 * `runService` for an app's entry point, which cannot await at its top: the app's bundle is CommonJS
 * (docs/operations.md, "Starting fast"). runService reports a failed start and exits by itself; what
 * it did not expect is written out and exits 1, as an uncaught error would.
 */
export function startService(module: Type<unknown>, service: string, options: RunServiceOptions = {}): void {
  runService(module, service, options).catch((error: unknown) => {
    process.stderr.write(`${service}: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exit(1);
  });
}

/**
 * Starts a service: HTTP for health, readiness and commands. SIGTERM/SIGINT run the shutdown hooks
 * (stop taking commands, finish what is in flight, stop consumers and relay, close connections) and
 * exit 0; a shutdown that hangs past the grace period, counted from the signal, exits 1. A signal
 * during the start asks for the stop (processStop): the start goes on to its end without listening,
 * and the stop follows at once. With arguments, runs the maintenance command they name instead and
 * exits with its code.
 */
export async function runService(module: Type<unknown>, service: string, options: RunServiceOptions = {}): Promise<INestApplication> {
  const [command, ...args] = process.argv.slice(2);
  if (command !== undefined) {
    const output = { out: (line: string) => process.stdout.write(`${line}\n`), err: (line: string) => process.stderr.write(`${line}\n`) };
    const code = await runMaintenanceCommand(module, service, command, args, output);
    await flushOutput();
    process.exit(code);
  }
  const boot = bootLogger(service);
  const log = boot.child({ context: 'runtime' });
  // Listened for before anything is started: a signal that comes while the service starts asks for its
  // stop, which closes it once it has started, rather than killing it with the work its start began.
  let started: INestApplication | null = null;
  const stop = (signal: NodeJS.Signals) => {
    if (!processStop.request()) {
      // A second signal does not cut the stop short (its default action would kill the process with
      // work in flight): the grace period bounds it (docs/operations.md, "Stopping").
      log.warn({ signal }, 'already stopping; waiting for work in flight');
      return;
    }
    log.info({ signal, ...(started === null ? { starting: true } : {}) }, 'stopping');
    // Counted from the signal, with the grace the settings will give (read again here: they may not be read yet).
    const graceMs = shutdownGraceOf(process.env);
    const force = setTimeout(() => {
      log.error({ graceMs }, 'shutdown took too long; exiting');
      process.exit(1);
    }, graceMs);
    force.unref();
    if (started !== null) closeAndExit(started, log);
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
  let app: INestApplication;
  try {
    app = await createServiceApp(module, { ...options, bootLog: boot });
    const config = app.get<ServiceConfig>(SERVICE_CONFIG);
    // Test-only (GANTRY_TEST_HOLD_AT): a signal comes between the start-up hooks and the listening.
    await holdHereIfAsked('runtime:listen');
    // Asked to stop while it started: it does not listen, and is closed at once.
    if (!processStop.signal.aborted) {
      await listening(app, config.port, config.httpHost);
      log.info({ port: config.port, host: config.httpHost }, 'listening');
    }
  } catch (error) {
    log.fatal({ error: error instanceof Error ? error.message : String(error) }, 'service failed to start');
    process.exit(1);
  }
  started = app;
  if (processStop.signal.aborted) closeAndExit(app, log);
  return app;
}
