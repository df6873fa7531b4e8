import pg from 'pg';
import { eventually, startCuttableProxy, testDatabaseUrl, uniqueName, watchingQueries, type CuttableProxy } from '@gantry/testing';
import { createPool, ensureSchema, isDatabaseUnreachable } from './database.js';
import { EventStore } from './event-store.js';
import { migrate } from './migrations.js';
import { ProcessEpoch, processTableDdl } from './process-epoch.js';
import { rebuildProjections } from './rebuild.js';

/**
 * The connections a process opens outside its pool — the schema's creation, the migrations' lock,
 * the process epoch's lock, a rebuild's reader — in front of a PostgreSQL that stops answering
 * without closing anything (a proxy that forwards nothing): they give up within their bounds, as
 * the database being unreachable (docs/operations.md, "When PostgreSQL stops answering").
 */
describe('connections outside the pool, in front of a PostgreSQL that stops answering', () => {
  const schema = uniqueName('pg_side');
  const password = 'side-connection-secret';
  const timeouts = { connectMs: 500, keepAliveMs: 1_000 };
  let proxy: CuttableProxy;
  /** The proxy's address, with a password the server (trust) ignores and no message may show. */
  let url: string;
  let admin: pg.Client;
  const closers: Array<() => Promise<unknown>> = [];

  /** Fails the test with `what` if `work` is still waiting after a generous bound (were the bounds missing, it would wait for minutes). */
  const settled = <T>(what: string, work: Promise<T>): Promise<T> => {
    let timer: NodeJS.Timeout | undefined;
    const stuck = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} still waits on the blackholed database`)), 15_000);
    });
    return Promise.race([work, stuck]).finally(() => clearTimeout(timer));
  };

  beforeAll(async () => {
    proxy = await startCuttableProxy(testDatabaseUrl);
    const withPassword = new URL(proxy.url);
    withPassword.password = password;
    url = withPassword.toString();
    admin = new pg.Client({ connectionString: testDatabaseUrl });
    await admin.connect();
    await admin.query(`CREATE SCHEMA ${schema}`);
    await admin.query(`SET search_path = ${schema}`);
    await admin.query(processTableDdl('side_epochs'));
  });

  afterEach(() => proxy.restore());

  afterAll(async () => {
    proxy?.cut();
    for (const close of closers) await close().catch(() => undefined);
    for (const made of [schema, `${schema}_stmt`, `${schema}_unlock`, `${schema}_typeorm`]) await admin?.query(`DROP SCHEMA IF EXISTS ${made} CASCADE`);
    await admin?.end();
    await proxy?.close();
  });

  it('a migration started while the database does not answer fails as the database unreachable, naming its address and not its password', async () => {
    proxy.blackhole();
    const error = await settled('the migration', migrate({ url, schema: `${schema}_migrated`, timeouts }).then(() => null, (e: unknown) => e));
    expect(error).toBeInstanceOf(Error);
    expect(isDatabaseUnreachable(error)).toBe(true); // a start's report counts as the database unreachable, like the error it wraps
    expect(error).toMatchObject({ name: 'DatabaseUnreachableError', code: 'DATABASE_UNREACHABLE' });
    const message = (error as Error).message;
    expect(message).toContain(`PostgreSQL at ${new URL(proxy.url).host}/`);
    expect(message).toContain('unreachable');
    expect(message).not.toContain(password);
  });

  it('the schema is not created while the database does not answer: its connection gives up', async () => {
    proxy.blackhole();
    const error = await settled('the schema creation', ensureSchema(url, `${schema}_ensured`, timeouts).then(() => null, (e: unknown) => e));
    expect(isDatabaseUnreachable(error)).toBe(true);
    proxy.restore();
    const { rows } = await admin.query(`SELECT 1 FROM pg_namespace WHERE nspname = $1`, [`${schema}_ensured`]);
    expect(rows).toEqual([]);
  });

  /** The text of a query as node-postgres is asked to send it. */
  const textOf = (args: unknown[]) => (typeof args[0] === 'string' ? args[0] : ((args[0] as { text?: string } | undefined)?.text ?? ''));
  /** Runs `work`, taking the network away just before a query whose text contains `needle` leaves: its connection is open, its answer never comes. */
  const blackholedAt = (needle: string, work: () => Promise<unknown>) =>
    watchingQueries((args) => {
      if (textOf(args).includes(needle)) proxy.blackhole();
    }, work);

  it("a start's schema creation, sent on an open connection and never answered, fails within the statement bound as the database unreachable", async () => {
    let error: unknown = null;
    await blackholedAt('CREATE SCHEMA IF NOT EXISTS', async () => {
      error = await settled('the schema creation', migrate({ url, schema: `${schema}_stmt`, timeouts: { ...timeouts, queryMs: 1_000 } }).then(() => null, (e: unknown) => e));
    });
    expect(error).toMatchObject({ name: 'DatabaseUnreachableError', code: 'DATABASE_UNREACHABLE' });
    expect((error as Error).message).toContain('Query read timeout');
    expect((error as Error).message).not.toContain(password);
  });

  it("the migrations' unlock, never answered, does not hold the start; the lock goes with its session", async () => {
    const lockKey = `gantry.migrate.${schema}_unlock`;
    await blackholedAt('pg_advisory_unlock', async () => {
      await settled('the migrations', migrate({ url, schema: `${schema}_unlock`, timeouts: { ...timeouts, queryMs: 1_000 } }));
    });
    const { rows } = await admin.query(`SELECT count(*)::int AS n FROM ${schema}_unlock.migrations`);
    expect(rows[0].n).toBeGreaterThan(0);
    // Its connection closed: the server ends the session (here once the network is back), and with it the lock.
    proxy.restore();
    await eventually(async () => {
      const { rows: got } = await admin.query<{ got: boolean }>(`SELECT pg_try_advisory_lock(hashtext($1)) AS got`, [lockKey]);
      if (got[0]!.got) await admin.query(`SELECT pg_advisory_unlock(hashtext($1))`, [lockKey]);
      return got[0]!.got;
    }, { what: "the migrations' lock released" });
  });

  it("the migrations' statements, sent into a database that stops answering, are given up on as the database unreachable: their lock's connection is asked meanwhile", async () => {
    let error: unknown = null;
    // TypeORM's look for the migrations table, the first of its statements at a start.
    await blackholedAt('"information_schema"."tables"', async () => {
      error = await settled('the migrations', migrate({ url, schema: `${schema}_typeorm`, timeouts: { ...timeouts, queryMs: 1_000 } }).then(() => null, (e: unknown) => e));
    });
    expect(error).toMatchObject({ name: 'DatabaseUnreachableError', code: 'DATABASE_UNREACHABLE' });
    expect((error as Error).message).toContain('Query read timeout');
    expect((error as Error).message).not.toContain(password);
  });

  const epochOptions = (onLockLost: (error: unknown) => void) => {
    const pool = createPool({ url, schema, max: 2, timeouts });
    closers.push(() => pool.end());
    const quiet = { log: () => undefined, warn: () => undefined, error: () => undefined };
    return {
      databaseUrl: url,
      schema,
      pool,
      log: quiet,
      onLockLost,
      timeouts,
      names: { table: 'side_epochs', lock: 'gantry.side.epoch', channel: 'gantry_side_epochs', applicationName: 'gantry-side-epoch' },
    };
  };

  it('a process epoch started while the database does not answer fails as the database unreachable', async () => {
    proxy.blackhole();
    const error = await settled('the epoch start', ProcessEpoch.start(epochOptions(() => undefined)).then(() => null, (e: unknown) => e));
    expect(error).toMatchObject({ name: 'DatabaseUnreachableError' });
    expect((error as Error).message).not.toContain(password);
  });

  it('a process epoch whose registration is never answered fails within the statement bound as the database unreachable', async () => {
    let error: unknown = null;
    await blackholedAt('INSERT INTO side_epochs', async () => {
      error = await settled('the epoch start', ProcessEpoch.start({ ...epochOptions(() => undefined), timeouts: { ...timeouts, queryMs: 1_000 } }).then(() => null, (e: unknown) => e));
    });
    expect(error).toMatchObject({ name: 'DatabaseUnreachableError' });
    expect((error as Error).message).toContain('Query read timeout');
    expect((error as Error).message).not.toContain(password);
  });

  it('a process epoch whose stop is never answered closes within the statement bound; its lock goes with its session', async () => {
    const epoch = await ProcessEpoch.start({ ...epochOptions(() => undefined), timeouts: { ...timeouts, queryMs: 1_000 } });
    await blackholedAt('DELETE FROM side_epochs', () => settled('the epoch stop', epoch.close()));
    proxy.restore();
    const lock = `gantry.side.epoch:${schema}:${epoch.epoch}`;
    await eventually(async () => {
      const { rows } = await admin.query<{ got: boolean }>(`SELECT pg_try_advisory_lock(hashtextextended($1, 0)) AS got`, [lock]);
      if (rows[0]!.got) await admin.query(`SELECT pg_advisory_unlock(hashtextextended($1, 0))`, [lock]);
      return rows[0]!.got;
    }, { what: "the stopped epoch's lock free" });
  });

  it('a process whose epoch lock connection stops answering learns that it lost its epoch', async () => {
    let lost: unknown = null;
    const epoch = await ProcessEpoch.start(epochOptions((error) => (lost = error)));
    closers.push(() => epoch.close());
    const { rows } = await admin.query(`SELECT epoch FROM side_epochs WHERE epoch = $1`, [epoch.epoch]);
    expect(rows).toHaveLength(1);
    // Still answering: the heartbeat keeps it, nothing is reported.
    await new Promise((resolve) => setTimeout(resolve, 2_500));
    expect(lost).toBeNull();

    proxy.blackhole();
    const noticed = new Promise<void>((resolve) => {
      const poll = setInterval(() => {
        if (lost !== null) {
          clearInterval(poll);
          resolve();
        }
      }, 50);
    });
    await settled('noticing the lost epoch lock', noticed);
    expect(String(lost)).toContain('epoch lock connection');
  });

  it('a rebuild whose reader cannot connect fails rather than waits', async () => {
    const pool = createPool({ url, schema, max: 2, timeouts });
    closers.push(() => pool.end());
    const store = new EventStore({ pool, schema, inlineProjections: [] });
    proxy.blackhole();
    const error = await settled('the rebuild', rebuildProjections(store, []).then(() => null, (e: unknown) => e));
    expect(isDatabaseUnreachable(error)).toBe(true);
  });
});
