import { connect } from 'node:net';
import { headers as natsHeaders, type NatsConnection } from '@nats-io/transport-node';
import { commandSubject, contractRegistry, type Context } from '@gantry/contracts';
import { CORRELATION_HEADER } from '@gantry/messaging';
import { connectTestNats, startApp, testNatsUrl, testNaming, uniqueName, removeTestNamespace, type App, type RunningApp } from '@gantry/testing';

/**
 * Bad headers at every service's front door (docs/architecture.md, "Commands"): a correlation id no
 * caller would send, header blocks no client would write, a request without a reply subject. Each
 * is answered, never INTERNAL; the service lives. Bad bodies, command by command, are the table of
 * hostile-input.spec.ts.
 */
const services: [App, Context, Record<string, string>][] = [
  ['job-service', 'jobs', {}],
  ['worktree-service', 'worktrees', {}],
  ['pr-service', 'prs', {}],
  // No job service runs here: the engine's commands that ask it give up at once.
  ['workflow-engine', 'workflow', { GANTRY_WORKFLOW_RUN_QUEUE_PATIENCE_MS: '0' }],
];

describe.each(services)('%s: bad input at the front door', (app, context, env) => {
  const name = uniqueName(`fd-${context}`);
  const naming = testNaming(name);
  const commands = contractRegistry.commands().filter((c) => c.context === context);
  let running: RunningApp;
  let nc: NatsConnection;

  beforeAll(async () => {
    running = await startApp(app, { schema: name, naming, env });
    nc = await connectTestNats();
  });

  afterAll(async () => {
    await nc?.close();
    await running?.kill('SIGKILL');
    await removeTestNamespace(naming, name);
  });

  const outcome = (reply: { ok: boolean; error?: { code: string } }) => (reply.ok ? 'ok' : reply.error?.code);

  it('answers requests with a huge or malformed correlation id, and lives through a request without a reply subject', async () => {
    const command = commands[0];
    const subject = commandSubject(naming, context, command.name);
    const wrong: unknown[] = [];
    for (const [what, value] of [
      ['a correlation id of 64 KB', 'c'.repeat(64_000)],
      ['a correlation id of spaces', '   '],
      ['a correlation id with control characters', 'a\tb\u0001c'],
      ['a correlation id of non-ASCII', 'ünïcødé-✓'],
    ] as const) {
      const h = natsHeaders();
      h.set(CORRELATION_HEADER, value);
      h.set('Gantry-Replica', value);
      h.set('Gantry-Unknown', value);
      try {
        const msg = await nc.request(subject, JSON.stringify(command.examples.valid[0]), { timeout: 10_000, headers: h });
        const code = outcome(msg.json());
        if (code === 'INTERNAL') wrong.push({ what, code });
      } catch (error) {
        wrong.push({ what, code: `no answer: ${String(error)}` });
      }
    }
    for (const body of ['{"not json', JSON.stringify(command.examples.valid[0])]) nc.publish(subject, body);
    await nc.flush();
    // Header blocks no client would write, sent as raw protocol: each still gets its answer.
    const answered = await rawHeaderRequests(subject, ['GARBAGE\r\n\r\n', 'NATS/1.0\r\nno colon\r\n\r\n', 'NATS/1.0 503\r\n\r\n', `NATS/1.0\r\n${CORRELATION_HEADER}: \xff\xfe\r\n\r\n`]);
    if (answered !== 4) wrong.push({ what: 'malformed header blocks', answered });
    expect(wrong).toEqual([]);
    // still answering
    const msg = await nc.request(subject, '{"not json', { timeout: 10_000 });
    expect(outcome(msg.json())).toBe('INVALID_COMMAND');
    expect((await fetch(`${running.url}/health`)).status).toBe(200);
  });
});

/** Sends one request per header block over a raw NATS connection; how many were answered within 3 s. */
async function rawHeaderRequests(subject: string, blocks: string[]): Promise<number> {
  const nats = new URL(testNatsUrl);
  const socket = connect(Number(nats.port || 4222), nats.hostname);
  let received = '';
  socket.on('data', (data: Buffer) => (received += data.toString('latin1')));
  try {
    await new Promise((resolve, reject) => socket.once('connect', resolve).once('error', reject));
    socket.write('CONNECT {"verbose":false,"pedantic":false,"headers":true,"protocol":1}\r\nSUB _FD.raw 1\r\n');
    const body = '{}';
    for (const block of blocks) {
      const size = Buffer.byteLength(block, 'latin1');
      socket.write(Buffer.concat([Buffer.from(`HPUB ${subject} _FD.raw ${size} ${size + body.length}\r\n${block}`, 'latin1'), Buffer.from(`${body}\r\n`)]));
    }
    const answers = () => received.split('HMSG _FD.raw ').length - 1;
    for (let waited = 0; answers() < blocks.length && waited < 3000; waited += 100) await new Promise((r) => setTimeout(r, 100));
    return answers();
  } finally {
    socket.destroy();
  }
}
