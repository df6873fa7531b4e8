import { randomBytes } from 'node:crypto';
import { spawn, type ChildProcess } from 'node:child_process';
import pg from 'pg';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import type { Naming } from '@gantry/contracts';

export const testDatabaseUrl = process.env.GANTRY_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/gantry';
export const testNatsUrl = process.env.GANTRY_NATS_URL ?? 'nats://127.0.0.1:4222';

/** A name no other test file (or earlier run) uses: lower-case, schema- and subject-safe. */
export function uniqueName(label: string): string {
  const safe = label.toLowerCase().replace(/[^a-z0-9]+/g, '_').slice(0, 24);
  return `t_${safe}_${randomBytes(4).toString('hex')}`;
}

/** Subject root and stream prefix of one test file, so tests sharing one NATS never see each other. */
export function testNaming(name: string): Naming {
  return { subjectRoot: name, streamPrefix: `${name.toUpperCase()}_` };
}

export async function dropSchema(schema: string): Promise<void> {
  const client = new pg.Client({ connectionString: testDatabaseUrl });
  await client.connect();
  try {
    await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  } finally {
    await client.end();
  }
}

export async function connectTestNats(name = 'gantry-test'): Promise<NatsConnection> {
  return connect({ servers: testNatsUrl, name });
}

/** Removes every stream whose name starts with the test's prefix. */
export async function deleteStreams(nc: NatsConnection, prefix: string): Promise<void> {
  const jsm = await jetstreamManager(nc);
  for await (const stream of jsm.streams.list()) {
    if (stream.config.name.startsWith(prefix)) await jsm.streams.delete(stream.config.name).catch(() => undefined);
  }
}

/**
 * How long `eventually` waits unless told: what takes a second on a quiet machine takes several on CI's
 * two cores at a load of 8 (four test files at once, each with its service processes), and a wait
 * that runs out there fails a test that is right. Half of a test's default time (jest.preset.cjs), so
 * a wait that does run out still names what it waited for.
 */
export const EVENTUALLY_TIMEOUT_MS = 30_000;

/** Polls until the check holds or the deadline passes; the failure message names what was awaited. */
export async function eventually<T>(
  check: () => Promise<T | undefined | null | false> | T | undefined | null | false,
  options: { timeoutMs?: number; intervalMs?: number; what?: string } = {},
): Promise<T> {
  const deadline = Date.now() + (options.timeoutMs ?? EVENTUALLY_TIMEOUT_MS);
  let last: unknown;
  for (;;) {
    try {
      const value = await check();
      if (value) return value as T;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${options.what ?? 'condition'}${last ? `: ${String(last)}` : ''}`);
    }
    await new Promise((r) => setTimeout(r, options.intervalMs ?? 50));
  }
}

export interface ChildService {
  process: ChildProcess;
  output: () => string;
  kill: (signal?: NodeJS.Signals) => Promise<number | null>;
}

/**
 * Starts a compiled entry point as its own process (tests that SIGKILL a service use this); `cwd`
 * defaults to ours, `nodeArgs` go to node itself (e.g. --cpu-prof).
 */
export function startNodeProcess(
  entry: string,
  env: Record<string, string>,
  args: string[] = [],
  options: { cwd?: string; nodeArgs?: string[] } = {},
): ChildService {
  const child = spawn(process.execPath, [...(options.nodeArgs ?? []), entry, ...args], {
    cwd: options.cwd,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  const keep = (chunk: Buffer) => {
    out = (out + chunk.toString()).slice(-200_000);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return {
    process: child,
    output: () => out,
    kill: async (signal = 'SIGTERM') => {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      return exited;
    },
  };
}

/** The JSON records a service process wrote to its output, one per line; any other line is skipped. */
export function logRecordsOf(output: string): Array<Record<string, unknown>> {
  return output.split('\n').flatMap((line) => {
    if (!line.startsWith('{')) return [];
    try {
      return [JSON.parse(line) as Record<string, unknown>];
    } catch {
      return [];
    }
  });
}

/**
 * Removes what one test file provisioned: its streams (by prefix) and, when given, its schema. The
 * schema is dropped even when the streams could not be removed (NATS slow or away); the failure is
 * reported after it.
 */
export async function removeTestNamespace(naming: Naming, schema?: string): Promise<void> {
  try {
    const nc = await connectTestNats('gantry-test-cleanup');
    try {
      await deleteStreams(nc, naming.streamPrefix);
    } finally {
      await nc.close();
    }
  } finally {
    if (schema) await dropSchema(schema);
  }
}

export { validatesAgainstContract } from './contract-events.js';
export * from './scratch-servers.js';
export * from './apps.js';
export * from './consumer-progress.js';
export * from './query-plans.js';
export * from './processes.js';
export * from './refused-appends.js';
