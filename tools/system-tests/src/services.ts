import { createServer } from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startNodeProcess, eventually, testDatabaseUrl, testNatsUrl, type ChildService } from '@gantry/testing';
import type { Naming } from '@gantry/contracts';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');

export const apps = ['job-service', 'workflow-engine', 'pr-service', 'worktree-service', 'runner'] as const;
export type App = (typeof apps)[number];

export function entryOf(app: App): string {
  return path.join(root, 'apps', app, 'dist', 'main.js');
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

export interface RunningApp extends ChildService {
  app: App;
  port: number;
  url: string;
}

/** Starts a compiled app as its own process with the test's schema and naming; waits for /ready. */
export async function startApp(app: App, options: { schema: string; naming: Naming; env?: Record<string, string> }): Promise<RunningApp> {
  const port = await freePort();
  const child = startNodeProcess(entryOf(app), {
    PORT: String(port),
    GANTRY_HTTP_HOST: '127.0.0.1',
    GANTRY_DATABASE_URL: testDatabaseUrl,
    GANTRY_NATS_URL: testNatsUrl,
    GANTRY_DB_SCHEMA: options.schema,
    GANTRY_SUBJECT_ROOT: options.naming.subjectRoot,
    GANTRY_STREAM_PREFIX: options.naming.streamPrefix,
    LOG_LEVEL: 'warn',
    ...options.env,
  });
  const url = `http://127.0.0.1:${port}`;
  try {
    await eventually(async () => (await fetch(`${url}/ready`)).status === 200, { what: `${app} ready`, timeoutMs: 30_000, intervalMs: 100 });
  } catch (error) {
    await child.kill('SIGKILL');
    throw new Error(`${String(error)}\n--- ${app} output ---\n${child.output().slice(-4000)}`);
  }
  return { ...child, app, port, url };
}
