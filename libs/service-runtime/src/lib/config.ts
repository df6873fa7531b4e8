import { isIP } from 'node:net';
import type { LevelWithSilent } from 'pino';
import type { z } from 'zod';
import { namingRules, type Naming } from '@gantry/contracts';
import { isSchemaName, SCHEMA_NAME_RULE, type DatabaseTimeouts } from '@gantry/eventstore';
import { LOG_LEVEL_NAMES, pinoLevel } from './logging.js';
import { defineSettings, setting, type SettingsPart } from './settings.js';

/** Injection token of the service's ServiceConfig. */
export const SERVICE_CONFIG = Symbol('gantry:service-config');

/** What every service takes from its environment (docs/configuration.md). */
export interface ServiceConfig {
  service: string;
  databaseUrl: string;
  schema: string;
  /** Connections the service's pool opens at most (its relay's connection is its own). */
  databasePoolMax: number;
  /** How long the pool's connections wait for a PostgreSQL that stops answering (docs/operations.md). */
  databaseTimeouts: DatabaseTimeouts;
  natsUrl: string;
  naming: Naming;
  httpHost: string;
  port: number;
  /** Bearer token `POST /commands/*` asks for; required when HTTP is bound off the loopback interface. */
  httpToken: string | null;
  /** How long an idle kept-alive HTTP connection stays open (GANTRY_HTTP_KEEP_ALIVE_MS). */
  httpKeepAliveMs: number;
  streamReplicas: number;
  /** Commands a replica answers at once. */
  commandConcurrency: number;
  /** How long SIGTERM waits for in-flight work before the process exits 1. */
  shutdownGraceMs: number;
  /** /ready fails once the oldest event waiting for the relay is older than this. */
  readyRelayMaxAgeMs: number;
  /** /ready fails once a durable consumer's oldest unprocessed event is older than this. */
  readyConsumerMaxLagMs: number;
  /** Concurrent commands share transactions (see EventStore); off unless GANTRY_GROUP_COMMIT is set. */
  groupCommit: { maxGroups: number; maxBatch: number } | null;
  /** The level of the service's log (`LOG_LEVEL`, see docs/operations.md). */
  logLevel: LevelWithSilent;
  /** Age and size limits of the streams this service creates. */
  streamLimits: { maxAgeMs: number; maxBytes: number };
  /** What the pruning job deletes, and how often it runs (see RetentionPruner). */
  retention: { receiptTtlMs: number; deadLetterRetentionMs: number; pruneIntervalMs: number };
}

const DAY_MS = 24 * 60 * 60 * 1000;
/** The longest interval a Node timer holds: beyond it, setInterval fires every millisecond. */
const MAX_TIMER_MS = 2 ** 31 - 1;
/** The longest age JetStream takes: it counts a stream's max_age in nanoseconds, in a signed 64-bit integer. */
const MAX_STREAM_AGE_MS = 9_223_372_036_854;
/** Shortest bearer token accepted: anything shorter is guessable. */
export const MIN_HTTP_TOKEN_LENGTH = 16;

/** 127.0.0.0/8, ::1 and localhost: reachable from this host only. */
export function isLoopbackHost(host: string): boolean {
  const bare = host.replace(/^\[|\]$/g, '');
  if (bare === 'localhost') return true;
  if (isIP(bare) === 4) return bare.startsWith('127.');
  if (isIP(bare) === 6) return bare === '::1' || /^::ffff:127\./i.test(bare);
  return false;
}

/**
 * GANTRY_SHUTDOWN_GRACE_MS: how long a stop may take before the process exits 1. Also read by the
 * parts whose own shutdown steps must end within it (the runner's).
 */
export const shutdownGraceSetting = () => setting.wholeNumber({ min: 0, max: 3_600_000, default: 30_000 });

/** A name (a schema, a subject root) given as text: refused, naming its rule, when `valid` says it is not one. */
function name(valid: (value: string) => boolean, rule: string, fallback: string): z.ZodType<string, string | undefined>;
function name(valid: (value: string) => boolean, rule: string): z.ZodType<string | undefined, string | undefined>;
function name(valid: (value: string) => boolean, rule: string, fallback?: string): z.ZodType<string | undefined, string | undefined> {
  return (fallback === undefined ? setting.text() : setting.text(fallback)).refine((value) => value === undefined || valid(value), { message: rule });
}

const variables = {
  GANTRY_DATABASE_URL: setting.url({ protocols: ['postgres:', 'postgresql:'], default: 'postgres://postgres@127.0.0.1:5432/gantry' }),
  GANTRY_DB_SCHEMA: name(isSchemaName, SCHEMA_NAME_RULE),
  // At least 4: some work holds a connection while other work goes on (the PR service's
  // reconciliation holds its lock on one).
  GANTRY_DB_POOL_MAX: setting.wholeNumber({ min: 4, max: 1_000, default: 10 }),
  // Below the 10 s a caller waits for an answer by default, so that a command against a database
  // that stopped answering is answered UNAVAILABLE rather than timing out at its caller.
  GANTRY_DB_CONNECT_TIMEOUT_MS: setting.wholeNumber({ min: 100, max: 600_000, default: 5_000 }),
  GANTRY_DB_QUERY_TIMEOUT_MS: setting.wholeNumber({ min: 100, max: MAX_TIMER_MS, default: 8_000 }),
  GANTRY_DB_KEEPALIVE_MS: setting.wholeNumber({ min: 1_000, max: 3_600_000, default: 10_000 }),
  // 0: off. Long enough for a consumer's handler that works inside its transaction.
  GANTRY_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS: setting.wholeNumber({ min: 0, max: MAX_TIMER_MS, default: 600_000 }),
  GANTRY_NATS_URL: setting.url({ protocols: ['nats:', 'tls:', 'ws:', 'wss:'], default: 'nats://127.0.0.1:4222', list: true }),
  GANTRY_SUBJECT_ROOT: name(namingRules.subjectRoot.valid, namingRules.subjectRoot.rule, 'gantry'),
  GANTRY_STREAM_PREFIX: name(namingRules.streamPrefix.valid, namingRules.streamPrefix.rule, 'GANTRY_'),
  GANTRY_HTTP_HOST: setting.text('127.0.0.1'),
  GANTRY_HTTP_TOKEN: setting.secret(),
  // Longer than a load balancer keeps an idle connection to the service (60 s by default on AWS's
  // ALB): Node's own 5 s closes connections the balancer still sends requests on, and they fail (502).
  GANTRY_HTTP_KEEP_ALIVE_MS: setting.wholeNumber({ min: 1_000, max: 3_600_000, default: 65_000 }),
  PORT: setting.wholeNumber({ min: 0, max: 65_535 }),
  // A JetStream cluster holds at most five replicas of a stream.
  GANTRY_STREAM_REPLICAS: setting.wholeNumber({ min: 1, max: 5, default: 1 }),
  GANTRY_COMMAND_CONCURRENCY: setting.wholeNumber({ min: 1, max: 100_000, default: 256 }),
  GANTRY_SHUTDOWN_GRACE_MS: shutdownGraceSetting(),
  GANTRY_READY_RELAY_MAX_AGE_MS: setting.wholeNumber({ min: 1, default: 30_000 }),
  GANTRY_READY_CONSUMER_MAX_LAG_MS: setting.wholeNumber({ min: 1, default: 60_000 }),
  GANTRY_GROUP_COMMIT: setting.text(),
  GANTRY_STREAM_MAX_AGE_MS: setting.wholeNumber({ min: 0, max: MAX_STREAM_AGE_MS, default: 7 * DAY_MS }),
  GANTRY_STREAM_MAX_BYTES: setting.wholeNumber({ min: -1, default: -1 }),
  GANTRY_RECEIPT_TTL_MS: setting.wholeNumber({ min: 1, default: 7 * DAY_MS }),
  GANTRY_DEAD_LETTER_RETENTION_MS: setting.wholeNumber({ min: 1, default: 30 * DAY_MS }),
  GANTRY_PRUNE_INTERVAL_MS: setting.wholeNumber({ min: 10, max: MAX_TIMER_MS, default: 10 * 60 * 1000 }),
  LOG_LEVEL: setting.oneOf(LOG_LEVEL_NAMES, 'info'),
};

/**
 * The runtime's part of a service's settings. `commandsOverHttp`: the service answers
 * `POST /commands/*`, so HTTP off the loopback interface needs GANTRY_HTTP_TOKEN.
 */
export function serviceSettings(options: { service: string; schema: string; port: number; commandsOverHttp: boolean }): SettingsPart<ServiceConfig, typeof variables> {
  return defineSettings({
    name: 'runtime',
    token: SERVICE_CONFIG,
    variables,
    build(v, refuse) {
      const host = v.GANTRY_HTTP_HOST;
      if (!/^[A-Za-z0-9.:[\]-]+$/.test(host)) refuse('GANTRY_HTTP_HOST', 'must be an IP address or a host name');
      // A consumer's event comes back for as long as its stream holds it (a handler that failed, a
      // database away), and its handler sends its commands again under the same keys: their receipts
      // must still answer (docs/architecture.md, "How late a command comes again").
      if (v.GANTRY_STREAM_MAX_AGE_MS > 0 && v.GANTRY_RECEIPT_TTL_MS < v.GANTRY_STREAM_MAX_AGE_MS) {
        refuse(
          'GANTRY_RECEIPT_TTL_MS',
          `(${v.GANTRY_RECEIPT_TTL_MS} ms) must be at least GANTRY_STREAM_MAX_AGE_MS (${v.GANTRY_STREAM_MAX_AGE_MS} ms): an event handed back to a consumer ` +
            'after its receipts were pruned would have the commands its handler had sent done a second time',
        );
      }
      const token = v.GANTRY_HTTP_TOKEN ?? null;
      if (token !== null && token.length < MIN_HTTP_TOKEN_LENGTH) refuse('GANTRY_HTTP_TOKEN', `must be at least ${MIN_HTTP_TOKEN_LENGTH} characters`);
      if (options.commandsOverHttp && token === null && !isLoopbackHost(host)) {
        refuse('GANTRY_HTTP_TOKEN', 'is required when GANTRY_HTTP_HOST is not a loopback address (POST /commands/* would be open to the network)');
      }
      return {
        service: options.service,
        databaseUrl: v.GANTRY_DATABASE_URL,
        schema: v.GANTRY_DB_SCHEMA ?? options.schema,
        databasePoolMax: v.GANTRY_DB_POOL_MAX,
        databaseTimeouts: {
          connectMs: v.GANTRY_DB_CONNECT_TIMEOUT_MS,
          queryMs: v.GANTRY_DB_QUERY_TIMEOUT_MS,
          keepAliveMs: v.GANTRY_DB_KEEPALIVE_MS,
          idleInTransactionMs: v.GANTRY_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS,
        },
        natsUrl: v.GANTRY_NATS_URL,
        naming: { subjectRoot: v.GANTRY_SUBJECT_ROOT, streamPrefix: v.GANTRY_STREAM_PREFIX },
        httpHost: host,
        port: v.PORT ?? options.port,
        httpToken: token,
        httpKeepAliveMs: v.GANTRY_HTTP_KEEP_ALIVE_MS,
        streamReplicas: v.GANTRY_STREAM_REPLICAS,
        commandConcurrency: v.GANTRY_COMMAND_CONCURRENCY,
        shutdownGraceMs: v.GANTRY_SHUTDOWN_GRACE_MS,
        readyRelayMaxAgeMs: v.GANTRY_READY_RELAY_MAX_AGE_MS,
        readyConsumerMaxLagMs: v.GANTRY_READY_CONSUMER_MAX_LAG_MS,
        groupCommit: groupCommitOf(v.GANTRY_GROUP_COMMIT, refuse),
        logLevel: pinoLevel(v.LOG_LEVEL),
        streamLimits: { maxAgeMs: v.GANTRY_STREAM_MAX_AGE_MS, maxBytes: v.GANTRY_STREAM_MAX_BYTES },
        retention: {
          receiptTtlMs: v.GANTRY_RECEIPT_TTL_MS,
          deadLetterRetentionMs: v.GANTRY_DEAD_LETTER_RETENTION_MS,
          pruneIntervalMs: v.GANTRY_PRUNE_INTERVAL_MS,
        },
      };
    },
  });
}

/** `GANTRY_GROUP_COMMIT=<groups>x<batch>`, e.g. `4x32`. */
function groupCommitOf(value: string | undefined, refuse: (variable: 'GANTRY_GROUP_COMMIT', problem: string) => never): ServiceConfig['groupCommit'] {
  if (value === undefined) return null;
  const match = /^(\d+)x(\d+)$/.exec(value);
  if (!match || Number(match[1]) < 1 || Number(match[2]) < 1) refuse('GANTRY_GROUP_COMMIT', 'must look like 4x32 (transactions x commands each)');
  return { maxGroups: Number(match[1]), maxBatch: Number(match[2]) };
}

/**
 * A server URL fit for logs: no password, and no token (a NATS token sits where a user name would).
 * Several URLs may be given comma-separated (NATS servers).
 */
export function redactUrl(url: string): string {
  if (url.includes(',')) return url.split(',').map((one) => redactUrl(one.trim())).join(',');
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = '***';
    else if (parsed.username) parsed.username = '***';
    return parsed.toString();
  } catch {
    return '(unparseable url)';
  }
}
