import { AsyncLocalStorage } from 'node:async_hooks';
import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { DynamicModule, InjectionToken, LoggerService } from '@nestjs/common';
import { LoggerModule, type Params, type PinoLogger } from 'nestjs-pino';
import pino, { type Bindings, type DestinationStream, type LevelWithSilent, type LoggerOptions } from 'pino';
import { secretScrubber, secretValuesIn, type SecretScrubber } from '@gantry/contracts';

/**
 * Where a secret may sit in a log record, by path (pino's `redact`): the value is replaced, the
 * key stays, and a key that only looks like one (`tokenExpired`, `tokens`) is left alone. `*` is
 * one level of any key, so a secret is found at the top of a record and up to two objects deep.
 * See docs/operations.md (logging).
 */
const SECRET_KEYS = [
  'authorization',
  'cookie',
  'password',
  'passphrase',
  'token',
  'accessToken',
  'refreshToken',
  'bearerToken',
  'apiKey',
  'secret',
  'clientSecret',
  'privateKey',
  'webhookSecret',
  'credentials',
];

/** Values that are URLs which may carry a user and password (connection strings): kept, without them. */
const URL_KEYS = ['databaseUrl', 'natsUrl', 'url', 'connectionString'];

const atDepth = (key: string) => [key, `*.${key}`, `*.*.${key}`];

export const REDACTED_PATHS: readonly string[] = [
  ...SECRET_KEYS.flatMap(atDepth),
  ...URL_KEYS.flatMap(atDepth),
  // HTTP requests as pino-http records them.
  'req.headers.authorization',
  'req.headers.cookie',
  'req.headers["x-gantry-token"]',
];

const urlKeys = new Set(URL_KEYS);

/** A URL without the user and password it may carry; several may be given comma-separated (NATS servers). */
function withoutCredentials(value: string): string {
  return value
    .split(',')
    .map((one) => {
      try {
        const url = new URL(one.trim());
        if (!url.username && !url.password) return one;
        url.username = url.password ? url.username : '';
        url.password = url.password ? '***' : '';
        return url.toString();
      } catch {
        return one; // not a URL (a path, a name): nothing to take out
      }
    })
    .join(',');
}

/** A connection string keeps its host and path, a secret becomes `***`. */
function censor(value: unknown, path: string[]): unknown {
  const key = path[path.length - 1] ?? '';
  if (urlKeys.has(key)) return typeof value === 'string' ? withoutCredentials(value) : value;
  return '***';
}

/**
 * What a line is given, its credentials masked by the secret scrubber (docs/configuration.md, "Secrets
 * in events"): above all an error's message and stack, which quote what a failed git command or HTTP
 * call was sent — a URL with its password, a token — where redaction by path cannot look. Strings,
 * errors, arrays and plain objects are scrubbed in copies; other objects (an HTTP request, which
 * pino's serializers read) are left as they are.
 */
function scrubbedArgument(value: unknown, scrub: SecretScrubber, seen: WeakSet<object>): unknown {
  if (typeof value === 'string') return scrub(value);
  if (value === null || typeof value !== 'object' || seen.has(value)) return value;
  seen.add(value);
  if (Array.isArray(value)) return value.map((item) => scrubbedArgument(item, scrub, seen));
  if (value instanceof Error) {
    // A copy of the same class (the log's `type`), each own property scrubbed and as enumerable as it was.
    const copy = Object.create(Object.getPrototypeOf(value) as object) as Error;
    for (const key of Object.getOwnPropertyNames(value)) {
      const descriptor = Object.getOwnPropertyDescriptor(value, key)!;
      if ('value' in descriptor) descriptor.value = scrubbedArgument(descriptor.value, scrub, seen);
      Object.defineProperty(copy, key, descriptor);
    }
    return copy;
  }
  const prototype = Object.getPrototypeOf(value) as unknown;
  if (prototype !== Object.prototype && prototype !== null) return value;
  return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, scrubbedArgument(item, scrub, seen)]));
}

/** NestJS names (`log`, `verbose`) are taken too, so the settings of before still work. */
const LEVEL_ALIASES = { log: 'info', verbose: 'trace' } as const satisfies Record<string, LevelWithSilent>;

/** The words `LOG_LEVEL` accepts (the runtime's settings refuse any other): pino's levels and NestJS's names. */
export const LOG_LEVEL_NAMES = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent', ...(Object.keys(LEVEL_ALIASES) as Array<keyof typeof LEVEL_ALIASES>)] as const;
export type LogLevelName = (typeof LOG_LEVEL_NAMES)[number];

/** An accepted `LOG_LEVEL` word as pino's level. */
export function pinoLevel(name: LogLevelName): LevelWithSilent {
  return name in LEVEL_ALIASES ? LEVEL_ALIASES[name as keyof typeof LEVEL_ALIASES] : (name as LevelWithSilent);
}

/**
 * The level of the logger that exists before the settings are read (it reports their refusal):
 * `LOG_LEVEL` when it is an accepted word, otherwise `info` — a bad value is refused by the settings
 * a moment later, on this logger's line.
 */
function bootLevel(): LevelWithSilent {
  const raw = process.env.LOG_LEVEL?.trim() ?? '';
  return (LOG_LEVEL_NAMES as readonly string[]).includes(raw) ? pinoLevel(raw as LogLevelName) : 'info';
}

/**
 * One JSON object per line: `level` by name, `time` (ISO 8601), `service`, `pid`, the fields bound
 * to the command or event being handled (see `withinLogContext`), the component (`context`), the
 * record's own fields and `message`. Every string a line is given goes through the secret scrubber,
 * which knows the environment's secret values (the service's event store and dead letters use the same).
 */
export function pinoOptions(service: string, level: LevelWithSilent, scrub: SecretScrubber = secretScrubber(secretValuesIn(process.env))): LoggerOptions {
  return {
    hooks: {
      logMethod(args, method) {
        const seen = new WeakSet<object>();
        method.apply(this, args.map((arg) => scrubbedArgument(arg, scrub, seen)) as Parameters<typeof method>);
      },
    },
    level,
    messageKey: 'message',
    base: { service, pid: process.pid },
    timestamp: pino.stdTimeFunctions.isoTime,
    formatters: { level: (label) => ({ level: label }) },
    redact: { paths: [...REDACTED_PATHS], censor },
    // A copy: pino merges the line's own fields into what the mixin returns.
    mixin: () => ({ ...logContext.getStore() }),
    serializers: { err: pino.stdSerializers.err, error: pino.stdSerializers.err },
  };
}

/** A logger for the moments before the application exists (a failed start). */
export function bootLogger(service: string, destination?: DestinationStream): pino.Logger {
  const options = pinoOptions(service, bootLevel());
  return destination ? pino(options, destination) : pino(options);
}

/**
 * Nest's own lines before the service's logger exists — the start of the application and, when it
 * does not start, Nest's report of why — as JSON lines of a boot logger, not Nest's colored text.
 * Nest passes the component last (`context`); an error is logged with its message and stack.
 */
export function nestBootLogger(log: pino.Logger): LoggerService {
  const write =
    (level: 'info' | 'error' | 'warn' | 'debug' | 'trace' | 'fatal') =>
    (message: unknown, ...params: unknown[]): void => {
      const context = params.length > 0 && typeof params[params.length - 1] === 'string' ? (params[params.length - 1] as string) : 'nest';
      if (message instanceof Error) log[level]({ context, error: message }, message.message);
      else log[level]({ context }, typeof message === 'string' ? message : JSON.stringify(message));
    };
  return { log: write('info'), error: write('error'), warn: write('warn'), debug: write('debug'), verbose: write('trace'), fatal: write('fatal') };
}

/** Requests not logged: the probes, and Prometheus' scrapes of /metrics. */
const PROBES = new Set(['/health', '/ready', '/metrics']);

/** Where the service's log level comes from: the module holding the validated settings, the value to inject, and the level in it. */
export interface LogLevelSource {
  imports: NonNullable<DynamicModule['imports']>;
  inject: InjectionToken[];
  level: (settings: Record<string, unknown>) => LevelWithSilent;
}

/**
 * The service's `LoggerModule` (nestjs-pino): every `PinoLogger` and Nest's own logger write
 * through one pino instance. An HTTP request is logged when it completes (health and readiness
 * probes are not) and its lines carry the caller's `x-correlation-id`, or a fresh one.
 */
export function loggingModule(service: string, levelFrom: LogLevelSource) {
  return LoggerModule.forRootAsync({
    imports: levelFrom.imports,
    inject: levelFrom.inject,
    useFactory: (settings: Record<string, unknown>): Params => ({
      pinoHttp: {
        ...pinoOptions(service, levelFrom.level(settings)),
        quietReqLogger: true,
        customAttributeKeys: { reqId: 'correlationId' },
        genReqId: (req: IncomingMessage) => {
          const given = req.headers['x-correlation-id'];
          return (Array.isArray(given) ? given[0] : given) || randomUUID();
        },
        autoLogging: { ignore: (req: IncomingMessage) => PROBES.has((req.url ?? '').split('?')[0] ?? '') },
      },
    }),
  });
}

/** The fields of the command or event being handled; pino's `mixin` adds them to each line. */
const logContext = new AsyncLocalStorage<Bindings>();

/**
 * Runs `work` with `bindings` (correlation id, command or event …) on every line logged while it
 * runs, through any logger of the service, in this call stack and every promise it starts. The
 * fields are read when a line is written: a command that logs nothing costs no child logger (making
 * one per command, as nestjs-pino's `runInContext` does, was a few per cent of a busy service's CPU).
 */
export function withinLogContext<T>(bindings: Bindings, work: () => Promise<T>): Promise<T> {
  return logContext.run(bindings, work);
}

/** The `(message, fields)` logger the framework-free libraries take (messaging, git), over a PinoLogger. */
export interface ComponentLogger {
  log(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}

export function componentLogger(logger: PinoLogger, component: string): ComponentLogger {
  return {
    log: (message, fields = {}) => logger.info({ context: component, ...fields }, message),
    warn: (message, fields = {}) => logger.warn({ context: component, ...fields }, message),
    error: (message, fields = {}) => logger.error({ context: component, ...fields }, message),
  };
}
