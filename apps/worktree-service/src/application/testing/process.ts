import { createServer } from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { eventually, startNodeProcess, testDatabaseUrl, testNatsUrl, type ChildService } from '@gantry/testing';
import type { TestWorld } from './world.js';

/** The compiled service (`npx nx run worktree-service:build`), started as its own process so a test can SIGKILL it. */
export const serviceEntry = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../dist/main.js');

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

export interface ServiceProcess extends ChildService {
  url: string;
}

/** Starts the service process on the world's schema, naming and root; with `waitReady`, resolves once /ready is 200. */
export async function startServiceProcess(world: TestWorld, env: Record<string, string> = {}, waitReady = true, options: { cwd?: string } = {}): Promise<ServiceProcess> {
  const port = await freePort();
  const child = startNodeProcess(
    serviceEntry,
    {
      PORT: String(port),
      GANTRY_HTTP_HOST: '127.0.0.1',
      GANTRY_DATABASE_URL: testDatabaseUrl,
      GANTRY_NATS_URL: testNatsUrl,
      LOG_LEVEL: 'warn',
      ...world.env(env),
    },
    [],
    options,
  );
  const url = `http://127.0.0.1:${port}`;
  if (waitReady) {
    try {
      await eventually(async () => (await fetch(`${url}/ready`)).status === 200, { what: 'worktree-service ready', timeoutMs: 30_000, intervalMs: 100 });
    } catch (error) {
      await child.kill('SIGKILL');
      throw new Error(`${String(error)}\n--- output ---\n${child.output().slice(-4000)}`);
    }
  }
  return { ...child, url };
}
