import 'reflect-metadata';
import { randomUUID } from 'node:crypto';
import { Controller, Inject } from '@nestjs/common';
import type pg from 'pg';
import { z } from 'zod';
import { defineCommand, ErrorCode, GantryError, commandSubject, type Context } from '@gantry/contracts';
import { EventStore } from '@gantry/eventstore';
import { Bus, CommandClient } from '@gantry/messaging';
import { connectTestNats, eventually, startCuttableProxy, testNatsUrl, testNaming, uniqueName } from '@gantry/testing';
import type { NatsConnection } from '@nats-io/transport-node';
import { startTestService, type TestService } from '../../testing.js';
import { CommandHandler } from './decorators.js';

const context: Context = 'workflow';
const Deposit = defineCommand({
  context,
  name: 'deposit_test_money',
  request: z.object({ account: z.string().min(1), amount: z.number().int().positive(), idempotencyKey: z.string().min(1) }),
  reply: z.object({ balance: z.number().int(), eventCount: z.number().int() }),
  examples: { valid: [{ account: 'a', amount: 1, idempotencyKey: 'k' }], invalid: [{ account: '', amount: -1 }] },
});
const Refuse = defineCommand({
  context,
  name: 'refuse_test_request',
  request: z.object({}),
  reply: z.object({}),
  examples: { valid: [{}], invalid: [null] },
});

/** Appends one event, then answers with `size` characters: more than the bus carries when asked. */
const Write = defineCommand({
  context,
  name: 'write_large_test_answer',
  request: z.object({ account: z.string().min(1), size: z.number().int().min(0) }),
  reply: z.object({ text: z.string() }),
  examples: { valid: [{ account: 'a', size: 1 }], invalid: [{ account: '' }] },
});
/** Refuses with `issues` issues, and the message listing them all (as invalidCommand's does). */
const RefuseMany = defineCommand({
  context,
  name: 'refuse_with_many_issues',
  request: z.object({ issues: z.number().int().min(0) }),
  reply: z.object({}),
  examples: { valid: [{ issues: 1 }], invalid: [{}] },
});

/** A command of the context that the running service has no handler for (a newer caller's, say). */
const Unserved = defineCommand({
  context,
  name: 'unserved_test_command',
  request: z.object({ idempotencyKey: z.string().min(1) }),
  reply: z.object({}),
  examples: { valid: [{ idempotencyKey: 'k' }], invalid: [{}] },
});

/** Stores free-form data (a record, as a job's payload) and answers what it stored. */
const Keep = defineCommand({
  context,
  name: 'keep_test_data',
  request: z.object({ account: z.string().min(1), data: z.record(z.string(), z.unknown()) }),
  reply: z.object({ stored: z.unknown() }),
  examples: { valid: [{ account: 'a', data: {} }], invalid: [{ account: '' }] },
});

let slowFirstCall = false;

@Controller()
class AccountCommands {
  constructor(@Inject(EventStore) private readonly store: EventStore) {}

  @CommandHandler(Deposit)
  async deposit(request: z.infer<typeof Deposit.request>) {
      const outcome = await this.store.execute(
        { metadata: { correlationId: 'c' }, idempotency: { scope: 'deposit', key: request.idempotencyKey, request } },
        async (uow) => {
          const history = await uow.readStream(`account-${request.account}`);
          await uow.append(`account-${request.account}`, history.length, [{ type: 'Deposited', data: { amount: request.amount } }]);
          const balance = history.reduce((sum, e) => sum + (e.data as { amount: number }).amount, request.amount);
          return { balance, eventCount: history.length + 1 };
        },
      );
      if (slowFirstCall) {
        slowFirstCall = false;
        await new Promise((r) => setTimeout(r, 1500)); // committed, but the reply comes too late
      }
      return outcome.result;
  }

  @CommandHandler(Write)
  async write(request: z.infer<typeof Write.request>) {
    await this.store.execute({ metadata: { correlationId: 'c' } }, async (uow) => {
      await uow.append(`large-${request.account}`, 0, [{ type: 'Written', data: { size: request.size } }]);
    });
    return { text: 'x'.repeat(request.size) };
  }

  @CommandHandler(Keep)
  async keep(request: z.infer<typeof Keep.request>) {
    await this.store.execute({ metadata: { correlationId: 'c' } }, async (uow) => {
      await uow.append(`kept-${request.account}`, 0, [{ type: 'Kept', data: request.data }]);
    });
    const { rows } = await this.store.pool.query('SELECT data FROM events WHERE stream_id = $1', [`kept-${request.account}`]);
    return { stored: rows[0].data };
  }

  @CommandHandler(RefuseMany)
  async refuseMany(request: z.infer<typeof RefuseMany.request>): Promise<never> {
    const issues = Array.from({ length: request.issues }, (_, i) => ({ path: ['items', i, 'name'], message: `item ${i} has no name`, code: 'custom' }));
    throw new GantryError(ErrorCode.INVALID_COMMAND, `invalid: ${issues.map((i) => i.message).join('; ')}`, { seen: request.issues }, issues);
  }

  @CommandHandler(Refuse)
  async refuse(): Promise<never> {
    throw new GantryError(ErrorCode.INVALID_TRANSITION, 'not now');
  }
}

describe('commands over NATS request/reply', () => {
  let service: TestService;
  let naming: TestService['naming'];
  let pool: pg.Pool;
  let client: CommandClient;
  let raw: NatsConnection;

  beforeAll(async () => {
    service = await startTestService({ label: 'commands', context, controllers: [AccountCommands] });
    naming = service.naming;
    pool = service.app.get(EventStore).pool;
    client = service.app.get(CommandClient);
    raw = await connectTestNats();
  });

  afterAll(async () => {
    await raw.close();
    await service.close();
  });

  const eventCount = async () => Number((await pool.query('SELECT count(*) FROM events')).rows[0].count);
  const rawRequest = async (command: string, body: string) =>
    JSON.parse(new TextDecoder().decode((await raw.request(commandSubject(naming, context, command), body, { timeout: 5000 })).data));

  it('answers a valid command with its typed result', async () => {
    const reply = await client.request(Deposit, { account: randomUUID(), amount: 5, idempotencyKey: randomUUID() });
    expect(reply).toEqual({ balance: 5, eventCount: 1 });
  });

  it('answers malformed JSON with INVALID_COMMAND and writes nothing', async () => {
    const before = await eventCount();
    const reply = await rawRequest('deposit_test_money', '{"account": ');
    expect(reply).toMatchObject({ ok: false, error: { code: 'INVALID_COMMAND' } });
    expect(reply.error.issues).toEqual([expect.objectContaining({ message: 'malformed JSON' })]);
    expect(await eventCount()).toBe(before);
  });

  it('refuses a body that is not UTF-8 JSON text with its issue, over NATS and over HTTP alike, and writes nothing', async () => {
    const keep = (bytes: number[]) => Buffer.concat([Buffer.from('{"account":"utf8","data":{"note":"a'), Buffer.from(bytes), Buffer.from('"}}')]);
    const bodies: [string, Buffer, string][] = [
      ['a lone FF byte', keep([0xff]), 'invalid_utf8'],
      ['a truncated sequence', keep([0xe2, 0x82]), 'invalid_utf8'],
      ['an overlong /', keep([0xc0, 0xaf]), 'invalid_utf8'],
      ['an encoded surrogate', keep([0xed, 0xa0, 0x80]), 'invalid_utf8'],
      ['a byte order mark', Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), keep([])]), 'invalid_json'],
    ];
    const before = await eventCount();
    const answers = [];
    for (const [what, body, issue] of bodies) {
      const overNats = JSON.parse(new TextDecoder().decode((await raw.request(commandSubject(naming, context, 'keep_test_data'), body, { timeout: 5000 })).data));
      const response = await fetch(`${service.url}/commands/keep_test_data`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
      const refusal = { code: 'INVALID_COMMAND', message: expect.any(String), issues: [expect.objectContaining({ path: [], code: issue })] };
      answers.push({ what, nats: overNats, http: { status: response.status, body: await response.json() } });
      expect(answers.at(-1)).toEqual({ what, nats: { ok: false, error: refusal }, http: { status: 400, body: { ok: false, error: refusal } } });
    }
    // A charset other than UTF-8 is refused as such, not decoded.
    for (const charset of ['utf-16le', 'iso-8859-1']) {
      const response = await fetch(`${service.url}/commands/keep_test_data`, { method: 'POST', headers: { 'content-type': `application/json; charset=${charset}` }, body: Buffer.from(keep([]).toString(), charset === 'utf-16le' ? 'utf16le' : 'latin1') });
      expect({ charset, status: response.status, body: await response.json() }).toEqual({
        charset,
        status: 415,
        body: { ok: false, error: { code: 'INVALID_COMMAND', message: expect.any(String), issues: [expect.objectContaining({ code: 'unsupported_charset' })] } },
      });
    }
    expect(await eventCount()).toBe(before);
    // UTF-8 text beyond ASCII is taken as sent, over both.
    const text = 'é€😀';
    for (const via of ['nats', 'http']) {
      const body = JSON.stringify({ account: `utf8-${via}`, data: { note: text } });
      const reply =
        via === 'nats'
          ? JSON.parse(new TextDecoder().decode((await raw.request(commandSubject(naming, context, 'keep_test_data'), body, { timeout: 5000 })).data))
          : await (await fetch(`${service.url}/commands/keep_test_data`, { method: 'POST', headers: { 'content-type': 'application/json; charset=UTF-8' }, body })).json();
      expect({ via, reply }).toEqual({ via, reply: { ok: true, result: { stored: { note: text } } } });
    }
  });

  it('answers a schema-invalid payload with INVALID_COMMAND listing every issue, and writes nothing', async () => {
    const before = await eventCount();
    const reply = await rawRequest('deposit_test_money', JSON.stringify({ account: '', amount: 'ten' }));
    expect(reply.ok).toBe(false);
    expect(reply.error.code).toBe('INVALID_COMMAND');
    const paths = reply.error.issues.map((i: { path: string[] }) => i.path.join('.')).sort();
    expect(paths).toEqual(['account', 'amount', 'idempotencyKey']);
    expect(await eventCount()).toBe(before);
    // and the server is still answering
    await expect(client.request(Deposit, { account: randomUUID(), amount: 1, idempotencyKey: randomUUID() })).resolves.toBeDefined();
  });

  it('passes a domain refusal through as a typed error', async () => {
    await expect(client.request(Refuse, {})).rejects.toMatchObject({ code: ErrorCode.INVALID_TRANSITION, message: 'not now' });
  });

  it('the client refuses to send an invalid request', async () => {
    await expect(client.request(Deposit, { account: '', amount: 1, idempotencyKey: 'k' })).rejects.toMatchObject({
      code: ErrorCode.INVALID_COMMAND,
    });
  });

  it('a lost reply: the caller times out, retries with the same key and gets the first result', async () => {
    const account = randomUUID();
    const key = randomUUID();
    slowFirstCall = true;
    await expect(client.request(Deposit, { account, amount: 7, idempotencyKey: key }, { timeoutMs: 300 })).rejects.toMatchObject({
      code: ErrorCode.TIMEOUT,
    });
    const events = async () => Number((await pool.query('SELECT count(*) FROM events WHERE stream_id = $1', [`account-${account}`])).rows[0].count);
    // The retry comes after the first call committed (its reply is what was lost).
    await eventually(async () => (await events()) === 1, { what: 'the first call committed' });
    const retry = await client.request(Deposit, { account, amount: 7, idempotencyKey: key });
    expect(retry).toEqual({ balance: 7, eventCount: 1 });
    expect(await events()).toBe(1);
  });

  it('with a deadline, a request without an answer is sent again under the same key and returns the first result', async () => {
    const account = randomUUID();
    const key = randomUUID();
    slowFirstCall = true;
    const reply = await client.request(Deposit, { account, amount: 3, idempotencyKey: key }, { timeoutMs: 300, retryUntil: Date.now() + 20_000 });
    expect(reply).toEqual({ balance: 3, eventCount: 1 });
    const { rows } = await pool.query('SELECT count(*) FROM events WHERE stream_id = $1', [`account-${account}`]);
    expect(Number(rows[0].count)).toBe(1);
  });

  it('onTryStarted is told when each try is sent: the last moment told before the answer is the start of the try that got it', async () => {
    const tries: number[] = [];
    slowFirstCall = true;
    const sentAt = Date.now();
    const reply = await client.request(Deposit, { account: randomUUID(), amount: 2, idempotencyKey: randomUUID() }, {
      timeoutMs: 300,
      retryUntil: Date.now() + 20_000,
      onTryStarted: (at) => {
        tries.push(at);
      },
    });
    const answeredAt = Date.now();
    expect(reply).toEqual({ balance: 2, eventCount: 1 });
    // The first try's answer came too late; a later one got the stored answer.
    expect(tries.length).toBeGreaterThanOrEqual(2);
    expect(tries[0]).toBeGreaterThanOrEqual(sentAt);
    expect(tries.at(-1)! - tries[0]!).toBeGreaterThanOrEqual(300);
    expect(tries.at(-1)).toBeLessThanOrEqual(answeredAt);
    // Without a deadline: one try, told once.
    const once: number[] = [];
    await client.request(Deposit, { account: randomUUID(), amount: 1, idempotencyKey: randomUUID() }, { timeoutMs: 5_000, onTryStarted: (at) => void once.push(at) });
    expect(once).toHaveLength(1);
  });

  it('with a deadline, a service that is not there yet (UNAVAILABLE) is asked again until it answers', async () => {
    const lateNaming = testNaming(uniqueName('late'));
    const lateBus = await Bus.connect({ servers: 'nats://127.0.0.1:4222', naming: lateNaming, name: 'late' });
    let late: TestService | null = null;
    try {
      const pending = new CommandClient(lateBus).request(Refuse, {}, { timeoutMs: 1000, retryUntil: Date.now() + 60_000, retryBackoff: { initialMs: 50, maxMs: 100 } });
      // No service answers on these subjects yet: the client is turned away (UNAVAILABLE) and keeps asking.
      await new Promise((r) => setTimeout(r, 300));
      late = await startTestService({ label: 'late', context, controllers: [AccountCommands], env: { GANTRY_SUBJECT_ROOT: lateNaming.subjectRoot } });
      await expect(pending).rejects.toMatchObject({ code: ErrorCode.INVALID_TRANSITION });
    } finally {
      await late?.close();
      await lateBus.close();
    }
  });

  it('with outagesStopTheClock, a service that is not there for longer than the deadline is asked again until it answers; onClockStopped is told the time nobody served', async () => {
    const lateNaming = testNaming(uniqueName('outage'));
    const lateBus = await Bus.connect({ servers: 'nats://127.0.0.1:4222', naming: lateNaming, name: 'outage' });
    let late: TestService | null = null;
    try {
      const askedAt = Date.now();
      const deadline = askedAt + 500;
      let stopped = 0;
      const onClockStopped = (ms: number) => {
        stopped += ms;
      };
      const pending = new CommandClient(lateBus).request(Refuse, {}, { timeoutMs: 1000, retryUntil: deadline, outagesStopTheClock: true, onClockStopped, retryBackoff: { initialMs: 50, maxMs: 100 } });
      const settled = pending.then(() => 'answered', () => 'answered');
      // nobody serves the subject until well past the deadline: the time nobody served does not count
      await new Promise((r) => setTimeout(r, 1500));
      expect(await Promise.race([settled, Promise.resolve('still asking')])).toBe('still asking');
      const startedAt = Date.now();
      late = await startTestService({ label: 'outage', context, controllers: [AccountCommands], env: { GANTRY_SUBJECT_ROOT: lateNaming.subjectRoot } });
      await expect(pending).rejects.toMatchObject({ code: ErrorCode.INVALID_TRANSITION });
      // from the first try to the one answered, all was outage: the moment asked, moved on by it, is when the answered try went
      expect(stopped).toBeGreaterThanOrEqual(1500);
      expect(askedAt + stopped).toBeGreaterThanOrEqual(startedAt - 50);
      expect(askedAt + stopped).toBeLessThanOrEqual(Date.now());
    } finally {
      await late?.close();
      await lateBus.close();
    }
  });

  it('with outagesStopTheClock, a busy process that wakes late from its pauses during an outage gets no less time', async () => {
    const lateNaming = testNaming(uniqueName('busy'));
    const lateBus = await Bus.connect({ servers: 'nats://127.0.0.1:4222', naming: lateNaming, name: 'busy' });
    let late: TestService | null = null;
    // The process is busy while nobody serves: each pause between tries ends up to 200 ms late.
    const busy = setInterval(() => {
      const until = Date.now() + 200;
      while (Date.now() < until);
    }, 20);
    try {
      const deadline = Date.now() + 500;
      const pending = new CommandClient(lateBus).request(Refuse, {}, { timeoutMs: 1000, retryUntil: deadline, outagesStopTheClock: true, retryBackoff: { initialMs: 50, maxMs: 100 } });
      const settled = pending.then(() => 'answered', () => 'answered');
      await new Promise((r) => setTimeout(r, 2000));
      clearInterval(busy);
      expect(await Promise.race([settled, Promise.resolve('still asking')])).toBe('still asking');
      late = await startTestService({ label: 'busy', context, controllers: [AccountCommands], env: { GANTRY_SUBJECT_ROOT: lateNaming.subjectRoot } });
      await expect(pending).rejects.toMatchObject({ code: ErrorCode.INVALID_TRANSITION });
    } finally {
      clearInterval(busy);
      await late?.close();
      await lateBus.close();
    }
  });

  const stopTheClock = { timeoutMs: 1000, outagesStopTheClock: true, retryBackoff: { initialMs: 50, maxMs: 100 } };

  it('with outagesStopTheClock, an UNAVAILABLE a service answers itself counts against the deadline: only nobody serving stops the clock', async () => {
    // A service that runs and answers "unavailable" (stopping, its database away) is not an outage of the service.
    const answering = await Bus.connect({ servers: 'nats://127.0.0.1:4222', naming: testNaming(uniqueName('answering')), name: 'answering' });
    const sub = raw.subscribe(commandSubject(answering.naming, context, 'refuse_test_request'), {
      callback: (_error, msg) => void msg.respond(JSON.stringify({ ok: false, error: { code: ErrorCode.UNAVAILABLE, message: 'the service is stopping; send it again' } })),
    });
    await raw.flush();
    try {
      await expect(new CommandClient(answering).request(Refuse, {}, { ...stopTheClock, retryUntil: Date.now() + 700 })).rejects.toMatchObject({
        code: ErrorCode.UNAVAILABLE,
        message: 'the service is stopping; send it again',
      });
    } finally {
      sub.unsubscribe();
      await answering.close();
    }
  }, 60_000);

  it('with outagesStopTheClock, a connection to NATS that is closed counts against the deadline: from here a NATS that is down and this process cut off from it look alike', async () => {
    const closed = await Bus.connect({ servers: 'nats://127.0.0.1:4222', naming: testNaming(uniqueName('closed')), name: 'closed' });
    await closed.close();
    await expect(new CommandClient(closed).request(Refuse, {}, { ...stopTheClock, retryUntil: Date.now() + 700 })).rejects.toMatchObject({
      code: ErrorCode.UNAVAILABLE,
      message: expect.stringContaining('NATS is not reachable'),
    });
  }, 60_000);

  it('with outagesStopTheClock, a connection to NATS that is cut counts against the deadline: its tries time out and the request gives up', async () => {
    const proxy = await startCuttableProxy(testNatsUrl);
    const cutOff = await Bus.connect({ servers: proxy.url, naming: naming, name: 'cut-off' });
    try {
      proxy.cut();
      await eventually(() => !cutOff.connected, { what: 'the connection seen lost' });
      await expect(
        new CommandClient(cutOff).request(Deposit, { account: randomUUID(), amount: 1, idempotencyKey: randomUUID() }, { timeoutMs: 300, retryUntil: Date.now() + 1000, outagesStopTheClock: true, retryBackoff: { initialMs: 50, maxMs: 100 } }),
      ).rejects.toMatchObject({ code: ErrorCode.TIMEOUT });
    } finally {
      proxy.restore();
      await cutOff.close();
      await proxy.close();
    }
  }, 60_000);

  /** What a request has come to after `ms`: its error's code, or 'still asking'. */
  const outcomeAfter = (pending: Promise<unknown>, ms: number) =>
    Promise.race([pending.then(() => 'answered', (error: { code?: string }) => error.code ?? 'failed'), new Promise((r) => setTimeout(() => r('still asking'), ms))]);

  it('abandoned: a try in flight to a silent service is given up at once (TIMEOUT), not at the end of its own timeout, and nothing is sent again', async () => {
    // A service that takes the request and never answers it (frozen, its bus cut after the request came).
    const silent = await Bus.connect({ servers: 'nats://127.0.0.1:4222', naming: testNaming(uniqueName('silent')), name: 'silent' });
    const seen: string[] = [];
    const sub = raw.subscribe(commandSubject(silent.naming, context, 'refuse_test_request'), { callback: () => void seen.push('refuse') });
    await raw.flush();
    try {
      const deadline = new AbortController();
      const pending = new CommandClient(silent).request(Refuse, {}, { timeoutMs: 30_000, retryUntil: Date.now() + 60_000, abandon: deadline.signal });
      await eventually(() => seen.length === 1, { what: 'the try delivered' });
      deadline.abort();
      expect(await outcomeAfter(pending, 2000)).toBe(ErrorCode.TIMEOUT);
      await raw.flush();
      expect(seen).toHaveLength(1);
    } finally {
      sub.unsubscribe();
      await silent.close();
    }
  }, 60_000);

  it('abandoned: with outagesStopTheClock and nobody serving, the retries end at the deadline, though the outage stopped the clock', async () => {
    const nobody = await Bus.connect({ servers: 'nats://127.0.0.1:4222', naming: testNaming(uniqueName('abandoned')), name: 'abandoned' });
    try {
      const deadline = new AbortController();
      const pending = new CommandClient(nobody).request(Refuse, {}, { ...stopTheClock, retryUntil: Date.now() + 200, abandon: deadline.signal });
      await new Promise((r) => setTimeout(r, 600));
      deadline.abort();
      expect(await outcomeAfter(pending, 2000)).toMatch(new RegExp(`^(${ErrorCode.UNAVAILABLE}|${ErrorCode.TIMEOUT})$`));
    } finally {
      await nobody.close();
    }
  }, 60_000);

  it('with a deadline, a refusal is not repeated, and an unanswered request gives up once the deadline has passed', async () => {
    const seen: string[] = [];
    const sub = raw.subscribe(commandSubject(naming, context, 'refuse_test_request'), { callback: () => void seen.push('refuse') });
    await raw.flush(); // the server knows of the watcher before the request is sent
    try {
      await expect(client.request(Refuse, {}, { retryUntil: Date.now() + 10_000 })).rejects.toMatchObject({ code: ErrorCode.INVALID_TRANSITION });
      await raw.flush();
      expect(seen).toHaveLength(1);
    } finally {
      sub.unsubscribe();
    }
    const nobody = await Bus.connect({ servers: 'nats://127.0.0.1:4222', naming: testNaming(uniqueName('nobody')), name: 'c2' });
    const deadline = Date.now() + 700;
    await expect(
      new CommandClient(nobody).request(Refuse, {}, { retryUntil: deadline, retryBackoff: { initialMs: 50, maxMs: 100 } }),
    ).rejects.toMatchObject({ code: ErrorCode.UNAVAILABLE });
    expect(Date.now()).toBeGreaterThanOrEqual(deadline - 150);
    await nobody.close();
  });

  it('a result larger than the bus carries: the command is done once and its caller is told so (REPLY_TOO_LARGE), not left to time out', async () => {
    const account = randomUUID();
    const limit = raw.info!.max_payload;
    const started = Date.now();
    const error = await client.request(Write, { account, size: limit + 10 }, { timeoutMs: 5000 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(GantryError);
    expect(error).toMatchObject({ code: ErrorCode.REPLY_TOO_LARGE, details: { succeeded: true } });
    expect((error as GantryError).message).toMatch(/succeeded.*POST \/commands\/write_large_test_answer/);
    expect(Date.now() - started).toBeLessThan(4000);
    const { rows } = await pool.query('SELECT count(*) FROM events WHERE stream_id = $1', [`large-${account}`]);
    expect(Number(rows[0].count)).toBe(1);
    // just under the limit is answered in full
    await expect(client.request(Write, { account: randomUUID(), size: limit - 2048 })).resolves.toEqual({ text: 'x'.repeat(limit - 2048) });
  });

  it('a refusal larger than the bus carries arrives with the same code, as many issues as fit and how many more there were', async () => {
    const error = await client.request(RefuseMany, { issues: 50_000 }, { timeoutMs: 5000 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(GantryError);
    const { code, issues, message, details } = error as GantryError;
    expect(code).toBe(ErrorCode.INVALID_COMMAND);
    expect(details).toEqual({ seen: 50_000 });
    expect(message.length).toBeLessThanOrEqual(2000);
    expect(issues!.length).toBeGreaterThan(1000);
    expect(issues!.slice(0, 3)).toEqual([0, 1, 2].map((i) => ({ path: ['items', i, 'name'], message: `item ${i} has no name`, code: 'custom' })));
    expect(issues!.at(-1)).toEqual({ path: [], message: `and ${50_000 - (issues!.length - 1)} more issues`, code: 'too_many_issues' });
    // a refusal that fits is untouched
    const small = (await client.request(RefuseMany, { issues: 3 }).catch((e: unknown) => e)) as GantryError;
    expect(small.issues).toHaveLength(3);
    expect(small.message).toBe('invalid: item 0 has no name; item 1 has no name; item 2 has no name');
  });

  it('a request larger than the bus carries is refused INVALID_COMMAND by the client, sent nowhere', async () => {
    const error = await client.request(Write, { account: 'x'.repeat(raw.info!.max_payload), size: 1 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(GantryError);
    expect(error).toMatchObject({ code: ErrorCode.INVALID_COMMAND, message: expect.stringMatching(/larger than NATS carries.*nothing was sent/) });
  });

  it('a __proto__ key anywhere in a request is refused INVALID_COMMAND with its path, over NATS and HTTP, and nothing is written; constructor and prototype are kept as data', async () => {
    const account = randomUUID();
    const kept = async () => Number((await pool.query('SELECT count(*) FROM events WHERE stream_id = $1', [`kept-${account}`])).rows[0].count);
    const body = `{"account":"${account}","data":{"config":{"__proto__":{"role":"r"}}}}`;
    const overNats = await rawRequest('keep_test_data', body);
    expect(overNats).toMatchObject({ ok: false, error: { code: 'INVALID_COMMAND', issues: [{ path: ['data', 'config', '__proto__'], code: 'reserved_key' }] } });
    const overHttp = await fetch(`${service.url}/commands/keep_test_data`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    expect(overHttp.status).toBe(400);
    expect(await overHttp.json()).toMatchObject({ ok: false, error: { code: 'INVALID_COMMAND', issues: [{ path: ['data', 'config', '__proto__'] }] } });
    expect(await rawRequest('keep_test_data', `{"account":"${account}","__proto__":{"data":{}},"data":{}}`)).toMatchObject({ ok: false, error: { code: 'INVALID_COMMAND' } });
    expect(await kept()).toBe(0);
    const faithful = await rawRequest('keep_test_data', `{"account":"${account}","data":{"constructor":{"prototype":{"x":1}},"prototype":"p"}}`);
    expect(JSON.stringify(faithful)).toBe('{"ok":true,"result":{"stored":{"constructor":{"prototype":{"x":1}},"prototype":"p"}}}');
    expect(({} as Record<string, unknown>).role).toBeUndefined();
  });

  it('a command the running service does not serve is refused INVALID_COMMAND at once, not UNAVAILABLE: sending it again would never help', async () => {
    await expect(client.request(Unserved, { idempotencyKey: randomUUID() })).rejects.toMatchObject({
      code: ErrorCode.INVALID_COMMAND,
      message: expect.stringContaining('workflow.unserved_test_command'),
    });
    // Under a deadline whose clock stops while nobody serves (a runner's claim): refused, not asked for ever.
    const started = Date.now();
    await expect(
      client.request(Unserved, { idempotencyKey: randomUUID() }, { timeoutMs: 1000, retryUntil: Date.now() + 2000, outagesStopTheClock: true, retryBackoff: { initialMs: 50, maxMs: 100 } }),
    ).rejects.toMatchObject({ code: ErrorCode.INVALID_COMMAND });
    expect(Date.now() - started).toBeLessThan(1500);
  });

  it('reports UNAVAILABLE when no service answers', async () => {
    const other = await Bus.connect({ servers: 'nats://127.0.0.1:4222', naming: testNaming(uniqueName('nobody')), name: 'c' });
    await expect(new CommandClient(other).request(Refuse, {})).rejects.toMatchObject({ code: ErrorCode.UNAVAILABLE });
    await other.close();
  });

});
