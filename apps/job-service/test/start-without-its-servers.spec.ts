import { execFile, spawn } from 'node:child_process';
import net from 'node:net';
import pg from 'pg';
import { appEntry, eventually, freePort, testDatabaseUrl, uniqueName } from '@gantry/testing';

/**
 * What an operator reads when the job service cannot start on the settings it was given: the server
 * or port at fault, by name and address, and never a password the settings carry (docs/configuration.md).
 * Starts apps/job-service/dist: build first.
 */
describe('the job service started on settings it cannot run with', () => {
  /** The schema the starts migrate before they fail (the port test's gets that far). */
  const schema = uniqueName('start_refused');

  afterAll(async () => {
    const admin = new pg.Client({ connectionString: testDatabaseUrl });
    await admin.connect();
    await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await admin.end();
  });

  async function start(env: Record<string, string>): Promise<{ code: number | null; output: string }> {
    const full = { ...process.env, GANTRY_DB_SCHEMA: schema, LOG_LEVEL: 'warn', ...env };
    return new Promise((resolve) => {
      execFile(process.execPath, [appEntry('job-service')], { env: full, timeout: 30_000 }, (error, stdout, stderr) => {
        resolve({ code: error ? ((error as { code?: number }).code ?? null) : 0, output: stdout + stderr });
      });
    });
  }

  it('fails its start naming NATS and its address when nothing answers there, never its password', async () => {
    const password = 'nats-start-secret';
    const port = await freePort();

    const outcome = await start({ GANTRY_NATS_URL: `nats://gantry:${password}@127.0.0.1:${port}`, PORT: String(await freePort()) });

    expect(outcome.code).toBe(1);
    expect(outcome.output).toContain(`NATS at 127.0.0.1:${port} (GANTRY_NATS_URL) is unreachable`);
    expect(outcome.output).not.toContain(password);
  }, 60_000);

  it('fails its start saying NATS refused the credentials when its server asks for others, never the user or password', async () => {
    const password = 'nats-wrong-secret';
    const user = 'nosuchuser_nats';
    const port = await freePort();
    // A NATS server of its own that takes one user: the shared one on 4222 asks for none.
    const server = spawn('nats-server', ['-a', '127.0.0.1', '-p', String(port), '--user', 'gantry', '--pass', 'the-right-one'], { stdio: 'ignore' });
    try {
      await eventually(() => new Promise<boolean>((resolve) => net.connect(port, '127.0.0.1').once('connect', function (this: net.Socket) { this.destroy(); resolve(true); }).once('error', () => resolve(false))), { what: 'the scratch nats-server' });

      const outcome = await start({ GANTRY_NATS_URL: `nats://${user}:${password}@127.0.0.1:${port}`, PORT: String(await freePort()) });

      expect(outcome.code).toBe(1);
      expect(outcome.output).toContain(`NATS at 127.0.0.1:${port} (GANTRY_NATS_URL) refused the credentials`);
      expect(outcome.output).not.toContain('is unreachable');
      expect(outcome.output).not.toContain(password);
      expect(outcome.output).not.toContain(user);
    } finally {
      server.kill('SIGKILL');
    }
  }, 60_000);

  describe('a GANTRY_DATABASE_URL the start cannot use fails it naming PostgreSQL, its address and the setting, never the credentials', () => {
    const password = 'db-start-secret';
    const user = 'nosuchuser_gantry';
    const databaseUrl = (change: (url: URL) => void) => {
      const url = new URL(testDatabaseUrl);
      url.password = password;
      change(url);
      return url;
    };

    it.each<[string, (url: URL) => void, string]>([
      ['a database the server does not have', (url) => (url.pathname = '/nosuchdb'), 'refused the connection: database "nosuchdb" does not exist'],
      ['a user the server refuses', (url) => (url.username = user), 'refused the credentials'],
      ['a port nothing answers on', (url) => (url.port = '1'), 'is unreachable'],
    ])('%s', async (_case, change, problem) => {
      const url = databaseUrl(change);

      const outcome = await start({ GANTRY_DATABASE_URL: url.toString(), PORT: String(await freePort()) });

      expect(outcome.code).toBe(1);
      const line = outcome.output.split('\n').find((one) => one.includes('service failed to start'));
      const refusal = line ? String((JSON.parse(line) as { error?: unknown }).error) : outcome.output;
      expect(refusal).toContain(`PostgreSQL at ${url.host}`);
      expect(refusal).toContain('(GANTRY_DATABASE_URL)');
      expect(refusal).toContain(problem);
      expect(outcome.output).not.toContain(password);
      expect(outcome.output).not.toContain(user);
    }, 60_000);
  });

  it('fails its start naming the port another program holds and the setting that moves it', async () => {
    const holder = net.createServer();
    await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
    const taken = (holder.address() as net.AddressInfo).port;
    try {
      const outcome = await start({ PORT: String(taken) });

      expect(outcome.code).toBe(1);
      expect(outcome.output).toContain(`port ${taken} on 127.0.0.1 is taken by another program`);
      expect(outcome.output).toContain('set PORT');
    } finally {
      holder.close();
    }
  }, 60_000);
});
