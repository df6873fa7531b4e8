import type { Naming } from '@gantry/contracts';

/** Injection token of the service's ServiceConfig. */
export const SERVICE_CONFIG = Symbol('gantry:service-config');

export interface ServiceConfig {
  service: string;
  databaseUrl: string;
  schema: string;
  natsUrl: string;
  naming: Naming;
  httpHost: string;
  port: number;
  streamReplicas: number;
  /** Commands a replica answers at once. */
  commandConcurrency: number;
  /** /ready fails once the oldest event waiting for the relay is older than this. */
  readyRelayMaxAgeMs: number;
  /** /ready fails once a durable consumer's oldest unprocessed event is older than this. */
  readyConsumerMaxLagMs: number;
  /** Concurrent commands share transactions (see EventStore); off unless GANTRY_GROUP_COMMIT is set. */
  groupCommit: { maxGroups: number; maxBatch: number } | null;
  /** Age and size limits of the streams this service creates. */
  streamLimits: { maxAgeMs: number; maxBytes: number };
  /** What the pruning job deletes, and how often it runs (see RetentionPruner). */
  retention: { receiptTtlMs: number; deadLetterRetentionMs: number; pruneIntervalMs: number };
}

const DAY_MS = 24 * 60 * 60 * 1000;

/** A whole number ≥ min from the environment, or the fallback when unset; anything else stops the service at boot. */
function wholeNumber(name: string, fallback: number, min: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw.trim() === '') return fallback;
  const value = Number(raw);
  if (!Number.isSafeInteger(value) || value < min) throw new Error(`${name} must be a whole number ≥ ${min}, got ${JSON.stringify(raw)}`);
  return value;
}

/** `GANTRY_GROUP_COMMIT=<groups>x<batch>`, e.g. `4x32`. */
function parseGroupCommit(value: string | undefined): ServiceConfig['groupCommit'] {
  if (!value) return null;
  const match = /^(\d+)x(\d+)$/.exec(value.trim());
  if (!match || Number(match[1]) < 1 || Number(match[2]) < 1) {
    throw new Error(`GANTRY_GROUP_COMMIT must look like 4x32 (transactions x commands each), got ${JSON.stringify(value)}`);
  }
  return { maxGroups: Number(match[1]), maxBatch: Number(match[2]) };
}

function env(name: string, fallback: string): string {
  const value = process.env[name];
  return value === undefined || value === '' ? fallback : value;
}

/** Everything a service needs from its environment; see docs/DEVELOPING.md for the table. */
export function loadServiceConfig(service: string, defaults: { schema: string; port: number }): ServiceConfig {
  const port = Number(env('PORT', String(defaults.port)));
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`PORT must be a port number, got ${process.env.PORT}`);
  return {
    service,
    databaseUrl: env('GANTRY_DATABASE_URL', 'postgres://postgres@127.0.0.1:5432/gantry'),
    schema: env('GANTRY_DB_SCHEMA', defaults.schema),
    natsUrl: env('GANTRY_NATS_URL', 'nats://127.0.0.1:4222'),
    naming: {
      subjectRoot: env('GANTRY_SUBJECT_ROOT', 'gantry'),
      streamPrefix: env('GANTRY_STREAM_PREFIX', 'GANTRY_'),
    },
    httpHost: env('GANTRY_HTTP_HOST', '0.0.0.0'),
    port,
    streamReplicas: Number(env('GANTRY_STREAM_REPLICAS', '1')),
    commandConcurrency: wholeNumber('GANTRY_COMMAND_CONCURRENCY', 256, 1),
    readyRelayMaxAgeMs: Number(env('GANTRY_READY_RELAY_MAX_AGE_MS', '30000')),
    readyConsumerMaxLagMs: Number(env('GANTRY_READY_CONSUMER_MAX_LAG_MS', '60000')),
    groupCommit: parseGroupCommit(process.env.GANTRY_GROUP_COMMIT),
    streamLimits: {
      maxAgeMs: wholeNumber('GANTRY_STREAM_MAX_AGE_MS', 7 * DAY_MS, 0),
      maxBytes: wholeNumber('GANTRY_STREAM_MAX_BYTES', -1, -1),
    },
    retention: {
      receiptTtlMs: wholeNumber('GANTRY_RECEIPT_TTL_MS', 7 * DAY_MS, 1),
      deadLetterRetentionMs: wholeNumber('GANTRY_DEAD_LETTER_RETENTION_MS', 30 * DAY_MS, 1),
      pruneIntervalMs: wholeNumber('GANTRY_PRUNE_INTERVAL_MS', 10 * 60 * 1000, 10),
    },
  };
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
