import { connect } from 'node:net';
import pg from 'pg';
import { headers as natsHeaders, type NatsConnection } from '@nats-io/transport-node';
import { commandSubject, contractRegistry, reservedKeyPath, type CommandContract, type Context } from '@gantry/contracts';
import { CORRELATION_HEADER } from '@gantry/messaging';
import { connectTestNats, startApp, testDatabaseUrl, testNatsUrl, testNaming, uniqueName, removeTestNamespace, type App, type RunningApp } from '@gantry/testing';

/**
 * Bad input at every service's front door (docs/architecture.md, "Commands"): for every command of
 * every service, bodies that are not a request at all and requests bent one field at a time. Each
 * must be answered — over NATS and over POST /commands — with a typed refusal or a typed answer,
 * never INTERNAL, never no answer; a refusal as INVALID_COMMAND writes nothing; the service lives.
 */
const services: [App, Context, Record<string, string>][] = [
  ['job-service', 'jobs', {}],
  ['worktree-service', 'worktrees', {}],
  ['pr-service', 'prs', {}],
  // No job service runs here: the engine's commands that ask it give up at once.
  ['workflow-engine', 'workflow', { GANTRY_WORKFLOW_RUN_QUEUE_PATIENCE_MS: '0' }],
];

const MB = 1_000_000; // under NATS's default max_payload (1 MiB) with the rest of the request

interface Case {
  what: string;
  body: string;
}

/**
 * Whether the command's schema — or the door, for a key `__proto__` anywhere, which the schema would
 * drop — refuses the body (then the answer must be INVALID_COMMAND and nothing written).
 */
function refusedBySchema(contract: CommandContract, body: string): boolean {
  let value: unknown;
  try {
    value = JSON.parse(body);
  } catch {
    return true;
  }
  return reservedKeyPath(value) !== undefined || !contract.request.safeParse(value).success;
}

/** Bodies that are no request: the same for every command. */
const shapeless: Case[] = [
  { what: 'not JSON', body: '{"not json' },
  { what: 'empty body', body: '' },
  { what: 'JSON null', body: 'null' },
  { what: 'an array', body: '[]' },
  { what: 'a number', body: '42' },
  { what: 'a string', body: '"request"' },
  { what: 'an empty object', body: '{}' },
  { what: 'an overflowing number', body: '1e309' },
];

/** The command's first valid example, bent one field at a time. */
function bentCases(contract: CommandContract): Case[] {
  const example = contract.examples.valid[0] as Record<string, unknown> | undefined;
  if (example === undefined || example === null || typeof example !== 'object') return [];
  let n = 0;
  // Each case its own key, so a stored answer of one case does not hide the next.
  const fresh = (value: Record<string, unknown>) =>
    typeof value.idempotencyKey === 'string' && value.idempotencyKey.includes(':')
      ? { ...value, idempotencyKey: `${value.idempotencyKey}-fd${++n}` }
      : value;
  const as = (what: string, value: Record<string, unknown>): Case => ({ what, body: JSON.stringify(fresh(value)) });
  const cases: Case[] = [
    as('an unknown extra field', { ...example, notAField: 'x' }),
    // A computed key makes `__proto__` an own key, as JSON.parse does.
    as('a key __proto__', { ...example, ['__proto__']: { ...example } }),
    as('keys constructor and prototype', { ...example, constructor: { prototype: 'x' }, prototype: 'p' }),
  ];
  for (const [key, value] of Object.entries(example)) {
    const { [key]: _omitted, ...without } = example;
    cases.push(as(`${key} missing`, without));
    cases.push(as(`${key} of a wrong type`, { ...example, [key]: typeof value === 'object' && value !== null ? 42 : { nested: true } }));
    if (typeof value === 'string') {
      cases.push(as(`${key} of 1 MB`, { ...example, [key]: 'a'.repeat(MB) }));
      cases.push(as(`${key} with a NUL`, { ...example, [key]: `${value}\u0000` }));
      cases.push(as(`${key} with a lone surrogate`, { ...example, [key]: `${value}\ud800` }));
      cases.push(as(`${key} with a lone low surrogate`, { ...example, [key]: `\udc00${value}` }));
      cases.push(as(`${key} empty`, { ...example, [key]: '' }));
      if (/Id$/.test(key)) cases.push(as(`${key} not of an id's shape`, { ...example, [key]: 'not an id!' }));
    }
    if (typeof value === 'number') {
      const marker = '"__NUMBER__"';
      for (const number of ['1e309', '-1e309', '-0', '1.5', '9007199254740993']) {
        const c = as(`${key} = ${number}`, { ...example, [key]: '__NUMBER__' });
        cases.push({ what: c.what, body: c.body.replace(marker, number) });
      }
      cases.push(as(`${key} = "NaN"`, { ...example, [key]: 'NaN' }));
    }
    if (typeof value === 'object' && value !== null && !Array.isArray(value)) {
      cases.push(as(`${key} with a key __proto__`, { ...example, [key]: { ...value, ['__proto__']: { role: 'r' } } }));
      cases.push(as(`${key} with keys constructor and prototype`, { ...example, [key]: { ...value, constructor: 'c', prototype: { x: 1 } } }));
      for (const depth of [1_000, 5_000, 100_000]) {
        const c = as(`${key} nested ${depth} deep`, { ...example, [key]: { deep: '__DEEP__' } });
        cases.push({ what: c.what, body: c.body.replace('"__DEEP__"', `${'['.repeat(depth)}${']'.repeat(depth)}`) });
      }
    }
    if (Array.isArray(value)) {
      cases.push(as(`${key} of 10 000 items`, { ...example, [key]: Array.from({ length: 10_000 }, () => value[0] ?? 'x') }));
    }
  }
  if ('idempotencyKey' in example) {
    cases.push({ what: 'idempotencyKey of 10 KB', body: JSON.stringify({ ...example, idempotencyKey: `p/k:${'k'.repeat(10_000)}` }) });
    cases.push({ what: 'idempotencyKey empty', body: JSON.stringify({ ...example, idempotencyKey: '' }) });
  }
  return cases;
}

describe.each(services)('%s: bad input at the front door', (app, context, env) => {
  const name = uniqueName(`fd-${context}`);
  const naming = testNaming(name);
  const commands = contractRegistry.commands().filter((c) => c.context === context);
  let running: RunningApp;
  let nc: NatsConnection;
  let db: pg.Client;

  beforeAll(async () => {
    running = await startApp(app, { schema: name, naming, env });
    nc = await connectTestNats();
    db = new pg.Client({ connectionString: testDatabaseUrl, options: `-c search_path=${name}` });
    await db.connect();
  });

  afterAll(async () => {
    await db?.end();
    await nc?.close();
    await running?.kill('SIGKILL');
    await removeTestNamespace(naming, name);
  });

  const written = async () => (await db.query('SELECT (SELECT count(*) FROM events) + (SELECT count(*) FROM idempotency_receipts) AS n')).rows[0].n as string;
  const outcome = (reply: { ok: boolean; error?: { code: string } }) => (reply.ok ? 'ok' : reply.error?.code);
  /**
   * Every command's cases, those its schema refuses first: a request that was accepted may have
   * consumers write after its answer, and the count before and after a refusal must not see that.
   */
  const table = () => {
    const all = commands.flatMap((command) => [...shapeless, ...bentCases(command)].map((c) => ({ command, ...c })));
    return [...all.filter((c) => refusedBySchema(c.command, c.body)), ...all.filter((c) => !refusedBySchema(c.command, c.body))];
  };
  /** Until what accepted requests set going has been written. */
  const settled = async () => {
    let last = await written();
    for (let i = 0; i < 30; i++) {
      await new Promise((r) => setTimeout(r, 1000));
      const now = await written();
      if (now === last) return;
      last = now;
    }
  };

  it('answers every bad body on every command subject with a typed refusal, writing nothing for INVALID_COMMAND', async () => {
    const wrong: unknown[] = [];
    await settled();
    for (const { command, what, body } of table()) {
      const before = await written();
      let code: string | undefined;
      try {
        const msg = await nc.request(commandSubject(naming, context, command.name), body, { timeout: 10_000 });
        code = outcome(msg.json());
      } catch (error) {
        code = `no answer: ${String(error)}`;
      }
      const wroteNothing = (await written()) === before;
      if (code === 'INTERNAL' || code?.startsWith('no answer') || (refusedBySchema(command, body) && (code !== 'INVALID_COMMAND' || !wroteNothing))) {
        wrong.push({ command: command.name, what, code, wroteNothing });
      }
    }
    expect(wrong).toEqual([]);
    expect((await fetch(`${running.url}/health`)).status).toBe(200);
  }, 300_000);

  it('answers the same bodies over POST /commands with a typed refusal, never a 500', async () => {
    const wrong: unknown[] = [];
    await settled();
    for (const { command, what, body } of table()) {
      const before = await written();
      const response = await fetch(`${running.url}/commands/${command.name}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
      const reply = (await response.json().catch(() => ({ ok: false, error: { code: `not JSON (${response.status})` } }))) as { ok: boolean; error?: { code: string } };
      const code = outcome(reply);
      const wroteNothing = (await written()) === before;
      // An empty body over HTTP is the request `{}` (CommandsController).
      if (response.status === 500 || code === 'INTERNAL' || code?.startsWith('not JSON') || (refusedBySchema(command, body || '{}') && (code !== 'INVALID_COMMAND' || !wroteNothing))) {
        wrong.push({ command: command.name, what, status: response.status, code, wroteNothing });
      }
    }
    expect(wrong).toEqual([]);
  }, 300_000);

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
