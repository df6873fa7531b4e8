import pg from 'pg';

export type Sql = pg.PoolClient | pg.Pool;

export interface DatabaseOptions {
  url: string;
  /** The service's own schema; every unqualified table name resolves into it. */
  schema: string;
  max?: number;
  applicationName?: string;
}

const SCHEMA_NAME = /^[a-z_][a-z0-9_]{0,62}$/;

export function assertSchemaName(schema: string): string {
  if (!SCHEMA_NAME.test(schema)) throw new Error(`invalid schema name ${JSON.stringify(schema)}`);
  return schema;
}

/** A pool whose connections see only the service's schema (and `public` for extensions). */
export function createPool(options: DatabaseOptions): pg.Pool {
  const schema = assertSchemaName(options.schema);
  const pool = new pg.Pool({
    connectionString: options.url,
    max: options.max ?? 10,
    application_name: options.applicationName ?? `gantry-${schema}`,
    options: `-c search_path=${schema},public`,
  });
  // An idle client that loses its connection must not crash the process; the next checkout reconnects.
  pool.on('error', () => undefined);
  pool.on('connect', closeOnStalePlan);
  return pool;
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
/** node-postgres's own words for a connection it lost, or could not make in time. */
const UNREACHABLE_MESSAGES = /^(Connection terminated( unexpectedly| due to connection timeout)?|Client has encountered a connection error and is not queryable|timeout exceeded when trying to connect)$/;

/**
 * The database could not be reached, rather than refusing what was asked: the connection was
 * refused or lost, or the server is shutting down or starting. Nothing the caller asked for is known
 * to have committed, and the same request may be made again once it is back (for a command: under
 * the same idempotency key, which finds its receipt if the commit did happen; docs/architecture.md,
 * "Commands").
 */
export function isDatabaseUnreachable(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string' && (UNREACHABLE_SOCKET_CODES.has(code) || UNREACHABLE_SQLSTATES.has(code) || code.startsWith('08'))) return true;
  return UNREACHABLE_MESSAGES.test(error.message);
}

export async function ensureSchema(url: string, schema: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
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
    await client.query('COMMIT');
    return result;
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  } finally {
    client.off('error', onError);
    client.release(broken ? true : undefined);
  }
}
