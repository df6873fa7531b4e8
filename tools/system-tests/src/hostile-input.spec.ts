import pg from 'pg';
import { headers as natsHeaders, type NatsConnection } from '@nats-io/transport-node';
import { commandSubject, contractRegistry, reservedKeyPath, type CommandContract, type Context } from '@gantry/contracts';
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { connectTestNats, dropSchema, eventually, removeTestNamespace, startApp, testDatabaseUrl, testNaming, uniqueName, type App, type RunningApp } from '@gantry/testing';

/**
 * Bad input gets a typed error and changes nothing (docs/architecture.md, "Bad input"): every command
 * of every service, over NATS and over `POST /commands/<name>`, sent a table of hostile requests
 * built from its contract's first valid example. The contract is the oracle: a request its schema
 * refuses must be answered `INVALID_COMMAND` (400 over HTTP) with its issues, and leave every table
 * of the service's schema as it was; a request the schema takes may be answered or refused, but
 * never `INTERNAL`, never a 5xx, never left unanswered. The service must still answer afterwards.
 */

/** Each service, with the services its commands ask (so that a request they take is answered, not UNAVAILABLE). */
const services: { app: App; context: Context; asks: App[] }[] = [
  { app: 'job-service', context: 'jobs', asks: [] },
  { app: 'worktree-service', context: 'worktrees', asks: [] },
  { app: 'pr-service', context: 'prs', asks: [] },
  { app: 'workflow-engine', context: 'workflow', asks: ['job-service'] },
];

/** How long a row may go unanswered before it counts as a hang (a real answer comes in milliseconds). */
const ANSWER_WAIT_MS = 60_000;
/** A string far longer than any field's bound, with room for the rest of the request in one NATS message. */
const LONG = 'a'.repeat(300_000);
/** Under NATS's default max_payload (1 MiB) with the rest of the request. */
const MB_STRING = 'a'.repeat(1_000_000);
const HUGE_ARRAY_LENGTH = 30_000;
/** Written by a replica's periodic lease sweep whatever commands come (docs/jobs.md), not by a command. */
const PERIODIC_TABLES = new Set(['lease_sweeps']);

interface Row {
  what: string;
  /** The request as sent: JSON text, or not JSON at all; bytes when they are not UTF-8 text. */
  body: string | Buffer;
  /** Over HTTP only: the request's content type, when not JSON's. */
  contentType?: string;
  /** Which entrances the row is sent through. */
  via?: ('nats' | 'http')[];
}

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** Hostile stand-ins for one value of the example, by the value's type. */
function hostileValues(value: Json): { what: string; text: string }[] {
  const wrong: { what: string; text: string }[] = [{ what: 'null', text: 'null' }];
  if (typeof value === 'string') {
    wrong.push(
      { what: 'a number for a string', text: '42' },
      { what: 'an empty string', text: '""' },
      { what: 'a NUL character', text: JSON.stringify(`${value}\u0000x`) },
      { what: 'a lone surrogate', text: JSON.stringify(`${value}\ud800`) },
      { what: 'a lone low surrogate', text: JSON.stringify(`\udc00${value}`) },
      { what: "not an id's shape", text: JSON.stringify('not an id!') },
      { what: 'a leading -', text: JSON.stringify(`-${value}`) },
      { what: 'a leading --', text: JSON.stringify(`--upload-pack=touch /tmp/pwned`) },
      { what: 'path separators', text: JSON.stringify(`../../${value}/..\\x`) },
      { what: 'a 300 kB string', text: JSON.stringify(LONG) },
      { what: 'a 1 MB string', text: JSON.stringify(MB_STRING) },
    );
  } else if (typeof value === 'number') {
    wrong.push(
      { what: 'a string for a number', text: '"1"' },
      { what: 'a negative number', text: '-1' },
      { what: 'a fraction', text: '1.5' },
      { what: 'a huge number', text: '1e308' },
      { what: 'a number JSON reads as Infinity', text: '1e400' },
      { what: 'a number JSON reads as -Infinity', text: '-1e400' },
      { what: 'minus zero', text: '-0' },
      { what: '"NaN"', text: '"NaN"' },
      { what: 'an integer beyond 2^53', text: '9007199254740993' },
    );
  } else if (typeof value === 'boolean') {
    wrong.push({ what: 'a string for a boolean', text: '"true"' });
  } else if (Array.isArray(value)) {
    wrong.push(
      { what: 'a string for an array', text: '"x"' },
      { what: 'an empty array', text: '[]' },
      { what: `an array of ${HUGE_ARRAY_LENGTH}`, text: JSON.stringify(Array.from({ length: HUGE_ARRAY_LENGTH }, () => (JSON.stringify(value[0] ?? 'x').length <= 20 ? value[0] : 'x'))) },
    );
  } else if (value !== null) {
    wrong.push(
      { what: 'a string for an object', text: '"x"' },
      { what: 'an empty object', text: '{}' },
      { what: 'an array for an object', text: '[]' },
      { what: 'a key __proto__ in it', text: withField(value, ['__proto__'], '{"role":"r"}') },
      { what: 'keys constructor and prototype in it', text: withField(withObject(value, 'constructor', 'c'), ['prototype'], '{"x":1}') },
      ...[1_000, 5_000, 100_000].map((depth) => ({ what: `arrays nested ${depth} deep in it`, text: `{"deep":${'['.repeat(depth)}${']'.repeat(depth)}}` })),
    );
  }
  return wrong;
}

const HOLE = '\u0001hostile\u0001';

/** The example with `text` (JSON) in place of the value at `path`, or without it (`text` undefined). */
function withField(example: Record<string, Json>, path: string[], text: string | undefined): string {
  const copy = structuredClone(example);
  let parent: Record<string, Json> = copy;
  for (const key of path.slice(0, -1)) parent = parent[key] as Record<string, Json>;
  const last = path[path.length - 1]!;
  if (text === undefined) {
    delete parent[last];
    return JSON.stringify(copy);
  }
  // An own key even when it is `__proto__`, as JSON.parse makes it.
  Object.defineProperty(parent, last, { value: HOLE, enumerable: true, configurable: true, writable: true });
  return JSON.stringify(copy).replace(JSON.stringify(HOLE), () => text);
}

function withObject(example: Record<string, Json>, key: string, value: Json): Record<string, Json> {
  return JSON.parse(withField(example, [key], JSON.stringify(value))) as Record<string, Json>;
}

/** The paths of the example's values: each field, and the fields of its objects, to three levels. */
function fieldPaths(value: Record<string, Json>, prefix: string[] = []): { path: string[]; value: Json }[] {
  return Object.entries(value).flatMap(([key, child]) => {
    const path = [...prefix, key];
    const nested = child !== null && typeof child === 'object' && !Array.isArray(child) && path.length < 3 ? fieldPaths(child, path) : [];
    return [{ path, value: child }, ...nested];
  });
}

/** UTF-8 text of the example with `bytes` spliced into the string at `path`: JSON but for them. */
function withBytesIn(example: Record<string, Json>, path: string[], bytes: number[]): Buffer {
  const mark = '\u0002';
  const [before, after] = withField(example, path, JSON.stringify(mark)).split(JSON.stringify(mark).slice(1, -1));
  return Buffer.concat([Buffer.from(before!), Buffer.from(bytes), Buffer.from(after!)]);
}

/** Byte sequences that are not UTF-8, which a lenient decoder reads as U+FFFD or as what they spell. */
const NOT_UTF8: { what: string; bytes: number[] }[] = [
  { what: 'a byte that is never UTF-8 (FF)', bytes: [0xff] },
  { what: 'a continuation byte alone (80)', bytes: [0x80] },
  { what: 'a truncated multi-byte sequence (E2 82)', bytes: [0xe2, 0x82] },
  { what: 'an overlong encoding of / (C0 AF)', bytes: [0x61, 0xc0, 0xaf] },
  { what: 'an overlong encoding of .. (E0 80 AE twice)', bytes: [0xe0, 0x80, 0xae, 0xe0, 0x80, 0xae] },
  { what: 'a UTF-16 surrogate encoded as UTF-8 (ED A0 80)', bytes: [0x61, 0xed, 0xa0, 0x80] },
  { what: 'a code point beyond U+10FFFF (F4 90 80 80)', bytes: [0x61, 0xf4, 0x90, 0x80, 0x80] },
];

/**
 * Bodies that are not UTF-8 JSON text (docs/architecture.md, "Commands"): each must be refused
 * INVALID_COMMAND over both transports, never decoded leniently (a lone byte read as U+FFFD, an
 * overlong `/` read as `/`) into a request the contract takes — so the bytes go into every string
 * of the example, free text included, and into a field the schema would drop.
 */
function encodingRows(example: Record<string, Json>): Row[] {
  const text = JSON.stringify(example);
  const cut = Buffer.from(`${text.slice(0, -1)},"zzText":"€`);
  const strings = [...fieldPaths(example).filter((f) => typeof f.value === 'string').map((f) => f.path), ['zzUnknownField']];
  return [
    ...strings.flatMap((path) => NOT_UTF8.map(({ what, bytes }) => ({ what: `${path.join('.')}: ${what}`, body: withBytesIn(example, path, bytes) }))),
    { what: 'the body cut inside a multi-byte character', body: cut.subarray(0, cut.length - 1) },
    { what: 'a UTF-8 byte order mark before the JSON', body: Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(text)]) },
    { what: 'the example in UTF-16LE', body: Buffer.from(text, 'utf16le'), via: ['nats'] },
    { what: 'the example in UTF-16LE, declared charset=utf-16le', body: Buffer.from(text, 'utf16le'), contentType: 'application/json; charset=utf-16le', via: ['http'] },
    { what: 'the example in Latin-1, declared charset=iso-8859-1', body: Buffer.from(text.replace(/}$/, ',"zzText":"\u00e9"}'), 'latin1'), contentType: 'application/json; charset=iso-8859-1', via: ['http'] },
    { what: 'the example declared charset=utf-8', body: text, contentType: 'application/json; charset=utf-8', via: ['http'] },
  ];
}

function rowsOf(command: CommandContract): Row[] {
  const example = command.examples.valid[0] as Record<string, Json>;
  const rows: Row[] = [
    ...encodingRows(example),
    { what: 'not JSON at all', body: '{"not json' },
    { what: 'an empty body', body: '', via: ['nats'] },
    { what: 'JSON text that is a number', body: '42' },
    { what: 'JSON text that is a string', body: '"x"' },
    { what: 'JSON null', body: 'null' },
    { what: 'a JSON array', body: '[]' },
    { what: 'an empty object', body: '{}' },
    { what: 'a number JSON reads as Infinity', body: '1e309' },
    { what: 'the example with an unknown field', body: withField(example, ['zzUnknownField'], '"x"') },
    { what: 'the example with a key __proto__', body: withField(example, ['__proto__'], JSON.stringify(example)) },
    { what: 'the example with keys constructor and prototype', body: withField(withObject(example, 'constructor', { prototype: 'x' }), ['prototype'], '"p"') },
    { what: 'the example as text/plain', body: JSON.stringify(example), contentType: 'text/plain', via: ['http'] },
    { what: 'not JSON, as text/plain', body: 'not json at all', contentType: 'text/plain', via: ['http'] },
    { what: 'a body larger than a NATS message', body: withField(example, ['zzPadding'], JSON.stringify('a'.repeat(2 * 1024 * 1024))), via: ['http'] },
  ];
  if ('idempotencyKey' in example) rows.push({ what: 'an idempotencyKey of 10 kB', body: withField(example, ['idempotencyKey'], JSON.stringify(`p/k:${'k'.repeat(10_000)}`)) });
  for (const { path, value } of fieldPaths(example)) {
    const name = path.join('.');
    rows.push({ what: `without ${name}`, body: withField(example, path, undefined) });
    for (const hostile of hostileValues(value)) rows.push({ what: `${name}: ${hostile.what}`, body: withField(example, path, hostile.text) });
  }
  return rows;
}

/** A row's own idempotency key, so that no row is answered by another's receipt (in bytes read as Latin-1, one character a byte). */
function ownKey(body: string | Buffer, row: number): string | Buffer {
  if (Buffer.isBuffer(body)) return Buffer.from(ownKey(body.toString('latin1'), row) as string, 'latin1');
  return body.replace(/"idempotencyKey":"([^"]*)"/, (_m, key: string) => `"idempotencyKey":${JSON.stringify(`${key}-hostile-${row}`)}`);
}

/** Only UTF-8 is JSON's encoding between systems, and a byte order mark is not JSON text (RFC 8259). */
const strictUtf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** Whether the command's contract takes the request (false when the body is not UTF-8 JSON text). */
function contractTakes(command: CommandContract, body: string | Buffer, contentType: string | undefined): boolean {
  if (contentType && !/^application\/json\s*;\s*charset=utf-8$/i.test(contentType)) return false;
  let value: unknown;
  try {
    value = JSON.parse(typeof body === 'string' ? body : strictUtf8.decode(body));
  } catch {
    return false;
  }
  // The door refuses a key `__proto__` anywhere, which the schema would drop (docs/architecture.md, "Commands").
  return reservedKeyPath(value) === undefined && command.request.safeParse(value).success;
}

interface Reply {
  ok: boolean;
  error?: { code: string; message?: string; issues?: unknown[] };
}

async function overNats(nc: NatsConnection, subject: string, body: string | Buffer): Promise<{ status?: number; reply: Reply | string }> {
  try {
    const msg = await nc.request(subject, body, { timeout: ANSWER_WAIT_MS, headers: natsHeaders() });
    try {
      return { reply: msg.json<Reply>() };
    } catch {
      return { reply: `not JSON: ${msg.string().slice(0, 200)}` };
    }
  } catch (error) {
    return { reply: `no answer: ${String(error)}` };
  }
}

async function overHttp(url: string, name: string, body: string | Buffer, contentType = 'application/json'): Promise<{ status?: number; reply: Reply | string }> {
  try {
    const response = await fetch(`${url}/commands/${name}`, { method: 'POST', headers: { 'content-type': contentType }, body, signal: AbortSignal.timeout(ANSWER_WAIT_MS) });
    const text = await response.text();
    try {
      return { status: response.status, reply: JSON.parse(text) as Reply };
    } catch {
      return { status: response.status, reply: `not JSON: ${text.slice(0, 200)}` };
    }
  } catch (error) {
    return { reply: `no answer: ${String(error)}` };
  }
}

/** What is wrong with an answer, or null: the contract's verdict decides what is expected. */
function fault(answer: { status?: number; reply: Reply | string }, refused: boolean, changed: string[]): string | null {
  const { status, reply } = answer;
  if (typeof reply === 'string') return reply;
  if (status !== undefined && status >= 500) return `HTTP ${status} ${reply.error?.code}: ${reply.error?.message}`;
  if (refused) {
    if (reply.ok) return 'answered ok, though its contract refuses it';
    if (reply.error?.code !== 'INVALID_COMMAND') return `${reply.error?.code}: ${reply.error?.message}`;
    if (!(reply.error.issues && reply.error.issues.length > 0)) return 'INVALID_COMMAND without issues';
    if (status !== undefined && ![400, 413, 415].includes(status)) return `HTTP ${status} for INVALID_COMMAND`;
    if (changed.length > 0) return `refused, yet rows of its schema changed: ${changed.join(', ')}`;
    return null;
  }
  if (!reply.ok && ['INTERNAL', 'UNKNOWN', 'TIMEOUT', 'REPLY_TOO_LARGE'].includes(reply.error?.code ?? '')) return `${reply.error?.code}: ${reply.error?.message}`;
  return null;
}

describe.each(services)('hostile input to every command of $app', ({ app, context, asks }) => {
  const schema = uniqueName(`hostile_${app}`);
  const naming = testNaming(schema);
  const commands = contractRegistry.commands().filter((c) => c.context === context);
  let running: RunningApp;
  let asked: RunningApp[] = [];
  let nc: NatsConnection;
  let jsm: JetStreamManager;
  let db: pg.Client;
  let countRows: () => Promise<Record<string, number>>;

  beforeAll(async () => {
    asked = await Promise.all(asks.map((other) => startApp(other, { schema: `${schema}_${other.replace('-', '_')}`, naming })));
    running = await startApp(app, { schema, naming });
    nc = await connectTestNats();
    jsm = await jetstreamManager(nc);
    db = new pg.Client({ connectionString: testDatabaseUrl });
    await db.connect();
    const { rows } = await db.query<{ table_name: string }>(
      `SELECT table_name FROM information_schema.tables WHERE table_schema = $1 AND table_type = 'BASE TABLE' ORDER BY table_name`,
      [schema],
    );
    const sql = rows.filter((r) => !PERIODIC_TABLES.has(r.table_name)).map((r) => `SELECT '${r.table_name}' AS t, count(*) AS n FROM ${schema}.${r.table_name}`).join(' UNION ALL ');
    countRows = async () => Object.fromEntries((await db.query<{ t: string; n: string }>(sql)).rows.map((r) => [r.t, Number(r.n)]));
    // What each command's valid examples need (a product, a workflow) exists, so that hostile text
    // the contract takes reaches the handler's writes rather than a NOT_FOUND.
    for (const command of commands) {
      for (const example of command.examples.valid) await overNats(nc, commandSubject(naming, context, command.name), JSON.stringify(example));
    }
  });

  /**
   * Waits until what earlier requests set going is over: the outbox published and every durable
   * consumer of the test's streams with nothing pending, so that a row's count sees only its own writes.
   */
  async function settled(): Promise<void> {
    await eventually(
      async () => {
        if (Number((await db.query(`SELECT count(*) AS n FROM ${schema}.outbox`)).rows[0].n) > 0) return false;
        for await (const stream of jsm.streams.list()) {
          if (!stream.config.name.startsWith(naming.streamPrefix)) continue;
          for await (const consumer of jsm.consumers.list(stream.config.name)) {
            if (consumer.num_pending > 0 || consumer.num_ack_pending > 0) return false;
          }
        }
        return true;
      },
      { what: `${app} to settle`, timeoutMs: ANSWER_WAIT_MS },
    );
  }

  afterAll(async () => {
    await nc?.close();
    await db?.end();
    await running?.kill('SIGKILL');
    for (const other of asked) await other.kill('SIGKILL');
    for (const other of asks) await dropSchema(`${schema}_${other.replace('-', '_')}`);
    await removeTestNamespace(naming, schema);
  });

  it.each(commands.map((c) => [c.name, c] as const))('%s answers each hostile request with a typed error and changes nothing it refuses', async (name, command) => {
    const faults: string[] = [];
    const rows = rowsOf(command);
    for (const [index, row] of rows.entries()) {
      const body = ownKey(row.body, index);
      const refused = !contractTakes(command, body, row.contentType);
      for (const via of row.via ?? ['nats', 'http']) {
        await settled();
        const before = await countRows();
        const answer = via === 'nats' ? await overNats(nc, commandSubject(naming, context, name), body) : await overHttp(running.url, name, body, row.contentType);
        const after = await countRows();
        // The relay deletes the outbox rows it published (of requests answered before): the outbox may shrink.
        const changed = Object.keys(after)
          .filter((t) => (t === 'outbox' ? after[t]! > before[t]! : after[t] !== before[t]))
          .map((t) => `${t} ${before[t]}→${after[t]}`);
        const wrong = fault(answer, refused, refused ? changed : []);
        if (wrong) faults.push(`${via} | ${row.what} | ${wrong}`);
      }
    }
    const health = await fetch(`${running.url}/health`).then((r) => r.status, (e: unknown) => String(e));
    expect({ faults, health }).toEqual({ faults: [], health: 200 });
  }, 900_000);
});
