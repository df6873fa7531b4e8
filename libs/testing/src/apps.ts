import { existsSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Naming } from '@gantry/contracts';
import { eventually, startNodeProcess, testDatabaseUrl, testNatsUrl, type ChildService } from './index.js';

/** The repository's root: this file is libs/testing/src/apps.ts, or libs/testing/dist/apps.js once built. */
const repositoryRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');

export const apps = ['job-service', 'workflow-engine', 'pr-service', 'worktree-service', 'runner'] as const;
export type App = (typeof apps)[number];

/** The compiled entry point of an app (`npx nx run <app>:build` writes it). */
export function appEntry(app: App): string {
  return path.join(repositoryRoot, 'apps', app, 'dist', 'main.js');
}

/** Test processes that pick ports at once (jest's workers): each has its own band of ports. */
const PORT_BANDS = 8;
const LOWEST_PORT = 10_000;
let nextInBand: number | undefined;

/**
 * A TCP port nobody listens on right now, on 127.0.0.1, for a process a test starts. Seconds can pass
 * between the pick and that process's own bind (a loaded machine loading a service's bundle), and a
 * port the kernel hands out (a bind to port 0, an outgoing connection) could go to another test
 * meanwhile: its service would then answer this one's readiness probe, and this one's service would
 * fail to bind. So each test process picks in turn from its own band of ports below the kernel's
 * ephemeral range (`net.ipv4.ip_local_port_range`), which the kernel never hands out, checking that
 * each is free; jest's worker id names the band. Where there is no room below that range, the
 * kernel picks.
 */
export async function freePort(): Promise<number> {
  const bandSize = Math.floor((ephemeralPortsFrom() - LOWEST_PORT) / PORT_BANDS);
  if (bandSize < 100) return listenAndClose(0);
  const band = (Number(process.env['JEST_WORKER_ID']) || process.pid) % PORT_BANDS;
  const start = LOWEST_PORT + band * bandSize;
  for (let tries = 0; tries < bandSize; tries++) {
    // From a random place at first: two runs of the same worker id (a test run beside another) differ.
    nextInBand = ((nextInBand ?? Math.floor(Math.random() * bandSize)) + 1) % bandSize;
    const port = start + nextInBand;
    if (await listenAndClose(port).then(() => true, () => false)) return port;
  }
  return listenAndClose(0);
}

/** The lowest port of the kernel's ephemeral range: Linux's, or the usual 32768 elsewhere. */
function ephemeralPortsFrom(): number {
  try {
    const low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    return Number.isInteger(low) && low > 0 ? low : 32_768;
  } catch {
    return 32_768;
  }
}

/** Binds `port` on 127.0.0.1 (0: the kernel picks), closes it again and answers the port. */
function listenAndClose(port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.on('error', reject);
    server.listen(port, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

export interface RunningProcess extends ChildService {
  port: number;
  /** http://127.0.0.1:<port> */
  url: string;
}

export interface RunningApp extends RunningProcess {
  app: App;
}

export interface StartAppOptions {
  /** The app's database schema (GANTRY_DB_SCHEMA). */
  schema: string;
  /** The subject root and stream prefix it shares with the rest of its world. */
  naming: Naming;
  /** More settings; they win over the ones derived from the options. */
  env?: Record<string, string>;
  cwd?: string;
  /** Arguments to node itself, e.g. --cpu-prof. */
  nodeArgs?: string[];
  /** Resolve only once GET /ready answers 200 (default); false: as soon as the process runs. */
  waitReady?: boolean;
  /** How long to wait for /ready (default 120 s); a process that exits meanwhile is not waited for. */
  readyTimeoutMs?: number;
}

/**
 * Starts a compiled app as its own process — so that a test or a bench can SIGKILL it — on the
 * given schema and naming, the test servers (GANTRY_DATABASE_URL / GANTRY_NATS_URL or their
 * defaults) and a free port on 127.0.0.1, and waits for its /ready. An app that does not become
 * ready is killed, and the error carries the end of its output.
 */
export async function startApp(app: App, options: StartAppOptions): Promise<RunningApp> {
  return { ...(await startEntry(appEntry(app), app, options)), app };
}

/** `startApp` for any compiled service entry point (`label` names it in errors), e.g. a test's own service. */
export async function startEntry(entry: string, label: string, options: StartAppOptions): Promise<RunningProcess> {
  if (!existsSync(entry)) throw new Error(`${entry} is missing: build it first (\`npx nx run-many -t build\`; nx test does it first)`);
  const port = await freePort();
  const child = startNodeProcess(
    entry,
    {
      PORT: String(port),
      GANTRY_HTTP_HOST: '127.0.0.1',
      GANTRY_DATABASE_URL: testDatabaseUrl,
      GANTRY_NATS_URL: testNatsUrl,
      GANTRY_DB_SCHEMA: options.schema,
      GANTRY_SUBJECT_ROOT: options.naming.subjectRoot,
      GANTRY_STREAM_PREFIX: options.naming.streamPrefix,
      LOG_LEVEL: 'warn',
      ...options.env,
    },
    [],
    { cwd: options.cwd, nodeArgs: options.nodeArgs },
  );
  const url = `http://127.0.0.1:${port}`;
  if (options.waitReady !== false) {
    const exited = () => child.process.exitCode !== null || child.process.signalCode !== null;
    try {
      // A process that exits (a refused start) is not waited for until the timeout.
      const outcome = await eventually(async () => (exited() ? 'exited' : (await fetch(`${url}/ready`)).status === 200 && 'ready'), {
        what: `${label} ready`,
        // Generous: on a loaded machine a service can take tens of seconds just to load and connect.
        timeoutMs: options.readyTimeoutMs ?? 120_000,
        intervalMs: 100,
      });
      if (outcome === 'exited') throw new Error(`${label} exited before it was ready (code ${child.process.exitCode}, signal ${child.process.signalCode})`);
    } catch (error) {
      await child.kill('SIGKILL');
      throw new Error(`${String(error)}\n--- ${label} output ---\n${child.output().slice(-4000)}`);
    }
  }
  return { ...child, port, url };
}

/**
 * Starts a compiled app that is expected not to start (a bad setting): resolves with its exit code
 * and output once it exited, or with `started` (after killing it) once it answered /ready instead.
 */
export async function startAppExpectingExit(app: App, options: StartAppOptions): Promise<{ code: number | null; started: boolean; output: string }> {
  const child = await startApp(app, { ...options, waitReady: false });
  const outcome = await eventually(
    async () => {
      if (child.process.exitCode !== null || child.process.signalCode !== null) return 'exited';
      const ready = await fetch(`${child.url}/ready`).then((r) => r.status === 200, () => false);
      return ready ? 'started' : undefined;
    },
    { what: `${app} to exit or become ready`, timeoutMs: 60_000, intervalMs: 100 },
  );
  const code = await child.kill('SIGKILL');
  return { code, started: outcome === 'started', output: child.output() };
}

/** The line a service logs when it does not start (the reason in its `error`), or a note with the output's tail. */
export function startupRefusal(output: string): string {
  const line = output.split('\n').find((l) => l.includes('service failed to start'));
  return line ?? `(no "service failed to start" line in)\n${output.slice(-3000)}`;
}

/** A series' value (`name{labels}` as /metrics writes it) on a running service's /metrics, 0 when it has none. */
export async function metricOf(service: Pick<RunningProcess, 'url'>, series: string): Promise<number> {
  const text = await (await fetch(`${service.url}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line ? Number(line.slice(series.length + 1)) : 0;
}
