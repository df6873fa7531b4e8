import type { Naming } from '@gantry/contracts';

export interface ServiceConfig {
  service: string;
  databaseUrl: string;
  schema: string;
  natsUrl: string;
  naming: Naming;
  httpHost: string;
  port: number;
  streamReplicas: number;
  /** Concurrent commands share transactions (see EventStore); off unless GANTRY_GROUP_COMMIT is set. */
  groupCommit: { maxGroups: number; maxBatch: number } | null;
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
    groupCommit: parseGroupCommit(process.env.GANTRY_GROUP_COMMIT),
  };
}

/** The database URL without its password, for logs. */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = '***';
    return parsed.toString();
  } catch {
    return '(unparseable url)';
  }
}
