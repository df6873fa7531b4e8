import pg from 'pg';
import { jetstreamManager } from '@nats-io/jetstream';
import { commandSubject, contractRegistry, eventStreamSubjects, streamName, type Context } from '@gantry/contracts';
import { apps, connectTestNats, startApp, testDatabaseUrl, testNaming, uniqueName, removeTestNamespace, type App, type RunningApp } from '@gantry/testing';

const contextOf: Partial<Record<App, Context>> = {
  'job-service': 'jobs',
  'workflow-engine': 'workflow',
  'pr-service': 'prs',
  'worktree-service': 'worktrees',
};

describe.each(apps)('%s as a process', (app) => {
  const name = uniqueName(app);
  const naming = testNaming(name);
  const context = contextOf[app];
  let running: RunningApp;

  beforeAll(async () => {
    running = await startApp(app, { schema: name, naming });
  });

  afterAll(async () => {
    await running?.kill('SIGKILL');
    await removeTestNamespace(naming, name);
  });

  it('answers /health and /ready', async () => {
    const health = await fetch(`${running.url}/health`);
    expect(health.status).toBe(200);
    expect(await health.json()).toEqual({ status: 'ok', info: { process: { status: 'up' } }, error: {}, details: { process: { status: 'up' } } });
    const ready = await fetch(`${running.url}/ready`);
    const body = (await ready.json()) as { status: string; details: Record<string, { status: string }> };
    expect(body.status).toBe('ok');
    expect(body.details.nats).toMatchObject({ status: 'up', state: 'connected' });
  });

  if (context) {
    it('provisions its schema and its stream', async () => {
      const client = new pg.Client({ connectionString: testDatabaseUrl });
      await client.connect();
      const { rows } = await client.query(`SELECT table_name FROM information_schema.tables WHERE table_schema = $1`, [name]);
      await client.end();
      expect(rows.map((r) => r.table_name)).toEqual(expect.arrayContaining(['events', 'outbox', 'idempotency_receipts', 'inbox', 'dead_letters', 'migrations']));
      const nc = await connectTestNats();
      const info = await (await jetstreamManager(nc)).streams.info(streamName(naming, context));
      await nc.close();
      expect(info.config.subjects).toEqual(eventStreamSubjects(naming, context));
      expect(info.config.subjects).toContain(`${naming.subjectRoot}.${context}.evt.>`);
    });

    const commands = contractRegistry.commands().filter((c) => c.context === context);
    (commands.length > 0 ? it : it.skip)('answers malformed JSON and schema-invalid payloads on every command subject with INVALID_COMMAND, writing nothing', async () => {
      const nc = await connectTestNats();
      const client = new pg.Client({ connectionString: testDatabaseUrl, options: `-c search_path=${name}` });
      await client.connect();
      const count = async () => Number((await client.query('SELECT (SELECT count(*) FROM events) + (SELECT count(*) FROM idempotency_receipts) AS n')).rows[0].n);
      const before = await count();
      try {
        for (const command of commands) {
          for (const body of ['{"not json', ...command.examples.invalid.map((e) => JSON.stringify(e))]) {
            const msg = await nc.request(commandSubject(naming, context, command.name), body, { timeout: 5000 });
            const reply = msg.json<{ ok: boolean; error?: { code: string; issues?: unknown[] } }>();
            expect({ command: command.name, body, ok: reply.ok, code: reply.error?.code }).toEqual({ command: command.name, body, ok: false, code: 'INVALID_COMMAND' });
            expect(reply.error?.issues?.length).toBeGreaterThan(0);
          }
        }
        expect(await count()).toBe(before);
        const health = await fetch(`${running.url}/health`);
        expect(health.status).toBe(200);
      } finally {
        await nc.close();
        await client.end();
      }
    });
  }

  it('stops cleanly on SIGTERM', async () => {
    const code = await running.kill('SIGTERM');
    expect(code).toBe(0);
  });
});
