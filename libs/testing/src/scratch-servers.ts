import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdir, mkdtemp, rm, chown } from 'node:fs/promises';
import { createServer, connect as tcpConnect, type Socket } from 'node:net';
import { tmpdir, userInfo } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { freePort } from './apps.js';

const run = promisify(execFile);

/**
 * Servers a test starts on a spare port for itself, so it may stop and start them to see what a
 * service does while NATS or PostgreSQL is away. The shared servers on 4222 and 5432 are never
 * stopped by a test.
 */

async function acceptsConnections(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = tcpConnect({ host: '127.0.0.1', port });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

async function waitForPort(port: number, open: boolean, what: string, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while ((await acceptsConnections(port)) !== open) {
    if (Date.now() > deadline) throw new Error(`${what} did not ${open ? 'open' : 'close'} port ${port}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

export interface ScratchServer {
  readonly url: string;
  readonly port: number;
  /** Stops the server (SIGKILL: like a crash or a pulled cable); its data stays. */
  stop(): Promise<void>;
  /** Starts it again on the same port with the same data. */
  start(): Promise<void>;
  /** Stops it for good and removes its data. */
  remove(): Promise<void>;
}

export interface ScratchNats extends ScratchServer {
  /** Stops it, empties its store directory and starts it again: every stream and consumer gone. */
  startEmpty(): Promise<void>;
}

/** A NATS server with JetStream on a spare port, its store in a temporary directory. */
export async function startScratchNats(): Promise<ScratchNats> {
  const port = await freePort();
  const dir = await mkdtemp(path.join(tmpdir(), 'gantry-nats-'));
  let child: ChildProcess | null = null;
  const start = async () => {
    if (child) return;
    const started = spawn('nats-server', ['-a', '127.0.0.1', '-p', String(port), '-js', '-sd', dir], { stdio: 'ignore' });
    child = started;
    started.once('exit', () => {
      if (child === started) child = null;
    });
    await waitForPort(port, true, 'nats-server');
  };
  const stop = async () => {
    const running = child;
    if (!running) return;
    const exited = new Promise((resolve) => running.once('exit', resolve));
    running.kill('SIGKILL');
    await exited;
    child = null;
    await waitForPort(port, false, 'nats-server');
  };
  await start();
  return {
    url: `nats://127.0.0.1:${port}`,
    port,
    start,
    stop,
    startEmpty: async () => {
      await stop();
      await rm(dir, { recursive: true, force: true });
      await mkdir(dir);
      await start();
    },
    remove: async () => {
      await stop();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/**
 * A PostgreSQL cluster of its own (initdb into a temporary directory, trust authentication, database
 * `gantry`) on a spare port. PostgreSQL refuses to run as root, so as root it runs as `postgres`.
 */
export async function startScratchPostgres(): Promise<ScratchServer> {
  const port = await freePort();
  const dir = await mkdtemp(path.join(tmpdir(), 'gantry-pg-'));
  const data = path.join(dir, 'data');
  const asRoot = userInfo().uid === 0;
  if (asRoot) {
    const { stdout } = await run('id', ['-u', 'postgres']);
    const { stdout: gid } = await run('id', ['-g', 'postgres']);
    await chown(dir, Number(stdout.trim()), Number(gid.trim()));
  }
  const bin = async (name: string) => {
    const { stdout } = await run('sh', ['-c', `command -v ${name} || ls /usr/lib/postgresql/*/bin/${name} | tail -n 1`]);
    return stdout.trim().split('\n')[0]!;
  };
  const [initdb, pgCtl] = [await bin('initdb'), await bin('pg_ctl')];
  const asOwner = (file: string, args: string[]) => (asRoot ? run('runuser', ['-u', 'postgres', '--', file, ...args]) : run(file, args));
  await asOwner(initdb, ['-D', data, '-U', 'postgres', '-A', 'trust', '-E', 'UTF8']);
  const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off`;
  const start = async () => {
    if (await acceptsConnections(port)) return;
    await asOwner(pgCtl, ['-D', data, '-l', path.join(dir, 'log'), '-o', options, '-w', 'start']);
    await waitForPort(port, true, 'postgres');
  };
  const stop = async () => {
    if (!(await acceptsConnections(port))) return;
    await asOwner(pgCtl, ['-D', data, '-m', 'immediate', '-w', 'stop']);
    await waitForPort(port, false, 'postgres');
  };
  await start();
  const admin = new pg.Client({ connectionString: `postgres://postgres@127.0.0.1:${port}/postgres` });
  await admin.connect();
  try {
    await admin.query('CREATE DATABASE gantry');
  } finally {
    await admin.end();
  }
  return {
    url: `postgres://postgres@127.0.0.1:${port}/gantry`,
    port,
    start,
    stop,
    remove: async () => {
      await stop().catch(() => undefined);
      await rm(dir, { recursive: true, force: true });
    },
  };
}

export interface CuttableProxy {
  /** The target's URL with the proxy's address in its place. */
  readonly url: string;
  /** Drops every connection through it and refuses new ones (they are accepted and closed at once). */
  cut(): void;
  /**
   * Stops answering without closing anything, like a network partition or a frozen host: open
   * connections stay open and carry nothing either way, new ones are accepted and never answered.
   * What is sent meanwhile is lost, and a side that closes its end is not heard of until `restore`.
   */
  blackhole(): void;
  /**
   * Lets connections through again. After a blackhole, connections carry what is sent from now on
   * (a peer waiting for what was lost waits on), and one whose side closed meanwhile is closed on
   * the other side too, as each end's TCP keepalive finds when the network is back.
   */
  restore(): void;
  close(): Promise<void>;
}

type ProxyMode = 'open' | 'cut' | 'blackhole';

/**
 * A TCP proxy on a spare port in front of a shared server (`url`'s host and port), for a test that
 * takes the server away from one service only: cut, every connection through it is lost; blackholed,
 * nothing goes through and nothing is closed; restored, connections go through. The server itself
 * keeps running for everyone else.
 */
export async function startCuttableProxy(url: string): Promise<CuttableProxy> {
  const target = new URL(url);
  const sockets = new Set<Socket>();
  /** Pairs one of whose sides closed during a blackhole: the other side is closed at restore. */
  const closedInTheDark = new Set<() => void>();
  let mode: ProxyMode = 'open';
  const server = createServer((client) => {
    if (mode === 'cut') return void client.destroy();
    const upstream = tcpConnect({ host: target.hostname, port: Number(target.port) });
    let ended = false;
    const end = () => {
      if (ended) return;
      ended = true;
      closedInTheDark.delete(end);
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    const onClosed = () => (mode === 'blackhole' ? closedInTheDark.add(end) : end());
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on('error', onClosed);
      socket.on('close', onClosed);
    }
    // Data is forwarded only while the proxy is open; in a blackhole it is read and dropped.
    client.on('data', (chunk) => {
      if (mode === 'open' && !upstream.destroyed) upstream.write(chunk);
    });
    upstream.on('data', (chunk) => {
      if (mode === 'open' && !client.destroyed) client.write(chunk);
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const proxied = new URL(url);
  proxied.host = `127.0.0.1:${(server.address() as { port: number }).port}`;
  const cutAll = () => {
    mode = 'cut';
    for (const socket of sockets) socket.destroy();
  };
  return {
    url: proxied.toString(),
    cut: cutAll,
    blackhole: () => {
      mode = 'blackhole';
    },
    restore: () => {
      mode = 'open';
      for (const end of [...closedInTheDark]) end();
    },
    close: () => {
      cutAll();
      for (const end of [...closedInTheDark]) end();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

/**
 * A service that reaches a shared server through a proxy the test cuts, with what it needs: `start`
 * builds it on the proxy's url and registers, with `onClose`, each thing it made as soon as it exists.
 * `close` restores the proxy, so everything can stop in order, runs each registered close (the last
 * made first, all of them even if one fails) and closes the proxy. A start that fails undoes itself.
 */
export class CutOff<T> {
  private constructor(
    readonly proxy: CuttableProxy,
    readonly started: T,
    private readonly closes: Array<() => Promise<unknown>>,
  ) {}

  static async start<T>(url: string, start: (proxyUrl: string, onClose: (close: () => Promise<unknown>) => void) => Promise<T>): Promise<CutOff<T>> {
    const proxy = await startCuttableProxy(url);
    const closes: Array<() => Promise<unknown>> = [];
    try {
      return new CutOff(proxy, await start(proxy.url, (close) => closes.unshift(close)), closes);
    } catch (error) {
      await closeAll(proxy, closes).catch(() => undefined);
      throw error;
    }
  }

  close(): Promise<void> {
    return closeAll(this.proxy, this.closes);
  }
}

async function closeAll(proxy: CuttableProxy, closes: Array<() => Promise<unknown>>): Promise<void> {
  proxy.restore();
  const failures: unknown[] = [];
  for (const close of closes.splice(0)) await close().catch((error: unknown) => failures.push(error));
  await proxy.close();
  if (failures.length > 0) throw failures[0];
}
