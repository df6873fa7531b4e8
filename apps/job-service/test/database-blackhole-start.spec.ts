import { execFile } from 'node:child_process';
import pg from 'pg';
import { appEntry, eventually, freePort, startApp, startCuttableProxy, testDatabaseUrl, testNaming, uniqueName, type CuttableProxy } from '@gantry/testing';

/**
 * The job service started while its PostgreSQL accepts connections and never answers (a proxy that
 * forwards nothing: docs/operations.md, "When PostgreSQL stops answering"). Its start opens
 * connections outside its pool (the schema's, the migrations' lock): within the connect bound it
 * stops, saying the database is unreachable, rather than hanging; and within the statement bound
 * when the database stops answering once they are open. Starts apps/job-service/dist: build first.
 */
describe('the job service started while its PostgreSQL does not answer', () => {
  let proxy: CuttableProxy;
  let admin: pg.Client;
  /** The schema the second test's start creates on the server, whose answer it never gets. */
  const unanswered = uniqueName('pg_start_stmt');

  beforeAll(async () => {
    proxy = await startCuttableProxy(testDatabaseUrl);
    admin = new pg.Client({ connectionString: testDatabaseUrl });
    await admin.connect();
  });

  afterEach(() => proxy.restore());

  afterAll(async () => {
    // Closed first: a session of the service still open through it ends, and its schema can go.
    await proxy?.close();
    await admin?.query(`DROP SCHEMA IF EXISTS ${unanswered} CASCADE`);
    await admin?.end();
  });

  it('fails its start, naming the database as unreachable and never its password', async () => {
    const password = 'blackholed-start-secret';
    const url = new URL(proxy.url);
    url.password = password;
    proxy.blackhole();
    const env = {
      ...process.env,
      GANTRY_DATABASE_URL: url.toString(),
      GANTRY_DB_SCHEMA: uniqueName('pg_start'),
      GANTRY_DB_CONNECT_TIMEOUT_MS: '1000',
      PORT: String(await freePort()),
      LOG_LEVEL: 'warn',
    };
    // Killed at the bound (were the connections unbounded, the start would wait for many minutes):
    // then the exit code is null, not the failed start's 1.
    const outcome = await new Promise<{ code: number | null; output: string }>((resolve) => {
      execFile(process.execPath, [appEntry('job-service')], { env, timeout: 30_000 }, (error, stdout, stderr) => {
        resolve({ code: error ? ((error as { code?: number }).code ?? null) : 0, output: stdout + stderr });
      });
    });
    expect(outcome.code).toBe(1);
    expect(outcome.output).toContain('service failed to start');
    expect(outcome.output).toContain(`PostgreSQL at ${url.host}/`);
    expect(outcome.output).toContain('is unreachable');
    expect(outcome.output).not.toContain(password);
  }, 60_000);

  it('fails its start when the database stops answering once its connection is open, rather than waiting on the statement', async () => {
    const password = 'unanswered-start-secret';
    const url = new URL(proxy.url);
    url.password = password;
    // The start's creation of its schema waits behind a transaction creating it too: its statement
    // is on the server, its connection open. Then the network goes, and the answer never comes.
    const holder = new pg.Client({ connectionString: testDatabaseUrl });
    await holder.connect();
    await holder.query('BEGIN');
    await holder.query(`CREATE SCHEMA ${unanswered}`);
    const service = await startApp('job-service', {
      schema: unanswered,
      naming: testNaming(unanswered),
      waitReady: false,
      env: { GANTRY_DATABASE_URL: url.toString(), GANTRY_DB_CONNECT_TIMEOUT_MS: '1000', GANTRY_DB_QUERY_TIMEOUT_MS: '1000' },
    });
    try {
      await eventually(
        async () =>
          (await admin.query(`SELECT 1 FROM pg_stat_activity WHERE query = $1 AND wait_event_type = 'Lock'`, [`CREATE SCHEMA IF NOT EXISTS ${unanswered}`])).rowCount === 1,
        { what: "the start's schema creation waiting on the server" },
      );
      proxy.blackhole();
      await holder.query('ROLLBACK');
      // Unbounded, the statement would wait for its answer for many minutes.
      await eventually(() => service.process.exitCode !== null || service.process.signalCode !== null, { what: 'the start to fail', timeoutMs: 30_000 });
    } finally {
      await holder.end();
      await service.kill('SIGKILL');
    }
    const output = service.output();
    expect(service.process.exitCode).toBe(1);
    expect(output).toContain('service failed to start');
    expect(output).toContain(`PostgreSQL at ${url.host}/`);
    expect(output).toContain('is unreachable: Query read timeout');
    expect(output).not.toContain(password);
  }, 60_000);
});
