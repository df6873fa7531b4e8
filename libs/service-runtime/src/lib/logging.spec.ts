import { randomUUID } from 'node:crypto';
import type { GantryError } from '@gantry/contracts';
import { CommandClient, Bus } from '@gantry/messaging';
import pg from 'pg';
import { eventually, logRecordsOf, removeTestNamespace, testDatabaseUrl, testNatsUrl, testNaming, uniqueName } from '@gantry/testing';
import { RuntimeProbeNote } from '../testing/probe-service-contract.js';
import { startProbe, type ProbeProcess } from '../testing/probe-process.js';

/*
 * The probe service (src/testing/probe-service.ts) runs as its own process, writing pino's JSON to
 * its stdout; a command reaches it over NATS through the Gantry transport.
 */
describe('logs of a service process', () => {
  const schema = uniqueName('logging');
  const naming = testNaming(schema);
  let probe: ProbeProcess;
  let bus: Bus;
  /** A secret of the probe's environment, which its errors quote (probe-service.ts). */
  const envSecret = `probe-env-secret-${randomUUID()}`;

  beforeAll(async () => {
    probe = await startProbe({ schema, naming, env: { PROBE_SECRET_TOKEN: envSecret } });
    await eventually(async () => (await fetch(`${probe.url}/ready`)).status === 200, { what: 'the probe ready', timeoutMs: 30_000 });
    bus = await Bus.connect({ servers: testNatsUrl, naming, name: 'logging-test' });
  }, 60_000);

  afterAll(async () => {
    await probe?.kill('SIGKILL');
    await bus?.close();
    await removeTestNamespace(naming, schema);
  });

  it('every line written while a command and the event it caused are handled carries the correlation id, the command or event, and the job', async () => {
    const correlationId = `corr-${randomUUID()}`;
    const text = randomUUID();
    const reply = await new CommandClient(bus).request(RuntimeProbeNote, { jobId: 'job-logged', text }, { correlationId });
    const handled = await eventually(
      () => logRecordsOf(probe.output()).find((r) => r.message === 'probe event handled' && r.text === text),
      { what: 'the probe to handle the event' },
    );
    const probeLines = logRecordsOf(probe.output()).filter((r) => r.context === 'runtime-probe' && (r.text === text || r.eventId === reply.eventId));
    expect(probeLines.map((r) => r.message).sort()).toEqual(['probe event handled', 'probe noted', 'probe noting', 'probe timer fired']);
    for (const line of probeLines) expect(line).toMatchObject({ correlationId, jobId: 'job-logged', service: 'runtime-probe', level: 'info' });
    for (const line of probeLines.filter((r) => r.message !== 'probe event handled')) expect(line).toMatchObject({ command: 'workflow.runtime_probe_note' });
    // A line's own fields are its own: the next line in the same command does not inherit them.
    const noted = probeLines.find((r) => r.message === 'probe noted');
    for (const field of ['text', 'tokenExpired', 'session']) expect(noted).not.toHaveProperty(field);
    expect(probeLines.find((r) => r.message === 'probe timer fired')).not.toHaveProperty('tokenExpired');
    expect(handled).toMatchObject({ consumer: 'runtime-probe', eventType: 'RuntimeProbeNoted', eventId: reply.eventId });
    expect(Date.parse(String(handled.time))).not.toBeNaN();
  });

  it('secrets are redacted by path, wherever they sit; a key that only looks like a secret is kept', async () => {
    const text = randomUUID();
    await new CommandClient(bus).request(RuntimeProbeNote, { jobId: 'job-redacted', text });
    const noting = await eventually(() => logRecordsOf(probe.output()).find((r) => r.message === 'probe noting' && r.text === text), { what: 'the probe to log' });
    expect(noting).toMatchObject({
      token: '***',
      tokenExpired: true,
      session: { password: '***', user: 'probe' },
      headers: { authorization: '***' },
      databaseUrl: 'postgres://probe:***@127.0.0.1:5432/probe',
    });
    expect(probe.output()).not.toContain(`probe-secret-token-${text}`);
    expect(probe.output()).not.toContain(`probe-secret-password-${text}`);
    expect(probe.output()).not.toContain(`probe-secret-bearer-${text}`);
    expect(probe.output()).not.toContain(`probe-secret-db-${text}`);
  });

  it("an error a command's handler throws is logged with its credentials masked: a URL's password and the environment's secret values", async () => {
    const text = `fail-command-${randomUUID()}`;
    await expect(new CommandClient(bus).request(RuntimeProbeNote, { jobId: 'job-failing', text })).rejects.toMatchObject({ code: 'INTERNAL' });
    const failed = await eventually(
      () => logRecordsOf(probe.output()).find((r) => r.message === 'command failed' && JSON.stringify(r).includes(text)),
      { what: 'the failure logged' },
    );
    expect(failed).toMatchObject({ level: 'error', error: { message: expect.stringContaining(`https://deploy:***@git.example.com/repo.git/`) } });
    expect(JSON.stringify(failed)).toContain('***');
    expect(probe.output()).not.toContain(`probe-secret-git-${text}`);
    expect(probe.output()).not.toContain(envSecret);
  });

  it("a refusal that quotes credentials reaches its caller with them masked, over NATS and over HTTP", async () => {
    const text = `refuse-command-${randomUUID()}`;
    const overNats = await new CommandClient(bus).request(RuntimeProbeNote, { jobId: 'job-refused', text }).then(
      () => null,
      (error: GantryError) => ({ code: error.code, message: error.message, details: error.details }),
    );
    expect(overNats).toMatchObject({ code: 'PRECONDITION_FAILED', message: expect.stringContaining(`https://deploy:***@git.example.com/repo.git/`) });
    expect(JSON.stringify(overNats)).not.toContain(`probe-secret-git-${text}`);
    expect(JSON.stringify(overNats)).not.toContain(envSecret);
    const response = await fetch(`${probe.url}/commands/runtime_probe_note`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ jobId: 'job-refused', text }),
    });
    const body = await response.text();
    expect(JSON.parse(body)).toMatchObject({ ok: false, error: { code: 'PRECONDITION_FAILED', details: { remote: 'https://deploy:***@git.example.com/repo.git' } } });
    expect(body).not.toContain(`probe-secret-git-${text}`);
    expect(body).not.toContain(envSecret);
  });

  it("an error a durable consumer's handler throws is logged with its credentials masked, as its dead letter keeps it", async () => {
    const text = `fail-handler-${randomUUID()}`;
    await new CommandClient(bus).request(RuntimeProbeNote, { jobId: 'job-failing', text });
    const failed = await eventually(
      () => logRecordsOf(probe.output()).find((r) => r.message === 'event handler failed; will retry' && JSON.stringify(r).includes(text)),
      { what: 'the handler failure logged' },
    );
    expect(failed).toMatchObject({ level: 'warn', consumer: 'runtime-probe', error: expect.stringContaining(`https://deploy:***@git.example.com/repo.git/`) });
    expect(probe.output()).not.toContain(`probe-secret-git-${text}`);
    expect(probe.output()).not.toContain(envSecret);
  });

  it("a command over HTTP: its lines and the request's completion line carry the caller's x-correlation-id", async () => {
    const correlationId = `corr-http-${randomUUID()}`;
    const text = randomUUID();
    const response = await fetch(`${probe.url}/commands/runtime_probe_note`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-correlation-id': correlationId, authorization: `Bearer probe-secret-http-${text}` },
      body: JSON.stringify({ jobId: 'job-http', text }),
    });
    expect(response.status).toBe(200);
    const completed = await eventually(
      () => logRecordsOf(probe.output()).find((r) => r.message === 'request completed' && r.correlationId === correlationId),
      { what: 'the request logged' },
    );
    expect(completed).toMatchObject({ res: { statusCode: 200 } });
    const lines = logRecordsOf(probe.output()).filter((r) => r.context === 'runtime-probe' && r.text === text);
    expect(lines.map((r) => r.message).slice(0, 2)).toEqual(['probe noting', 'probe timer fired']);
    for (const line of lines) expect(line).toMatchObject({ correlationId, jobId: 'job-http' });
    for (const line of lines.slice(0, 2)) expect(line).toMatchObject({ command: 'workflow.runtime_probe_note' });
    expect(probe.output()).not.toContain(`probe-secret-http-${text}`);
  });

  it('a request its database fails is answered INTERNAL with its correlation id; the cause is on a line with that id, not in the answer', async () => {
    const correlationId = `corr-failed-${randomUUID()}`;
    const db = new pg.Pool({ connectionString: testDatabaseUrl, max: 1 });
    await db.query(`ALTER TABLE "${schema}".dead_letters RENAME TO dead_letters_away`);
    let answer: { status: number; body: string };
    try {
      const response = await fetch(`${probe.url}/dead-letters`, { headers: { 'x-correlation-id': correlationId } });
      answer = { status: response.status, body: await response.text() };
    } finally {
      await db.query(`ALTER TABLE "${schema}".dead_letters_away RENAME TO dead_letters`);
      await db.end();
    }
    expect({ status: answer.status, body: JSON.parse(answer.body) }).toEqual({
      status: 500,
      body: { ok: false, error: { code: 'INTERNAL', message: 'internal error in GET /dead-letters', details: { correlationId } } },
    });
    expect(answer.body).not.toContain('dead_letters');
    const failed = await eventually(() => logRecordsOf(probe.output()).find((r) => r.message === 'request failed' && r.correlationId === correlationId), {
      what: 'the failure logged',
    });
    expect(failed).toMatchObject({ level: 'error', context: 'http', route: 'GET /dead-letters', error: { message: expect.stringContaining('dead_letters') } });
  });
});
