import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import pg from 'pg';
import { DEFAULT_DATABASE_TIMEOUTS, reportingConnectFailure, sideConnectionTimeouts, type DatabaseTimeouts } from './database.js';

/*
 * The process epoch and its liveness (docs/workflow-engine.md, AC-L1, AC-L2; docs/worktrees.md,
 * "Replicas"). Each process start mints a random epoch and holds a session-level advisory lock keyed
 * by it on a connection of its own, for as long as the process lives, and registers the epoch in a
 * table of the service's. An epoch is stale exactly when that lock can be taken: the process (its
 * session) is gone. No lease, no timeout. Peers are watched by waiting on their locks, so a survivor
 * learns of a death the moment PostgreSQL ends the dead session.
 */

export interface EpochLog {
  log(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}

export interface ProcessEpochOptions {
  databaseUrl: string;
  schema: string;
  pool: pg.Pool;
  log: EpochLog;
  /** Called when the lock connection is lost: our claims are stale to everyone from now on. */
  onLockLost: (error: unknown) => void;
  /**
   * The service's names: `table` (epoch uuid, started_at, pid, host) lists its processes, `lock` and
   * `channel` prefix the epoch locks and the announcement channel, `applicationName` names the sessions.
   */
  names: { table: string; lock: string; channel: string; applicationName: string };
  /**
   * Bounds on opening and keeping its connections (DatabaseTimeouts; unset ones take the defaults).
   * Its waits on a peer's lock have none; `queryMs` bounds its own lock and registration at start.
   * `keepAliveMs` also paces the lock connection's heartbeat.
   */
  timeouts?: Partial<DatabaseTimeouts>;
}

/**
 * The DDL of a service's table of processes (`names.table`): one row per live epoch. The services'
 * migrations create it under their own table names with this statement.
 */
export function processTableDdl(table: string): string {
  return `
      CREATE TABLE ${table} (
        epoch       uuid PRIMARY KEY,
        started_at  timestamptz NOT NULL DEFAULT now(),
        pid         integer NOT NULL,
        host        text NOT NULL
      )`;
}

export class ProcessEpoch {
  readonly epoch = randomUUID();
  private readonly waiters = new Map<string, pg.Client>();
  private closing = false;
  private heartbeat: NodeJS.Timeout | null = null;

  private constructor(
    private readonly options: ProcessEpochOptions,
    private readonly lockClient: pg.Client,
  ) {}

  /** Takes this process's epoch lock and registers the epoch; the engine does nothing before this holds. */
  static async start(options: ProcessEpochOptions): Promise<ProcessEpoch> {
    const client = newClient(options);
    client.on('error', () => undefined); // before the lock is held, reported by the query that fails
    await reportingConnectFailure(options.databaseUrl, () => client.connect());
    const epoch = new ProcessEpoch(options, client);
    client.on('error', (error) => epoch.lost(error));
    client.on('end', () => epoch.lost(new Error('the epoch lock connection ended')));
    // Its own lock (a fresh epoch's: nobody else takes it) and its registration are answered within
    // the statement bound, like the pool's: a database that stops answering once the connection is
    // open fails the start as unreachable rather than holding it.
    try {
      await reportingConnectFailure(options.databaseUrl, async () => {
        await client.query(bounded(options, `SELECT pg_advisory_lock(hashtextextended($1, 0))`, [epoch.lockName(epoch.epoch)]));
        await client.query(bounded(options, `INSERT INTO ${options.names.table} (epoch, pid, host) VALUES ($1, $2, $3)`, [epoch.epoch, process.pid, hostname()]));
      });
    } catch (error) {
      epoch.closing = true;
      dropConnection(client);
      throw error;
    }
    epoch.beat();
    return epoch;
  }

  /**
   * The lock connection's heartbeat. A connection whose server stops answering without closing it
   * (a partition, a frozen host) reports nothing: the process would go on believing it holds its
   * epoch while, once the server's keepalive ends the session, peers take its lock and its entries
   * over. So every `keepAliveMs` the connection is asked a trivial query; one not answered within
   * `keepAliveMs` more means the lock is lost (the server ends the session after `keepAliveMs` and
   * ten probes a second apart: database.ts, sessionSettings). The socket is closed, so that a
   * session still alive on the server ends with it.
   */
  private beat(): void {
    const every = { ...DEFAULT_DATABASE_TIMEOUTS, ...this.options.timeouts }.keepAliveMs;
    if (every <= 0 || this.closing) return;
    this.heartbeat = setTimeout(() => {
      const silent = setTimeout(() => {
        this.lost(new Error(`the epoch lock connection did not answer within ${every} ms`));
        dropConnection(this.lockClient);
      }, every);
      silent.unref();
      this.lockClient.query('SELECT 1').then(
        () => {
          clearTimeout(silent);
          this.beat();
        },
        () => clearTimeout(silent), // the connection's 'error' or 'end' reports the loss
      );
    }, every);
    this.heartbeat.unref();
  }

  private lockName(epoch: string): string {
    return `${this.options.names.lock}:${this.options.schema}:${epoch}`;
  }

  private get channel(): string {
    return `${this.options.names.channel}_${this.options.schema}`.slice(0, 63);
  }

  private lost(error: unknown): void {
    if (this.closing) return;
    this.closing = true;
    this.options.onLockLost(error);
  }

  /** AC-L1: stale exactly when the epoch's lock can be taken (taken and released at once, on one connection). */
  async isGone(epoch: string): Promise<boolean> {
    if (epoch === this.epoch) return false;
    const client = await this.options.pool.connect();
    try {
      const { rows } = await client.query<{ got: boolean }>(`SELECT pg_try_advisory_lock(hashtextextended($1, 0)) AS got`, [this.lockName(epoch)]);
      if (rows[0]!.got) await client.query(`SELECT pg_advisory_unlock(hashtextextended($1, 0))`, [this.lockName(epoch)]);
      return rows[0]!.got;
    } finally {
      client.release();
    }
  }

  /**
   * The other registered epochs whose process is alive now; the rows of those gone are removed when
   * `forgetGone` (a service that takes nothing over from them).
   */
  async livePeers(options: { forgetGone: boolean }): Promise<string[]> {
    const { rows } = await this.options.pool.query<{ epoch: string }>(`SELECT epoch FROM ${this.options.names.table} WHERE epoch <> $1`, [this.epoch]);
    const alive: string[] = [];
    for (const { epoch } of rows) {
      if (!(await this.isGone(epoch))) alive.push(epoch);
      else if (options.forgetGone) await this.options.pool.query(`DELETE FROM ${this.options.names.table} WHERE epoch = $1`, [epoch]);
    }
    return alive;
  }

  /**
   * AC-L2: waits on the lock of every other registered epoch (and of every one announced later);
   * when a lock is granted its process is gone: `onGone` runs, then the epoch is forgotten.
   */
  async watchPeers(onGone: (epoch: string) => Promise<void>): Promise<void> {
    this.lockClient.on('notification', (message) => {
      if (message.payload && message.payload !== this.epoch) this.watch(message.payload, onGone);
    });
    await this.lockClient.query(`LISTEN ${this.channel}`);
    await this.lockClient.query(`SELECT pg_notify($1, $2)`, [this.channel, this.epoch]);
    const { rows } = await this.lockClient.query<{ epoch: string }>(`SELECT epoch FROM ${this.options.names.table} WHERE epoch <> $1`, [this.epoch]);
    for (const { epoch } of rows) this.watch(epoch, onGone);
  }

  private watch(epoch: string, onGone: (epoch: string) => Promise<void>): void {
    if (this.closing || this.waiters.has(epoch)) return;
    const client = newClient(this.options);
    client.on('error', () => undefined); // ended on shutdown while waiting; nothing to report
    this.waiters.set(epoch, client);
    this.takeOverWhenGone(client, epoch, onGone).catch((error: unknown) => {
      this.options.log.error('watching a peer process failed; a later start takes over its entries', { peerEpoch: epoch, error: String(error) });
      this.waiters.delete(epoch);
    });
  }

  /** Waits on the peer's lock with its own session; when the lock comes free, takes over its entries. */
  private async takeOverWhenGone(client: pg.Client, epoch: string, onGone: (epoch: string) => Promise<void>): Promise<void> {
    try {
      await client.connect();
      await client.query(`SELECT pg_advisory_lock(hashtextextended($1, 0))`, [this.lockName(epoch)]);
      await client.query(`SELECT pg_advisory_unlock(hashtextextended($1, 0))`, [this.lockName(epoch)]);
    } catch (error) {
      if (!this.closing) this.options.log.warn('could not watch a peer process', { peerEpoch: epoch, error: String(error) });
      this.waiters.delete(epoch);
      await client.end().catch(() => undefined);
      return;
    }
    await client.end().catch(() => undefined);
    if (this.closing) return;
    this.options.log.log('peer process gone; taking over its entries', { peerEpoch: epoch, epoch: this.epoch });
    try {
      await onGone(epoch);
      await this.options.pool.query(`DELETE FROM ${this.options.names.table} WHERE epoch = $1`, [epoch]);
    } catch (error) {
      this.options.log.error('takeover of a gone process failed; a later start retries it', { peerEpoch: epoch, error: String(error) });
    }
    this.waiters.delete(epoch);
  }

  /** Releases the lock (by ending its session) and stops watching; the epoch row goes with a clean stop. */
  async close(): Promise<void> {
    this.closing = true;
    if (this.heartbeat) clearTimeout(this.heartbeat);
    await Promise.all([...this.waiters.values()].map((c) => c.end().catch(() => undefined)));
    this.waiters.clear();
    // Within the statement bound: unanswered, the connection is dropped (end() drops one whose query
    // is still out), and the lock goes with the session; the row is left for the peers to forget.
    await this.lockClient.query(bounded(this.options, `DELETE FROM ${this.options.names.table} WHERE epoch = $1`, [this.epoch])).catch(() => undefined);
    await this.lockClient.end().catch(() => undefined);
  }
}

/** A statement of the lock connection answered within `queryMs` (0: unbounded), unlike its waits on a peer's lock. */
function bounded(options: ProcessEpochOptions, text: string, values: unknown[]): pg.QueryConfig {
  const queryMs = { ...DEFAULT_DATABASE_TIMEOUTS, ...options.timeouts }.queryMs;
  // node-postgres takes a query's own `query_timeout`; its types do not say so.
  return { text, values, ...(queryMs > 0 ? { query_timeout: queryMs } : {}) } as pg.QueryConfig;
}

/** A connection of its own: opened and kept alive within the bounds, its lock waits unbounded. */
function newClient(options: ProcessEpochOptions): pg.Client {
  const bounds = sideConnectionTimeouts(options.timeouts);
  return new pg.Client({
    connectionString: options.databaseUrl,
    ...bounds,
    options: [`-c search_path=${options.schema},public`, bounds.options].filter(Boolean).join(' '),
    application_name: options.names.applicationName,
  });
}

/** Closes a connection at once, without the goodbye a server that stopped answering would never acknowledge. */
function dropConnection(client: pg.Client): void {
  (client as unknown as { connection: { stream: { destroy(): void } } }).connection.stream.destroy();
}
