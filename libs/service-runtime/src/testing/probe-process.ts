// Test-only: starts the probe service (probe-service.ts, built) as its own process.
import { createServer } from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Naming } from '@gantry/contracts';
import { eventually, startNodeProcess, testDatabaseUrl, testNatsUrl, type ChildService } from '@gantry/testing';

/** The compiled probe (`npx nx run service-runtime:build`). */
export const probeEntry = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../dist/testing/probe-service.js');

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

export interface ProbeProcess extends ChildService {
  url: string;
  ready(): Promise<{ status: number; body: { status: string; info?: Record<string, unknown>; error?: Record<string, unknown>; details: Record<string, Record<string, unknown>> } }>;
}

/** The probe on the test's schema and naming; resolves once it listens (not once it is ready). */
export async function startProbe(options: { schema: string; naming: Naming; env?: Record<string, string> }): Promise<ProbeProcess> {
  const port = await freePort();
  const child = startNodeProcess(probeEntry, {
    PORT: String(port),
    GANTRY_HTTP_HOST: '127.0.0.1',
    GANTRY_DATABASE_URL: testDatabaseUrl,
    GANTRY_NATS_URL: testNatsUrl,
    GANTRY_DB_SCHEMA: options.schema,
    GANTRY_SUBJECT_ROOT: options.naming.subjectRoot,
    GANTRY_STREAM_PREFIX: options.naming.streamPrefix,
    LOG_LEVEL: 'info',
    ...options.env,
  });
  const url = `http://127.0.0.1:${port}`;
  try {
    await eventually(async () => (await fetch(`${url}/health`)).status === 200, { what: 'the probe to listen', timeoutMs: 30_000, intervalMs: 50 });
  } catch (error) {
    await child.kill('SIGKILL');
    throw new Error(`${String(error)}\n--- probe output ---\n${child.output().slice(-4000)}`);
  }
  return {
    ...child,
    url,
    ready: async () => {
      const response = await fetch(`${url}/ready`);
      return { status: response.status, body: (await response.json()) as Awaited<ReturnType<ProbeProcess['ready']>>['body'] };
    },
  };
}
