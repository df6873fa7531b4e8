import pg from 'pg';

export type Sql = pg.PoolClient | pg.Pool;

export interface DatabaseOptions {
  url: string;
  /** The service's own schema; every unqualified table name resolves into it. */
  schema: string;
  max?: number;
  applicationName?: string;
  /** Bounds on waiting for a PostgreSQL that stops answering; each unset one has its default below. */
  timeouts?: Partial<DatabaseTimeouts>;
}

/**
 * How long a connection waits for a PostgreSQL that stops answering without closing it (a network
 * partition, a frozen host, a firewall dropping packets), rather than until the kernel gives up on
 * TCP many minutes later (docs/operations.md, "When PostgreSQL stops answering"). 0: unbounded.
 */
export interface DatabaseTimeouts {
  /** Opening a connection: TCP, startup and authentication. Not the wait for a free connection of the pool. */
  connectMs: number;
  /**
   * Idle time after which TCP keepalive probes a connection, on both ends: the client's socket, and
   * the server's (its `tcp_keepalives_*` for the session), so that a session whose client is gone
   * ends on the server too, with its transaction and its locks.
   */
  keepAliveMs: number;
  /**
   * How long a query waits for the server's answer. Past it the query fails ("Query read timeout")
   * and its connection is closed: the answer may still come, and would be taken for the next
   * query's. Work that legitimately waits long on a connection (a rebuild, a wait for an advisory
   * lock) runs under `withoutQueryTimeout`, or on a pool made without this bound.
   */
  queryMs: number;
  /** The server ends a session left idle inside a transaction this long (`idle_in_transaction_session_timeout`). */
  idleInTransactionMs: number;
}

/**
 * What a pool gets when its maker does not say. The query bound is off: a pool made outside the
 * service runtime (the worktree service's advisory locks) may wait on a lock for as long as it must.
 * The services pass their own settings (docs/configuration.md).
 */
export const DEFAULT_DATABASE_TIMEOUTS: DatabaseTimeouts = { connectMs: 10_000, keepAliveMs: 10_000, queryMs: 0, idleInTransactionMs: 0 };

const SCHEMA_NAME = /^[a-z_][a-z0-9_]{0,62}$/;

/** A schema name the services take: lower-case letters, digits and `_`, not starting with a digit, at most 63. */
export function isSchemaName(schema: string): boolean {
  return SCHEMA_NAME.test(schema);
}

/** The rule of `isSchemaName` in a sentence: what a process refuses at start when its GANTRY_DB_SCHEMA breaks it. */
export const SCHEMA_NAME_RULE = 'must be a schema name: lower-case letters, digits and _, not starting with a digit, at most 63 characters';

export function assertSchemaName(schema: string): string {
  if (!isSchemaName(schema)) throw new Error(`invalid schema name ${JSON.stringify(schema)}`);
  return schema;
}

/** A pool whose connections see only the service's schema (and `public` for extensions). */
export function createPool(options: DatabaseOptions): pg.Pool {
  const schema = assertSchemaName(options.schema);
  const timeouts = { ...DEFAULT_DATABASE_TIMEOUTS, ...options.timeouts };
  // The connect bound is the client's own (poolConnection): given to the pool, it would also bound
  // the wait for a free connection, which may rightly be long (every connection busy).
  const { connectionTimeoutMillis, options: session, ...bounds } = clientTimeouts(timeouts);
  const pool = new pg.Pool({
    connectionString: options.url,
    max: options.max ?? 10,
    application_name: options.applicationName ?? `gantry-${schema}`,
    options: [`-c search_path=${schema},public`, session].filter(Boolean).join(' '),
    ...bounds,
    Client: poolConnection(connectionTimeoutMillis ?? 0),
  });
  // An idle client that loses its connection must not crash the process; the next checkout reconnects.
  pool.on('error', () => undefined);
  pool.on('connect', closeOnStalePlan);
  return pool;
}

/**
 * node-postgres's settings of a client for `timeouts`, for a connection of its own (a relay's). Its
 * queries that time out leave it unusable: whoever holds it closes it and opens another.
 */
export function clientTimeouts(timeouts: DatabaseTimeouts): pg.ClientConfig {
  const session = sessionSettings(timeouts);
  return {
    connectionTimeoutMillis: timeouts.connectMs,
    ...(session.length > 0 ? { options: session.join(' ') } : {}),
    keepAlive: timeouts.keepAliveMs > 0,
    keepAliveInitialDelayMillis: timeouts.keepAliveMs,
    ...(timeouts.queryMs > 0 ? { query_timeout: timeouts.queryMs } : {}),
    ...(timeouts.idleInTransactionMs > 0 ? { idle_in_transaction_session_timeout: timeouts.idleInTransactionMs } : {}),
  };
}

/**
 * The server's side of the keepalive, as options of the session: it probes a client that has been
 * silent this long, ten times a second apart at most, and ends the session of one that never
 * answers, or whose host answers that the connection is gone (the client gave up on a query and
 * closed it while the network was away). Without it an orphaned session idle in a transaction keeps
 * its locks (a claimed idempotency key, a row) until the server's default of two hours.
 */
function sessionSettings(timeouts: DatabaseTimeouts): string[] {
  if (timeouts.keepAliveMs <= 0) return [];
  const idle = Math.max(1, Math.ceil(timeouts.keepAliveMs / 1000));
  return [`-c tcp_keepalives_idle=${idle}`, '-c tcp_keepalives_interval=1', '-c tcp_keepalives_count=10'];
}

/**
 * The pool's connections: open within `connectMs` (0: unbounded), and closed when a query times out.
 *
 * A query that timed out was sent and its answer never came: the server may still be running it, or
 * the network lost it. node-postgres keeps it as the connection's active query, so the next query on
 * the connection (a ROLLBACK, the next checkout's command) would queue behind an answer that may never
 * come, and if it does come, be handed that answer. Closed, the queued queries fail at once
 * ("Connection terminated unexpectedly"), and the pool drops the connection when it comes back and
 * opens a new one for the next checkout. (pool.query takes the callback form, and releases its client
 * with the error, which drops it too.) The listener on 'error' keeps the loss from ending the process
 * while the client is checked out by code that listens for none; the query that fails reports it.
 */
function poolConnection(connectMs: number): typeof pg.Client {
  const PoolConnection = class extends pg.Client {
    constructor(config?: pg.ClientConfig) {
      super({ ...config, connectionTimeoutMillis: connectMs });
      this.on('error', () => undefined);
    }
  };
  // pg.Client's query is looked up at each call, not kept: whoever wraps it later (a test counting
  // round trips) still sees every query.
  PoolConnection.prototype.query = function (this: pg.Client, ...args: unknown[]): unknown {
    const result = (pg.Client.prototype.query as (...a: unknown[]) => unknown).apply(this, args);
    if (result instanceof Promise) {
      result.catch((error: unknown) => {
        if (isQueryTimeout(error)) closeConnection(this, error as Error);
      });
    }
    return result;
  } as typeof pg.Client.prototype.query;
  return PoolConnection;
}

function isQueryTimeout(error: unknown): boolean {
  return error instanceof Error && error.message === QUERY_TIMEOUT_MESSAGE;
}

/** node-postgres's words for a query whose answer did not come within `query_timeout`. */
const QUERY_TIMEOUT_MESSAGE = 'Query read timeout';

/**
 * Does at once what node-postgres does when a connection fails — marks the client unusable and tells
 * its 'error' listeners — then closes the socket. The socket's close is reported a turn of the event
 * loop later: until then a client handed back to the pool would be kept and given to the next
 * checkout, and whoever holds it (a consumer judging whether its handler or the database failed,
 * withTransaction) would take the failure of its next query for something else.
 */
function closeConnection(client: pg.Client, error: Error): void {
  const internals = client as unknown as { _queryable: boolean; connection: { stream: { destroy(): void } } };
  internals._queryable = false;
  client.emit('error', error);
  internals.connection.stream.destroy();
}

/**
 * Runs `work` with no bound on how long the queries of `client` wait for their answers: work that
 * legitimately takes long on its connection (a rebuild's bulk statements, a wait for an advisory
 * lock another process holds). The bound is back when `work` ends.
 */
export async function withoutQueryTimeout<T>(client: pg.PoolClient | pg.Client, work: () => Promise<T>): Promise<T> {
  const parameters = (client as unknown as { connectionParameters: { query_timeout: number | false } }).connectionParameters;
  const bound = parameters.query_timeout;
  parameters.query_timeout = false;
  try {
    return await work();
  } finally {
    parameters.query_timeout = bound;
  }
}

/**
 * Closes a connection once a statement it prepared no longer fits the schema, so that the pool
 * replaces it. A statement prepared before a migration changed the type of a column it returns
 * fails with "cached plan must not change result type", on that connection, every time it runs:
 * PostgreSQL does not plan it again. The query that met the error still fails (it wrote nothing),
 * and the next checkout gets a fresh connection (docs/operations.md, "Upgrades that change a
 * column's type"). Told by the connection's error messages (node-postgres has no hook for a
 * query's failure), so that a query that succeeds costs nothing more: this listener runs after the
 * client's own, which has already failed the query, and before its caller goes on.
 */
function closeOnStalePlan(client: pg.PoolClient): void {
  (client as unknown as pg.Client).connection.on('errorMessage', (error: unknown) => {
    if (isStalePlan(error)) void client.end().catch(() => undefined);
  });
}

/** PostgreSQL's refusal to run a prepared statement whose result's type changed (feature_not_supported). */
function isStalePlan(error: unknown): boolean {
  const { code, message } = (error ?? {}) as { code?: string; message?: string };
  return code === '0A000' && message === 'cached plan must not change result type';
}

/** Socket errors of a connection to PostgreSQL that could not be made or was lost. */
const UNREACHABLE_SOCKET_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND', 'EHOSTUNREACH', 'ENETUNREACH', 'EAI_AGAIN']);
/** The server shutting down, crashed or still starting (57P01, 57P02, 57P03); class 08 is the connection's own. */
const UNREACHABLE_SQLSTATES = new Set(['57P01', '57P02', '57P03']);
/**
 * node-postgres's own words for a connection it lost, or could not make in time ("timeout expired":
 * a client's connectionTimeoutMillis; "timeout exceeded…": the pool's), or a query whose answer did
 * not come within query_timeout (its connection is then closed: poolConnection).
 */
const UNREACHABLE_MESSAGES =
  /^(Connection terminated( unexpectedly| due to connection timeout)?|Client has encountered a connection error and is not queryable|timeout exceeded when trying to connect|timeout expired|Query read timeout)$/;

/**
 * The database could not be reached, rather than refusing what was asked: the connection was
 * refused or lost, or the server is shutting down or starting. Nothing the caller asked for is known
 * to have committed, and the same request may be made again once it is back (for a command: under
 * the same idempotency key, which finds its receipt if the commit did happen; docs/architecture.md,
 * "Commands").
 */
export function isDatabaseUnreachable(error: unknown): boolean {
  // Told by its shape, not `instanceof Error`: Node's socket errors are made in Node's own realm, which
  // is not the caller's when it runs in a vm context (Jest's test files do).
  if (typeof error !== 'object' || error === null) return false;
  const { code, message } = error as { code?: unknown; message?: unknown };
  if (typeof code === 'string' && (UNREACHABLE_SOCKET_CODES.has(code) || UNREACHABLE_SQLSTATES.has(code) || code.startsWith('08') || code === DATABASE_UNREACHABLE)) return true;
  return typeof message === 'string' && UNREACHABLE_MESSAGES.test(message);
}

/** The code of DatabaseUnreachableError: a start's report of an unreachable database counts as one. */
const DATABASE_UNREACHABLE = 'DATABASE_UNREACHABLE';

/**
 * node-postgres's settings of a connection opened outside a pool (the schema's creation, the
 * migrations' lock, the process epoch's lock and its waiters): it opens within `connectMs` and is
 * kept alive on both ends. Its queries have no bound unless `statements` is `'bounded'`: some of
 * them wait on a lock for as long as another process holds it. A bounded side connection runs such a
 * wait under `withoutQueryTimeout`, and its short statements (the schema's creation, the migrations'
 * unlock) within `queryMs`, like the pool's (docs/operations.md, "When PostgreSQL stops answering").
 */
export function sideConnectionTimeouts(timeouts: Partial<DatabaseTimeouts> = {}, statements: 'bounded' | 'unbounded' = 'unbounded'): pg.ClientConfig {
  const settings = { ...DEFAULT_DATABASE_TIMEOUTS, ...timeouts };
  const { query_timeout: _query, idle_in_transaction_session_timeout: _idle, ...bounds } = clientTimeouts({ ...settings, queryMs: 0 });
  return statements === 'bounded' && settings.queryMs > 0 ? { ...bounds, query_timeout: settings.queryMs } : bounds;
}

/** The database's address for a message: host, port and name, never the user or the password. */
export function databaseAddress(url: string): string {
  try {
    const parsed = new URL(url);
    return `${parsed.host}${parsed.pathname}`;
  } catch {
    return 'the configured database';
  }
}

/** The setting that names the database in every Gantry process (docs/configuration.md). */
export const DATABASE_URL_SETTING = 'GANTRY_DATABASE_URL';

/** The database could not be reached while the process started: it stops, or is started again. */
export class DatabaseUnreachableError extends Error {
  readonly code = DATABASE_UNREACHABLE;

  constructor(url: string, cause: unknown, setting = DATABASE_URL_SETTING) {
    super(`PostgreSQL at ${databaseAddress(url)} (${setting}) is unreachable: ${cause instanceof Error ? cause.message : String(cause)}`);
    this.name = 'DatabaseUnreachableError';
  }
}

/** The server's refusal of a connection: no such database (3D000), or the credentials (class 28). */
function connectionRefusal(error: unknown): string | undefined {
  if (typeof error !== 'object' || error === null) return undefined;
  const { code, message } = error as { code?: unknown; message?: unknown };
  if (typeof code !== 'string') return undefined;
  if (code === '3D000') return typeof message === 'string' ? message : 'the database does not exist';
  // The server's own sentence names the user (and pg_hba.conf's lines the host): this one names neither.
  if (code.startsWith('28')) return `refused the credentials (SQLSTATE ${code}: the user, its password or pg_hba.conf; the server's log says which)`;
  return undefined;
}

/**
 * The server answered and refused the connection the setting describes: a database it does not have,
 * or credentials it does not take. Trying again changes nothing until the setting (or the server) does.
 */
export class DatabaseRefusedError extends Error {
  readonly code = 'DATABASE_REFUSED';

  constructor(url: string, refusal: string, setting = DATABASE_URL_SETTING) {
    super(`PostgreSQL at ${databaseAddress(url)} (${setting}) ${refusal.startsWith('refused') ? refusal : `refused the connection: ${refusal}`}`);
    this.name = 'DatabaseRefusedError';
  }
}

/**
 * Runs `work`, which connects to the database, and reports a database that cannot be reached or that
 * refuses the connection as such, naming its address and the setting (never a user or a password).
 */
export async function reportingConnectFailure<T>(url: string, work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (error) {
    if (isDatabaseUnreachable(error)) throw new DatabaseUnreachableError(url, error);
    const refusal = connectionRefusal(error);
    if (refusal !== undefined) throw new DatabaseRefusedError(url, refusal);
    throw error;
  }
}

/**
 * Creates the schema if it is missing, on a connection of its own: opened within `connectMs`, its
 * statement answered within `queryMs` (a database that stops answering once the connection is open
 * fails it as unreachable, rather than holding the start; the connection is then closed at once).
 */
export async function ensureSchema(url: string, schema: string, timeouts: Partial<DatabaseTimeouts> = {}): Promise<void> {
  const client = new pg.Client({ connectionString: url, ...sideConnectionTimeouts(timeouts, 'bounded') });
  client.on('error', () => undefined); // reported by the query that fails
  await client.connect();
  try {
    await client.query(`CREATE SCHEMA IF NOT EXISTS ${assertSchemaName(schema)}`);
  } catch (error) {
    // Two processes racing on CREATE SCHEMA IF NOT EXISTS can still collide on the catalog.
    if ((error as { code?: string }).code !== '23505') throw error;
  } finally {
    await client.end();
  }
}

/**
 * A transaction PostgreSQL rolled back at its COMMIT: a statement of it had failed and its error was
 * caught, so the transaction was aborted and nothing of it was written. PostgreSQL answers such a
 * COMMIT with `ROLLBACK`, not an error: without this, work that wrote nothing would be taken as done
 * (an event acknowledged with its effect lost, a command answered as written).
 */
export class TransactionAbortedError extends Error {
  readonly code = 'TRANSACTION_ABORTED';

  constructor() {
    super('the transaction was rolled back at its COMMIT: a statement in it had failed and its error was caught; nothing of it was written');
    this.name = 'TransactionAbortedError';
  }
}

/** COMMIT, failing with TransactionAbortedError when PostgreSQL rolled the transaction back instead. */
export async function commit(client: pg.ClientBase): Promise<void> {
  const answer = await client.query('COMMIT');
  if (answer.command !== 'COMMIT') throw new TransactionAbortedError();
}

/**
 * Runs `fn` in a transaction on a connection of the pool. A connection that dies while it is out
 * (between two queries, where no query can report it) would emit an error nobody listens to and
 * end the process: the listener keeps it to the next query, which fails, and the connection is
 * discarded rather than handed back.
 */
export async function withTransaction<T>(pool: pg.Pool, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  let broken = false;
  const onError = () => {
    broken = true;
  };
  client.on('error', onError);
  try {
    await client.query('BEGIN');
    const result = await fn(client);
    await commit(client);
    return result;
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  } finally {
    client.off('error', onError);
    client.release(broken ? true : undefined);
  }
}
