import 'reflect-metadata';
import { randomUUID } from 'node:crypto';
import { Controller, Inject } from '@nestjs/common';
import { z } from 'zod';
import { commandSubject, defineCommand, replicaCommandSubject, type Context } from '@gantry/contracts';
import { Bus, CommandClient, REPLICA_HEADER } from '@gantry/messaging';
import { connectTestNats } from '@gantry/testing';
import { headers as natsHeaders, type NatsConnection } from '@nats-io/transport-node';
import { startTestService, type TestService } from '../../testing.js';
import { CommandHandler } from './decorators.js';
import { GantryTransport } from './gantry-transport.js';

const context: Context = 'workflow';
const LABEL = Symbol('replica label');

/** A command about a thing (its request names it). */
const Touch = defineCommand({
  context,
  name: 'touch_test_thing',
  affinity: { request: (request) => request.thing },
  request: z.object({ thing: z.string().min(1) }),
  reply: z.object({ answeredBy: z.string() }),
  examples: { valid: [{ thing: 't' }], invalid: [{ thing: '' }] },
});
/** A command whose reply makes a thing known (as a claim makes its job known). */
const Open = defineCommand({
  context,
  name: 'open_test_thing',
  affinity: { reply: (reply) => reply.thing },
  request: z.object({}),
  reply: z.object({ thing: z.string(), answeredBy: z.string() }),
  examples: { valid: [{}], invalid: [null] },
});
/** A command about nothing in particular. */
const Ping = defineCommand({
  context,
  name: 'ping_test_replica',
  request: z.object({}),
  reply: z.object({ answeredBy: z.string() }),
  examples: { valid: [{}], invalid: [null] },
});

/** The replica that answers `slow` too late (after the callers' timeouts), if any. */
let stuck: string | null = null;

@Controller()
class ThingCommands {
  constructor(@Inject(LABEL) private readonly label: string) {}

  @CommandHandler(Touch)
  async touch(request: z.infer<typeof Touch.request>) {
    if (request.thing === 'slow' && this.label === stuck) await new Promise((resolve) => setTimeout(resolve, 1500));
    return { answeredBy: this.label };
  }

  @CommandHandler(Open)
  open() {
    return { thing: `thing-${randomUUID()}`, answeredBy: this.label };
  }

  @CommandHandler(Ping)
  ping() {
    return { answeredBy: this.label };
  }
}

describe('affinity: commands about one thing go to the replica that answered the last of them', () => {
  const replicas = new Map<string, TestService>();
  let shared: TestService['naming'] | null;
  let bus: Bus;
  let raw: NatsConnection;

  /** A replica labelled `label` answering on the subjects of the first one (its own schema: these commands keep nothing). */
  const startReplica = async (label: string) => {
    const env: Record<string, string> = shared ? { GANTRY_SUBJECT_ROOT: shared.subjectRoot, GANTRY_STREAM_PREFIX: shared.streamPrefix } : {};
    const service = await startTestService({ label: 'affinity', context, controllers: [ThingCommands], providers: [{ provide: LABEL, useValue: label }], env });
    shared ??= service.naming;
    replicas.set(label, service);
    return service;
  };
  const stopReplica = async (label: string) => {
    await replicas.get(label)!.close();
    replicas.delete(label);
  };

  beforeEach(async () => {
    shared = null;
    stuck = null;
    await startReplica('a');
    await startReplica('b');
    bus = await Bus.connect({ servers: 'nats://127.0.0.1:4222', naming: replicas.get('a')!.naming, name: 'affinity-test' });
    raw = await connectTestNats();
  });

  afterEach(async () => {
    await raw?.close();
    await bus?.close();
    for (const label of [...replicas.keys()]) await stopReplica(label);
  });

  it('the first command about a thing goes to either replica; every later one to the replica that answered', async () => {
    const client = new CommandClient(bus);
    const firsts = new Set<string>();
    for (let i = 0; i < 24; i++) {
      const thing = `thing-${i}`;
      const { answeredBy } = await client.request(Touch, { thing });
      firsts.add(answeredBy);
      for (let j = 0; j < 5; j++) expect((await client.request(Touch, { thing })).answeredBy).toBe(answeredBy);
    }
    // The queue group spread the first ones over both (all 24 on one replica: once in 8 million).
    expect([...firsts].sort()).toEqual(['a', 'b']);
  });

  it('a reply that makes a thing known sends the commands about it to the replica that gave it', async () => {
    const client = new CommandClient(bus);
    for (let i = 0; i < 8; i++) {
      const opened = await client.request(Open, {});
      for (let j = 0; j < 3; j++) expect((await client.request(Touch, { thing: opened.thing })).answeredBy).toBe(opened.answeredBy);
    }
  });

  it('when that replica is gone, the next command about the thing is answered by another, at once and without an error', async () => {
    const client = new CommandClient(bus);
    const { answeredBy: first } = await client.request(Touch, { thing: 'kept' });
    await stopReplica(first);
    const other = first === 'a' ? 'b' : 'a';
    expect((await client.request(Touch, { thing: 'kept' }, { timeoutMs: 2000 })).answeredBy).toBe(other);
    // ...and the ones after it go to that one.
    await startReplica(first);
    for (let j = 0; j < 5; j++) expect((await client.request(Touch, { thing: 'kept' })).answeredBy).toBe(other);
  });

  it('a replica that got the command and did not answer in time is forgotten: the retry goes to the queue group, and another replica answers', async () => {
    const client = new CommandClient(bus);
    const { answeredBy: first } = await client.request(Touch, { thing: 'slow' });
    stuck = first;
    // Every try sent to that replica times out; sent to it each time, the request would never be answered.
    const reply = await client.request(Touch, { thing: 'slow' }, { timeoutMs: 300, retryUntil: Date.now() + 30_000, retryBackoff: { initialMs: 20, maxMs: 50 } });
    expect(reply.answeredBy).toBe(first === 'a' ? 'b' : 'a');
  });

  it("each reply names its replica; only commands with an affinity are served on a replica's own subject", async () => {
    const transport = (service: TestService) => service.app.get(GantryTransport);
    const [a, b] = [transport(replicas.get('a')!), transport(replicas.get('b')!)];
    expect(a.replica).toMatch(/^[0-9a-f]{16}$/);
    expect(a.replica).not.toBe(b.replica);
    const naming = replicas.get('a')!.naming;
    const direct = await raw.request(replicaCommandSubject(naming, context, 'touch_test_thing', b.replica), JSON.stringify({ thing: 'x' }), { timeout: 2000 });
    expect(JSON.parse(new TextDecoder().decode(direct.data))).toEqual({ ok: true, result: { answeredBy: 'b' } });
    expect(direct.headers?.get(REPLICA_HEADER)).toBe(b.replica);
    const shared = await raw.request(commandSubject(naming, context, 'ping_test_replica'), '{}', { timeout: 2000 });
    expect([a.replica, b.replica]).toContain(shared.headers?.get(REPLICA_HEADER));
    await expect(raw.request(replicaCommandSubject(naming, context, 'ping_test_replica', a.replica), '{}', { timeout: 2000 })).rejects.toThrow(/no responders/i);
  });

  it('a reply whose replica token is not one subject token is answered as usual, and the token is not remembered', async () => {
    const naming = { subjectRoot: `${replicas.get('a')!.naming.subjectRoot}_fake`, streamPrefix: 'UNUSED_' };
    const fakeBus = await Bus.connect({ servers: 'nats://127.0.0.1:4222', naming, name: 'affinity-fake' });
    const subjects: string[] = [];
    const fake = raw.subscribe(commandSubject(naming, context, 'touch_test_thing'), {
      callback: (_, msg) => {
        subjects.push(msg.subject);
        const headers = natsHeaders();
        headers.set(REPLICA_HEADER, 'not.a.token');
        msg.respond(JSON.stringify({ ok: true, result: { answeredBy: 'fake' } }), { headers });
      },
    });
    await raw.flush();
    try {
      const client = new CommandClient(fakeBus);
      expect(await client.request(Touch, { thing: 'x' })).toEqual({ answeredBy: 'fake' });
      expect(await client.request(Touch, { thing: 'x' })).toEqual({ answeredBy: 'fake' });
      expect(subjects).toEqual([commandSubject(naming, context, 'touch_test_thing'), commandSubject(naming, context, 'touch_test_thing')]);
    } finally {
      fake.unsubscribe();
      await fakeBus.close();
    }
  });

  it('a replica token that is not one subject token is refused', () => {
    expect(() => replicaCommandSubject(replicas.get('a')!.naming, context, 'touch_test_thing', 'a.b')).toThrow(/single NATS subject token/);
  });
});
