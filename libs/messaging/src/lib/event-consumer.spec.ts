import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { z } from 'zod';
import { commandSubject, defineCommand, defineEvent, ErrorCode, eventSubject, streamName, type Context, type EventEnvelope } from '@gantry/contracts';
import { createPool, migrate, pruneExpired } from '@gantry/eventstore';
import {
  consumerCaughtUp,
  deleteStreams,
  dropSchema,
  eventually,
  startCuttableProxy,
  startScratchPostgres,
  testDatabaseUrl,
  testNatsUrl,
  testNaming,
  uniqueName,
  type CuttableProxy,
  type ScratchServer,
} from '@gantry/testing';
import { Bus } from './bus.js';
import { CommandClient } from './commands.js';
import { replayDeadLetters } from './dead-letters.js';
import { EventConsumer, RetryLater, type BeforeCommit } from './event-consumer.js';

const context: Context = 'prs';
defineEvent({
  context,
  type: 'ConsumerTestPinged',
  schemaVersion: 1,
  data: z.object({ n: z.number().int() }),
  examples: { valid: [{ n: 1 }], invalid: [{ n: 'x' }] },
});

defineEvent({
  context,
  type: 'ConsumerTestIgnored',
  schemaVersion: 1,
  data: z.object({ n: z.number().int() }),
  examples: { valid: [{ n: 1 }], invalid: [{ n: 'x' }] },
});

/** A command of another service a handler asks (see the outage tests). */
const LookUp = defineCommand({
  context,
  name: 'consumer_test_look_up',
  request: z.object({ n: z.number().int() }),
  reply: z.object({}),
  examples: { valid: [{ n: 1 }], invalid: [{ n: 'x' }] },
});

const logger = { log: () => undefined, warn: () => undefined, error: () => undefined };

function envelope(n: unknown, eventId = randomUUID()) {
  return {
    eventId,
    type: 'ConsumerTestPinged',
    schemaVersion: 1,
    streamId: 'pr-1',
    streamVersion: 1,
    position: 1,
    occurredAt: new Date().toISOString(),
    correlationId: 'c',
    causationId: null,
    idempotencyKey: null,
    actor: null,
    data: { n },
  };
}

describe('durable event consumer', () => {
  const name = uniqueName('consumer');
  const naming = testNaming(name);
  let pool: pg.Pool;
  let bus: Bus;
  const consumers: EventConsumer[] = [];

  beforeAll(async () => {
    await migrate({ url: testDatabaseUrl, schema: name });
    pool = createPool({ url: testDatabaseUrl, schema: name });
    await pool.query('CREATE TABLE pings (event_id text PRIMARY KEY, n int NOT NULL)');
    bus = await Bus.connect({ servers: 'nats://127.0.0.1:4222', naming, name: 'consumer-test' });
    await bus.ensureEventStream(context);
  });

  afterAll(async () => {
    await Promise.all(consumers.map((c) => c.stop()));
    await deleteStreams(bus.nc, naming.streamPrefix);
    await bus.close();
    await pool.end();
    await dropSchema(name);
  });

  const publish = (body: unknown, msgID?: string) =>
    bus.js.publish(eventSubject(naming, context, 'ConsumerTestPinged', 'pr-1'), typeof body === 'string' ? body : JSON.stringify(body), msgID ? { msgID } : undefined);

  function startConsumer(
    durable: string,
    handle: (n: number, eventId: string, sql: pg.PoolClient, beforeCommit: BeforeCommit, batch: readonly EventEnvelope[]) => Promise<void>,
    extra: Partial<ConstructorParameters<typeof EventConsumer>[0]> = {},
  ) {
    const consumer = new EventConsumer({
      name: durable,
      bus,
      pool,
      source: context,
      logger,
      handle: (event, sql, beforeCommit, batch) => handle((event.data as { n: number }).n, event.eventId, sql, beforeCommit, batch),
      backoffMs: () => 50,
      ...extra,
    });
    consumers.push(consumer);
    consumer.start();
    return consumer;
  }

  const rows = async () => (await pool.query('SELECT n FROM pings ORDER BY n')).rows.map((r) => r.n);

  beforeEach(async () => {
    await Promise.all(consumers.splice(0).map((c) => c.stop()));
    await bus.jsm.streams.purge(streamName(naming, context));
    await pool.query('TRUNCATE pings, inbox, dead_letters');
  });

  const insertPing = async (n: number, eventId: string, sql: pg.PoolClient) => {
    await sql.query('INSERT INTO pings (event_id, n) VALUES ($1, $2)', [eventId, n]);
  };

  it('an already-processed message delivered again changes nothing', async () => {
    const durable = `d${randomUUID().slice(0, 8)}`;
    const same = envelope(1);
    await publish(same, 'first-copy');
    await publish(same, 'second-copy'); // a different message id: JetStream delivers both
    startConsumer(durable, insertPing);
    await eventually(async () => {
      const info = await bus.jsm.consumers.info(streamName(naming, context), durable);
      return info.num_ack_pending === 0 && info.num_pending === 0 && info.delivered.stream_seq >= 2;
    }, { what: 'both copies acked' });
    expect(await rows()).toEqual([1]);
    const inbox = await pool.query('SELECT count(*) FROM inbox WHERE consumer = $1', [durable]);
    expect(Number(inbox.rows[0].count)).toBe(1);
  });

  it('an invalid payload is dead-lettered with its zod issues, and later valid messages are still processed', async () => {
    const durable = `d${randomUUID().slice(0, 8)}`;
    await publish(envelope('not a number'));
    await publish('{ this is not json');
    await publish(envelope(2));
    startConsumer(durable, insertPing);
    await eventually(async () => (await rows()).includes(2), { what: 'the valid message processed' });
    const dead = await pool.query('SELECT error FROM dead_letters WHERE consumer = $1 ORDER BY id', [durable]);
    expect(dead.rows).toHaveLength(2);
    expect(dead.rows[0].error).toMatchObject({ kind: 'invalid_payload', issues: [expect.objectContaining({ path: ['n'] })] });
    expect(dead.rows[1].error).toMatchObject({ kind: 'invalid_payload', message: 'the payload is not valid JSON' });
  });

  it('a payload with a NUL byte (text PostgreSQL cannot keep) is dead-lettered like any bad payload, not handed back for ever', async () => {
    const durable = `d${randomUUID().slice(0, 8)}`;
    await publish('{"not": "an event"}\u0000');
    await publish(envelope(2));
    startConsumer(durable, insertPing, { maxDeliver: 2 });
    await eventually(async () => (await rows()).includes(2), { what: 'the valid message processed' });
    const dead = await eventually(async () => (await pool.query('SELECT payload, error FROM dead_letters WHERE consumer = $1', [durable])).rows[0], { what: 'dead letter' });
    expect(dead).toMatchObject({ payload: '{"not": "an event"}\uFFFD', error: { kind: 'invalid_payload' } });
    // Terminated, not handed back: nothing of it is left pending, and it is recorded once.
    await eventually(async () => (await bus.jsm.consumers.info(streamName(naming, context), durable)).num_ack_pending === 0, { what: 'nothing pending' });
    expect((await pool.query('SELECT count(*)::int AS n FROM dead_letters WHERE consumer = $1', [durable])).rows[0].n).toBe(1);
  });

  /** Two poison messages (not JSON; a handler that always fails, given up at once) and their consumer, with a 1 s ack wait; returns how often the handler ran. */
  async function startPoisoned(durable: string): Promise<() => number> {
    let calls = 0;
    await publish('{ this is not json');
    await publish(envelope(8));
    startConsumer(durable, async (n) => {
      calls++;
      throw new Error(`poison ${n}`);
    }, { ackWaitMs: 1000, maxDeliver: 1 });
    return () => calls;
  }

  it('a dead-lettered message is given up for good: it does not come back after the ack wait to be dead-lettered again', async () => {
    const durable = `d${randomUUID().slice(0, 8)}`;
    const calls = await startPoisoned(durable);
    const count = async () => (await pool.query('SELECT count(*)::int AS n FROM dead_letters WHERE consumer = $1', [durable])).rows[0].n as number;
    await eventually(async () => (await count()) === 2, { what: 'both dead-lettered' });
    await new Promise((r) => setTimeout(r, 3000)); // three ack waits
    expect(await count()).toBe(2);
    expect(calls()).toBe(1);
    expect((await bus.jsm.consumers.info(streamName(naming, context), durable)).num_ack_pending).toBe(0);
  });

  it('a message delivered again while its dead letter is being written (its term not yet sent, as after a crash between the two) is dead-lettered once', async () => {
    const durable = `d${randomUUID().slice(0, 8)}`;
    // The dead letters' writes wait behind this lock for three ack waits: every message comes again meanwhile.
    const locker = await pool.connect();
    await locker.query('BEGIN; LOCK TABLE dead_letters IN SHARE ROW EXCLUSIVE MODE');
    try {
      await startPoisoned(durable);
      await new Promise((r) => setTimeout(r, 3500));
    } finally {
      await locker.query('COMMIT');
      locker.release();
    }
    await eventually(async () => (await bus.jsm.consumers.info(streamName(naming, context), durable)).num_ack_pending === 0, { what: 'nothing pending' });
    await consumerCaughtUp(bus.jsm, streamName(naming, context), durable);
    const dead = await pool.query<{ kind: string }>(`SELECT error->>'kind' AS kind FROM dead_letters WHERE consumer = $1 ORDER BY id`, [durable]);
    expect(dead.rows.map((r) => r.kind)).toEqual(['invalid_payload', 'handler_failed']);
  });

  it('a message that comes again after its dead letter was written (its term not sent yet) is given up at once: its handler does not run again, nor succeed after the event was recorded dead', async () => {
    const durable = `d${randomUUID().slice(0, 8)}`;
    let calls = 0;
    const locker = await pool.connect();
    // The dead letter's write waits behind this lock until JetStream has delivered the message again.
    await locker.query('BEGIN; LOCK TABLE dead_letters IN SHARE ROW EXCLUSIVE MODE');
    try {
      await publish(envelope(9));
      startConsumer(durable, async (n, eventId, sql) => {
        calls++;
        if (calls === 1) throw new Error('the downstream system is away');
        await insertPing(n, eventId, sql); // it would work now
      }, { ackWaitMs: 1000, maxDeliver: 1 });
      await eventually(async () => (await bus.jsm.consumers.info(streamName(naming, context), durable)).delivered.consumer_seq >= 2, { what: 'the message delivered again' });
      await bus.nc.flush();
    } finally {
      await locker.query('COMMIT');
      locker.release();
    }
    await eventually(async () => (await bus.jsm.consumers.info(streamName(naming, context), durable)).num_ack_pending === 0, { what: 'nothing pending' });
    await consumerCaughtUp(bus.jsm, streamName(naming, context), durable);
    const dead = await pool.query<{ kind: string }>(`SELECT error->>'kind' AS kind FROM dead_letters WHERE consumer = $1`, [durable]);
    expect(dead.rows.map((r) => r.kind)).toEqual(['handler_failed']);
    expect(calls).toBe(1);
    expect(await rows()).toEqual([]);
  });

  it('stopped mid-batch, a consumer finishes the batch in hand and hands back the events it had received and not begun: the next consumer has them at once, not after the ack wait', async () => {
    const durable = `d${randomUUID().slice(0, 8)}`;
    let started!: () => void;
    const firstStarted = new Promise<void>((resolve) => (started = resolve));
    const first = startConsumer(durable, async (n, eventId, sql) => {
      if (n === 1) {
        started();
        await new Promise((r) => setTimeout(r, 1000));
      }
      await insertPing(n, eventId, sql);
    }, { ackWaitMs: 60_000, batchSize: 1 });
    for (const n of [1, 2, 3]) await publish(envelope(n));
    await firstStarted;
    await eventually(async () => (await bus.jsm.consumers.info(streamName(naming, context), durable)).num_ack_pending === 3, { what: 'all three received' });
    await first.stop();
    expect(await rows()).toEqual([1]); // the batch in hand was finished
    const stoppedAt = Date.now();
    startConsumer(durable, insertPing, { ackWaitMs: 60_000 });
    await eventually(async () => (await rows()).length === 3, { what: 'the rest handled by the next consumer', timeoutMs: 20_000 });
    expect(Date.now() - stoppedAt).toBeLessThan(10_000);
    expect(await rows()).toEqual([1, 2, 3]);
  });

  it('stopped as JetStream is still sending it events, a consumer hands back those on their way to it too: the next consumer has them at once, not after the ack wait', async () => {
    const durable = `d${randomUUID().slice(0, 8)}`;
    let started!: () => void;
    const firstStarted = new Promise<void>((resolve) => (started = resolve));
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    const first = startConsumer(durable, async (n, eventId, sql) => {
      if (n === 1) {
        started();
        await released;
      }
      await insertPing(n, eventId, sql);
    }, { ackWaitMs: 60_000 });
    await publish(envelope(1));
    await firstStarted;
    // Events 2 and 3 are published, and delivered to the first consumer's pull, while this process
    // reads nothing from its socket: when it stops, they are still on their way to it.
    sendWhileThisProcessWaits([envelope(2), envelope(3)], durable, 3);
    const stopping = first.stop();
    release();
    await stopping;
    expect(await rows()).toEqual([1]);
    const stoppedAt = Date.now();
    startConsumer(durable, insertPing, { ackWaitMs: 60_000 });
    await eventually(async () => (await rows()).length === 3, { what: 'the events on their way handled by the next consumer', timeoutMs: 20_000 });
    expect(Date.now() - stoppedAt).toBeLessThan(10_000);
    expect(await rows()).toEqual([1, 2, 3]);
  });

  /**
   * Publishes `bodies` from a child process, which returns once JetStream has delivered the durable's
   * messages up to stream sequence `delivered` and they are all unacknowledged. This process's event
   * loop waits for it meanwhile, so nothing of what was sent to it is read yet.
   */
  function sendWhileThisProcessWaits(bodies: unknown[], durable: string, delivered: number): void {
    const script = `
      import { connect } from '@nats-io/transport-node';
      import { jetstream, jetstreamManager } from '@nats-io/jetstream';
      const { SERVERS, SUBJECT, STREAM, DURABLE, BODIES, DELIVERED } = process.env;
      const nc = await connect({ servers: SERVERS });
      const js = jetstream(nc);
      const jsm = await jetstreamManager(nc);
      for (const body of JSON.parse(BODIES)) await js.publish(SUBJECT, JSON.stringify(body));
      const until = Date.now() + 20_000;
      for (;;) {
        const info = await jsm.consumers.info(STREAM, DURABLE);
        if (info.delivered.stream_seq >= Number(DELIVERED) && info.num_ack_pending >= Number(DELIVERED)) break;
        if (Date.now() > until) throw new Error('not delivered: ' + JSON.stringify(info.delivered));
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      await nc.close();`;
    execFileSync(process.execPath, ['--input-type=module', '-e', script], {
      cwd: fileURLToPath(new URL('.', import.meta.url)),
      env: {
        ...process.env,
        SERVERS: testNatsUrl,
        SUBJECT: eventSubject(naming, context, 'ConsumerTestPinged', 'pr-1'),
        STREAM: streamName(naming, context),
        DURABLE: durable,
        BODIES: JSON.stringify(bodies),
        DELIVERED: String(delivered),
      },
      stdio: ['ignore', 'ignore', 'inherit'],
      timeout: 60_000,
    });
  }

  it('a handler that throws is retried and succeeds later; its failed writes are rolled back', async () => {
    const durable = `d${randomUUID().slice(0, 8)}`;
    let attempts = 0;
    startConsumer(durable, async (n, eventId, sql) => {
      attempts++;
      await insertPing(n, eventId, sql);
      if (attempts < 3) throw new Error('database briefly unavailable');
    });
    await publish(envelope(3));
    await eventually(async () => (await rows()).includes(3), { what: 'processed after retries' });
    expect(attempts).toBe(3);
    expect(await rows()).toEqual([3]);
  });

  it('a handler that caught an SQL error (its transaction aborted, the COMMIT answered with a ROLLBACK) failed: retried, not acknowledged with its writes lost', async () => {
    const durable = `d${randomUUID().slice(0, 8)}`;
    let attempts = 0;
    startConsumer(durable, async (n, eventId, sql) => {
      attempts++;
      await insertPing(n, eventId, sql);
      if (n === 6 || attempts < 2) await sql.query('SELECT 1/0').catch(() => undefined);
    }, { maxDeliver: 2 });
    await publish(envelope(7));
    await eventually(async () => (await rows()).includes(7), { what: 'processed on its second delivery' });
    expect(attempts).toBe(2);
    // One that always does so is the handler's failure, dead-lettered, not an outage handed back for ever.
    await publish(envelope(6));
    const dead = await eventually(async () => (await pool.query('SELECT error FROM dead_letters WHERE consumer = $1', [durable])).rows[0]?.error, { what: 'dead letter' });
    expect(dead).toMatchObject({ kind: 'handler_failed', deliveries: 2 });
    expect(await rows()).toEqual([7]);
  });

  it('a handler that always fails is dead-lettered after the last delivery and the consumer goes on', async () => {
    const durable = `d${randomUUID().slice(0, 8)}`;
    startConsumer(durable, async (n, eventId, sql) => {
      if (n === 4) throw new Error('poison');
      await insertPing(n, eventId, sql);
    }, { maxDeliver: 3 });
    await publish(envelope(4));
    await publish(envelope(5));
    await eventually(async () => (await rows()).includes(5), { what: 'the next message processed' });
    await eventually(async () => (await pool.query('SELECT error FROM dead_letters WHERE consumer = $1', [durable])).rows[0]?.error, { what: 'dead letter' });
    const dead = await pool.query('SELECT error FROM dead_letters WHERE consumer = $1', [durable]);
    expect(dead.rows[0].error).toMatchObject({ kind: 'handler_failed', deliveries: 3 });
  });

  it('deliveries handed back by RetryLater do not count towards the last delivery: a later failure is retried, not dead-lettered at once', async () => {
    const durable = `d${randomUUID().slice(0, 8)}`;
    let attempts = 0;
    startConsumer(
      durable,
      async (n, eventId, sql) => {
        attempts++;
        // Not ready four times (an earlier event not arrived yet), then one transient failure, then it works.
        if (attempts <= 4) throw new RetryLater('an earlier event has not arrived', 20);
        if (attempts === 5) throw new Error('briefly unavailable');
        await insertPing(n, eventId, sql);
      },
      { maxDeliver: 3 },
    );
    await publish(envelope(6));
    await eventually(async () => (await rows()).includes(6), { what: 'the event handled after its retries' });
    expect(attempts).toBe(6);
    expect((await pool.query('SELECT 1 FROM dead_letters WHERE consumer = $1', [durable])).rows).toEqual([]);
  });

  it('RetryLater never dead-letters, but failures of the handler still do once maxDeliver of them are reached', async () => {
    const durable = `d${randomUUID().slice(0, 8)}`;
    let attempts = 0;
    startConsumer(
      durable,
      async () => {
        attempts++;
        if (attempts <= 4) throw new RetryLater('an earlier event has not arrived', 20);
        throw new Error('poison');
      },
      { maxDeliver: 3 },
    );
    await publish(envelope(7));
    const dead = await eventually(async () => (await pool.query('SELECT error FROM dead_letters WHERE consumer = $1', [durable])).rows[0]?.error, { what: 'dead letter' });
    expect(dead).toMatchObject({ kind: 'handler_failed', deliveries: 7, failures: 3 });
    expect(attempts).toBe(7);
  });

  /** Its dead letters' errors; [] while it has none. */
  const deadLettersOf = async (durable: string) => (await pool.query('SELECT error FROM dead_letters WHERE consumer = $1', [durable])).rows.map((r) => r.error);

  it("a handler that cannot reach a database of its own (another pool) hands its events back as an outage, more times than maxDeliver: never dead-lettered, handled once that database answers again", async () => {
    const durable = `d${randomUUID().slice(0, 8)}`;
    // The handler's other database, every connection to it refused at once.
    const proxy = await startCuttableProxy(testDatabaseUrl);
    const elsewhere = createPool({ url: proxy.url, schema: name, timeouts: { connectMs: 1000 } });
    proxy.cut();
    const warned: string[] = [];
    let attempts = 0;
    try {
      // Published before the consumer starts, they come together: their batch is rolled back, then each is tried alone.
      await publish(envelope(21));
      await publish(envelope(22));
      startConsumer(durable, async (n, eventId, sql) => {
        attempts++;
        await elsewhere.query('SELECT 1');
        await insertPing(n, eventId, sql);
      }, { maxDeliver: 3, logger: { ...logger, warn: (message: string) => void warned.push(message) } });
      await eventually(async () => attempts > 4 * 3 || (await deadLettersOf(durable)).length > 0, { what: 'more tries than maxDeliver, or a dead letter' });
      expect(await deadLettersOf(durable)).toEqual([]);
      expect(warned).toContain('what the handler needs is out of reach; event handed back');
      proxy.restore();
      await eventually(async () => (await rows()).length === 2, { what: 'both events handled once the database answers' });
      expect(await rows()).toEqual([21, 22]);
      expect(await deadLettersOf(durable)).toEqual([]);
    } finally {
      proxy.restore();
      await elsewhere.end();
      await proxy.close();
    }
  });

  it('a handler whose command to another service finds nobody serving it hands its event back as an outage, more times than maxDeliver: never dead-lettered, handled once the service answers', async () => {
    const durable = `d${randomUUID().slice(0, 8)}`;
    const client = new CommandClient(bus);
    let attempts = 0;
    startConsumer(durable, async (n, eventId, sql) => {
      attempts++;
      await client.request(LookUp, { n }, { timeoutMs: 2000 });
      await insertPing(n, eventId, sql);
    }, { maxDeliver: 3 });
    await publish(envelope(23));
    await eventually(async () => attempts > 6 || (await deadLettersOf(durable)).length > 0, { what: 'more tries than maxDeliver, or a dead letter' });
    expect(await deadLettersOf(durable)).toEqual([]);
    const service = bus.nc.subscribe(commandSubject(naming, context, LookUp.name), {
      callback: (_error, msg) => {
        msg.respond(JSON.stringify({ ok: true, result: {} }));
      },
    });
    try {
      await eventually(async () => (await rows()).includes(23), { what: 'the event handled once the service answers' });
      expect(await deadLettersOf(durable)).toEqual([]);
    } finally {
      service.unsubscribe();
    }
  });

  it("a handler whose command another service refuses UNAVAILABLE (that service's database out of reach) hands its event back as an outage; any other refusal counts as the handler's failure", async () => {
    const durable = `d${randomUUID().slice(0, 8)}`;
    const client = new CommandClient(bus);
    let asked = 0;
    const service = bus.nc.subscribe(commandSubject(naming, context, LookUp.name), {
      callback: (_error, msg) => {
        asked++;
        const { n } = JSON.parse(new TextDecoder().decode(msg.data)) as { n: number };
        // The event 24 meets the service's database away for more tries than maxDeliver; 25 is refused for good.
        const answer =
          n === 25 ? { ok: false, error: { code: ErrorCode.NOT_FOUND, message: 'no such thing' } }
          : asked <= 8 ? { ok: false, error: { code: ErrorCode.UNAVAILABLE, message: "the service's database is not reachable; send it again" } }
          : { ok: true, result: {} };
        msg.respond(JSON.stringify(answer));
      },
    });
    try {
      startConsumer(durable, async (n, eventId, sql) => {
        await client.request(LookUp, { n }, { timeoutMs: 2000 });
        await insertPing(n, eventId, sql);
      }, { maxDeliver: 3 });
      await publish(envelope(24));
      await eventually(async () => (await rows()).includes(24) || (await deadLettersOf(durable)).length > 0, { what: 'the event handled, or a dead letter' });
      expect(await deadLettersOf(durable)).toEqual([]);
      expect(await rows()).toEqual([24]);
      await publish(envelope(25));
      const [dead] = await eventually(async () => { const d = await deadLettersOf(durable); return d.length > 0 ? d : undefined; }, { what: 'the refused event dead-lettered' });
      expect(dead).toMatchObject({ kind: 'handler_failed', failures: 3 });
    } finally {
      service.unsubscribe();
    }
  });

  it("a dead letter handed back goes to its consumer alone: another consumer of the event does not run again, even once its inbox no longer holds the event", async () => {
    const failing = `d${randomUUID().slice(0, 8)}`;
    const other = `d${randomUUID().slice(0, 8)}`;
    let fails = true;
    const handledBy = { [failing]: [] as number[], [other]: [] as number[] };
    startConsumer(failing, async (n) => {
      if (fails) throw new Error('the downstream system is away');
      handledBy[failing]!.push(n);
    }, { maxDeliver: 1 });
    startConsumer(other, async (n) => {
      handledBy[other]!.push(n);
    });
    await publish(envelope(7));
    await eventually(async () => (await pool.query('SELECT 1 FROM dead_letters WHERE consumer = $1', [failing])).rowCount === 1, { what: 'dead letter' });
    await eventually(async () => handledBy[other]!.length === 1, { what: 'the other consumer handled the event' });
    // Dead letters are kept longer (30 days) than the stream keeps its events (7 days), and the inbox
    // rows of events the stream no longer holds are pruned: as they are here, for the other consumer.
    await pruneExpired(pool, { now: new Date(), inboxBefore: [{ consumer: other, before: new Date(Date.now() + 60_000) }] });
    expect((await pool.query('SELECT 1 FROM inbox WHERE consumer = $1', [other])).rowCount).toBe(0);

    fails = false;
    expect(await replayDeadLetters(pool, bus.js, { consumer: failing })).toMatchObject({ replayed: [expect.any(Number)], failed: null });
    await eventually(async () => handledBy[failing]!.length === 1, { what: 'the consumer handled the event handed back' });
    await consumerCaughtUp(bus.jsm, streamName(naming, context), other);
    expect(handledBy).toEqual({ [failing]: [7], [other]: [7] });
  });

  it("a dead letter's error text has its secrets masked: a URL's password and a token in the handler's error", async () => {
    const durable = `d${randomUUID().slice(0, 8)}`;
    const token = `ghp_${'A1b2C3d4'.repeat(5)}`;
    startConsumer(durable, async () => {
      throw new Error(`push to https://deploy:hunter2-secret@git.example.com/acme/app.git failed; retry with ${token}`);
    }, { maxDeliver: 2 });
    await publish(envelope(6));
    const error = await eventually(async () => (await pool.query('SELECT error FROM dead_letters WHERE consumer = $1', [durable])).rows[0]?.error, { what: 'dead letter' });
    expect(error).toMatchObject({ kind: 'handler_failed', deliveries: 2 });
    const stored = JSON.stringify(error);
    expect(stored).toContain('https://deploy:***@git.example.com/acme/app.git');
    expect(stored).not.toContain('hunter2-secret');
    expect(stored).not.toContain(token);
  });

  it('a long handler keeps its message with working() instead of getting it redelivered', async () => {
    const durable = `d${randomUUID().slice(0, 8)}`;
    let calls = 0;
    startConsumer(durable, async (n, eventId, sql) => {
      calls++;
      await new Promise((r) => setTimeout(r, 2500)); // longer than ack_wait below
      await insertPing(n, eventId, sql);
    }, { ackWaitMs: 1000 });
    await publish(envelope(6));
    await eventually(async () => (await rows()).includes(6), { what: 'slow message processed' });
    // Once acknowledged the message cannot come back: a redelivery would have come while the handler ran.
    await consumerCaughtUp(bus.jsm, streamName(naming, context), durable);
    expect(calls).toBe(1);
  });

  /** A consumer of `types` that inserts each ping and records its number in the list returned. */
  function startRecording(durable: string, types: string[]): number[] {
    const seen: number[] = [];
    startConsumer(durable, async (n, eventId, sql) => {
      seen.push(n);
      await insertPing(n, eventId, sql);
    }, { types });
    return seen;
  }

  it('events of types the handler does not take are acknowledged without a transaction, an inbox row or a check of their payload', async () => {
    const durable = `d${randomUUID().slice(0, 8)}`;
    await publish(envelope(1));
    // Not a payload this consumer could read: it is left alone all the same, not dead-lettered.
    await bus.js.publish(eventSubject(naming, context, 'ConsumerTestIgnored', 'pr-1'), JSON.stringify({ ...envelope(2), type: 'ConsumerTestIgnored', data: 'not an object' }));
    // Told by its subject: its body is not even parsed.
    await bus.js.publish(eventSubject(naming, context, 'ConsumerTestIgnored', 'pr-1'), '{ not JSON');
    await publish(envelope(3));
    const seen = startRecording(durable, ['ConsumerTestPinged']);
    await eventually(async () => {
      const info = await bus.jsm.consumers.info(streamName(naming, context), durable);
      return info.num_ack_pending === 0 && info.num_pending === 0 && info.delivered.stream_seq >= 4;
    }, { what: 'all four acknowledged' });
    expect(seen).toEqual([1, 3]);
    expect(await rows()).toEqual([1, 3]);
    const inbox = await pool.query('SELECT count(*)::int AS n FROM inbox WHERE consumer = $1', [durable]);
    expect(inbox.rows[0].n).toBe(2);
    const dead = await pool.query('SELECT count(*)::int AS n FROM dead_letters WHERE consumer = $1', [durable]);
    expect(dead.rows[0].n).toBe(0);
  });

  it('a consumer of some types still dead-letters a bad payload of a type it takes', async () => {
    const durable = `d${randomUUID().slice(0, 8)}`;
    await publish(envelope('x'));
    await publish(envelope(2));
    const seen = startRecording(durable, ['ConsumerTestPinged']);
    await eventually(async () => (await rows()).includes(2), { what: 'the valid event handled' });
    const dead = await eventually(
      async () => {
        const { rows: letters } = await pool.query('SELECT error FROM dead_letters WHERE consumer = $1', [durable]);
        return letters.length > 0 && letters;
      },
      { what: 'the bad one dead-lettered' },
    );
    expect(dead).toEqual([{ error: expect.objectContaining({ kind: 'invalid_payload', issues: [expect.objectContaining({ path: ['n'] })] }) }]);
    expect(seen).toEqual([2]);
  });

  /** Publishes events 1..count and waits until a consumer started by `start` has acknowledged them all. */
  async function consumeAll(count: number, start: (durable: string) => void): Promise<string> {
    const durable = `d${randomUUID().slice(0, 8)}`;
    for (let n = 1; n <= count; n++) await publish(envelope(n));
    start(durable);
    await eventually(async () => {
      const info = await bus.jsm.consumers.info(streamName(naming, context), durable);
      return info.num_ack_pending === 0 && info.num_pending === 0 && info.delivered.stream_seq >= count;
    }, { what: `all ${count} acknowledged` });
    return durable;
  }

  const inboxRows = async (durable: string) => (await pool.query('SELECT count(*)::int AS n FROM inbox WHERE consumer = $1', [durable])).rows[0].n as number;

  it('events the batch check names are acknowledged without their handler or an inbox row; the others are handled', async () => {
    const asked: number[] = [];
    const seen: number[] = [];
    const durable = await consumeAll(10, (durable) =>
      startConsumer(durable, async (n, eventId, sql) => {
        seen.push(n);
        await insertPing(n, eventId, sql);
      }, {
        unaffected: async (events) => {
          asked.push(...events.map((e) => (e.data as { n: number }).n));
          return new Set(events.filter((e) => (e.data as { n: number }).n % 2 === 1).map((e) => e.eventId));
        },
      }),
    );
    expect(asked.sort((a, b) => a - b)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    expect(seen).toEqual([2, 4, 6, 8, 10]);
    expect(await rows()).toEqual([2, 4, 6, 8, 10]);
    expect(await inboxRows(durable)).toBe(5);
  });

  it('events `passOver` names from their payload are acknowledged without a check of their schema, their handler or an inbox row', async () => {
    const durable = `d${randomUUID().slice(0, 8)}`;
    await publish(envelope(1));
    // Its work done already (its companion went with it, say): not even checked against its schema.
    await publish({ ...envelope(2), companions: 1, data: 'not an object' });
    await publish(envelope(3));
    const seen: number[] = [];
    startConsumer(durable, async (n, eventId, sql) => {
      seen.push(n);
      await insertPing(n, eventId, sql);
    }, { passOver: (payload) => payload.companions !== undefined });
    await eventually(async () => {
      const info = await bus.jsm.consumers.info(streamName(naming, context), durable);
      return info.num_ack_pending === 0 && info.num_pending === 0 && info.delivered.stream_seq >= 3;
    }, { what: 'all three acknowledged' });
    expect(seen).toEqual([1, 3]);
    expect(await inboxRows(durable)).toBe(2);
    const dead = await pool.query('SELECT count(*)::int AS n FROM dead_letters WHERE consumer = $1', [durable]);
    expect(dead.rows[0].n).toBe(0);
  });

  it('when the batch check fails, every event is handled, and the failure is logged', async () => {
    const warnings: string[] = [];
    const durable = await consumeAll(4, (durable) =>
      startConsumer(durable, insertPing, {
        unaffected: async () => {
          throw new Error('the view is unreachable');
        },
        logger: { ...logger, warn: (message, fields) => void warnings.push(`${message}: ${String(fields.error)}`) },
      }),
    );
    expect(await rows()).toEqual([1, 2, 3, 4]);
    expect(await inboxRows(durable)).toBe(4);
    expect(warnings[0]).toBe('could not tell which events need no handling; handling them all: Error: the view is unreachable');
  });

  /**
   * Publishes `count` events, and starts a consumer whose handler holds the first event until the
   * server has delivered all of them and they have reached this client (a NATS round trip after the
   * delivery): the others then wait together for the next batch.
   */
  async function consumeWhileTheRestArrive(
    count: number,
    handle: (n: number, eventId: string, sql: pg.PoolClient, beforeCommit: BeforeCommit, batch: readonly EventEnvelope[]) => Promise<void>,
  ) {
    const durable = `d${randomUUID().slice(0, 8)}`;
    for (let n = 1; n <= count; n++) await publish(envelope(n));
    let first = true;
    startConsumer(durable, async (n, eventId, sql, beforeCommit, batch) => {
      if (first) {
        first = false;
        await eventually(async () => (await bus.jsm.consumers.info(streamName(naming, context), durable)).num_pending === 0, { what: 'every event delivered' });
        await bus.nc.flush();
      }
      await handle(n, eventId, sql, beforeCommit, batch);
    });
    await eventually(async () => {
      const info = await bus.jsm.consumers.info(streamName(naming, context), durable);
      return info.num_ack_pending === 0 && info.num_pending === 0 && info.delivered.stream_seq >= count;
    }, { what: `all ${count} acknowledged` });
    return durable;
  }

  it('events that arrived together are handled in one transaction, each once, with one inbox row each', async () => {
    await pool.query('ALTER TABLE pings ADD COLUMN IF NOT EXISTS tx bigint');
    const durable = await consumeWhileTheRestArrive(20, async (n, eventId, sql) => {
      await sql.query('INSERT INTO pings (event_id, n, tx) VALUES ($1, $2, txid_current())', [eventId, n]);
    });
    expect(await rows()).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
    const { rows: [{ txs }] } = await pool.query('SELECT count(DISTINCT tx)::int AS txs FROM pings');
    // The first event's batch (it may have taken a second one with it), then the rest together.
    expect(txs).toBeLessThanOrEqual(3);
    const inbox = await pool.query('SELECT count(*)::int AS n FROM inbox WHERE consumer = $1', [durable]);
    expect(inbox.rows[0].n).toBe(20);
  });

  it('each handler of a batch is told the batch: the events of its transaction in the order they are handled, the same array for all', async () => {
    const durable = `d${randomUUID().slice(0, 8)}`;
    for (let n = 1; n <= 10; n++) await publish(envelope(n));
    const seen: Array<{ n: number; batch: readonly EventEnvelope[] }> = [];
    startConsumer(durable, async () => undefined, {
      handle: async (event, _sql, _beforeCommit, batch) => {
        if (seen.length === 0) {
          await eventually(async () => (await bus.jsm.consumers.info(streamName(naming, context), durable)).num_pending === 0, { what: 'every event delivered' });
          await bus.nc.flush();
        }
        seen.push({ n: (event.data as { n: number }).n, batch });
      },
    });
    await eventually(async () => (await bus.jsm.consumers.info(streamName(naming, context), durable)).num_ack_pending === 0 && seen.length === 10, { what: 'all handled' });
    for (const { n, batch } of seen) expect(batch.map((e) => (e.data as { n: number }).n)).toContain(n);
    const batches = [...new Set(seen.map((s) => s.batch))];
    // Every event in exactly one batch, each batch in the order its events were handled.
    expect(batches.flatMap((b) => b.map((e) => (e.data as { n: number }).n))).toEqual(seen.map((s) => s.n));
    expect(batches.some((b) => b.length > 1)).toBe(true);
  });

  it('a handler failing in the middle of a batch rolls the batch back: the others are handled once, the failing one retried alone', async () => {
    const attempts = new Map<number, number>();
    await consumeWhileTheRestArrive(12, async (n, eventId, sql) => {
      attempts.set(n, (attempts.get(n) ?? 0) + 1);
      await insertPing(n, eventId, sql);
      if (n === 7 && attempts.get(n) === 1) throw new Error('fails the first time');
    });
    expect(await rows()).toEqual(Array.from({ length: 12 }, (_, i) => i + 1));
    expect(attempts.get(7)).toBe(2); // in the batch, then alone (the one-at-a-time pass after the rollback)
    const dead = await pool.query('SELECT count(*)::int AS n FROM dead_letters');
    expect(dead.rows[0].n).toBe(0);
  });

  it('work a handler hands over starts once every handler of the batch has run, all of it together, and the batch commits only once all of it has succeeded', async () => {
    const handled = new Set<string>();
    let inFlight = 0;
    let mostInFlight = 0;
    let finished = 0;
    const startedEarly: number[] = [];
    const committedEarly: number[] = [];
    await consumeWhileTheRestArrive(12, async (n, eventId, sql, beforeCommit, batch) => {
      await insertPing(n, eventId, sql);
      handled.add(eventId);
      beforeCommit(async () => {
        // Started after the last handler of its batch, never between two of them.
        if (!batch.every((event) => handled.has(event.eventId))) startedEarly.push(n);
        inFlight++;
        mostInFlight = Math.max(mostInFlight, inFlight);
        await new Promise((resolve) => setTimeout(resolve, 100));
        // Another connection must not see the handler's write yet: the commit waits for this work.
        const seen = await pool.query('SELECT 1 FROM pings WHERE event_id = $1', [eventId]);
        if (seen.rowCount !== 0) committedEarly.push(n);
        inFlight--;
        finished++;
      });
    });
    await eventually(() => finished >= 12, { what: 'every handed-over work finished' });
    expect(await rows()).toEqual(Array.from({ length: 12 }, (_, i) => i + 1));
    expect(committedEarly).toEqual([]);
    expect(startedEarly).toEqual([]);
    expect(mostInFlight).toBeGreaterThan(1); // the batch's works overlapped instead of running one after another
  });

  it('work handed over that fails, or that cannot start, fails its handler: the batch is rolled back and the event handled again until the work succeeds', async () => {
    const attempts = new Map<number, number>();
    await consumeWhileTheRestArrive(12, async (n, eventId, sql, beforeCommit) => {
      attempts.set(n, (attempts.get(n) ?? 0) + 1);
      await insertPing(n, eventId, sql);
      // In the batch, then alone: it fails both times, and succeeds when redelivered.
      beforeCommit(() => (n === 5 && attempts.get(n)! <= 2 ? Promise.reject(new Error('publish failed')) : Promise.resolve()));
      beforeCommit(() => {
        if (n === 8 && attempts.get(n)! <= 2) throw new Error('could not even start');
        return Promise.resolve();
      });
    });
    expect(await rows()).toEqual(Array.from({ length: 12 }, (_, i) => i + 1));
    expect(attempts.get(5)).toBe(3);
    expect(attempts.get(8)).toBe(3);
    const dead = await pool.query('SELECT count(*)::int AS n FROM dead_letters');
    expect(dead.rows[0].n).toBe(0);
  });

  it('a consumer created to take over from an older durable (startsAfter) starts past what that durable acknowledged; where it does not exist, at the first message', async () => {
    const older = `d${randomUUID().slice(0, 8)}`;
    const seenByOlder: number[] = [];
    const olderConsumer = startConsumer(older, async (n) => void seenByOlder.push(n));
    for (const n of [1, 2, 3]) await publish(envelope(n));
    await eventually(() => seenByOlder.length === 3, { what: 'the older consumer handled 1-3' });
    // The stream's sequence goes on across the purges between tests: 1-3 are its last three messages.
    const { state } = await bus.jsm.streams.info(streamName(naming, context));
    await eventually(async () => (await bus.jsm.consumers.info(streamName(naming, context), older)).ack_floor.stream_seq === state.last_seq, { what: 'the older durable acknowledged 1-3' });
    await olderConsumer.stop();
    await publish(envelope(4));
    const taking: number[] = [];
    startConsumer(`d${randomUUID().slice(0, 8)}`, async (n) => void taking.push(n), { startsAfter: older });
    const fresh: number[] = [];
    startConsumer(`d${randomUUID().slice(0, 8)}`, async (n) => void fresh.push(n), { startsAfter: `gone${randomUUID().slice(0, 8)}` });
    await eventually(() => taking.length >= 1 && fresh.length >= 4, { what: 'both consumers caught up' });
    await publish(envelope(5));
    await eventually(() => taking.includes(5) && fresh.includes(5), { what: 'both handled 5' });
    expect(taking).toEqual([4, 5]);
    expect(fresh).toEqual([1, 2, 3, 4, 5]);
  });

  it('a consumer that disappears is recreated and keeps consuming', async () => {
    const durable = `d${randomUUID().slice(0, 8)}`;
    const consumer = startConsumer(durable, insertPing);
    await publish(envelope(7));
    await eventually(async () => (await rows()).includes(7), { what: 'first message' });
    await bus.jsm.consumers.delete(streamName(naming, context), durable);
    await eventually(async () => {
      try {
        await bus.jsm.consumers.info(streamName(naming, context), durable);
        return consumer.isReady;
      } catch {
        return false;
      }
    }, { what: 'consumer recreated', timeoutMs: 20_000 });
    await publish(envelope(8));
    await eventually(async () => (await rows()).includes(8), { what: 'message after recreation', timeoutMs: 20_000 });
    expect(await rows()).toEqual([7, 8]); // the recreated consumer starts from the beginning; the inbox drops 7
  });
});

describe('durable event consumer when PostgreSQL or NATS goes away', () => {
  const name = uniqueName('consumer_away');
  const naming = testNaming(name);
  let postgres: ScratchServer;
  let pool: pg.Pool;
  let bus: Bus;

  beforeAll(async () => {
    postgres = await startScratchPostgres();
    await migrate({ url: postgres.url, schema: name });
    pool = createPool({ url: postgres.url, schema: name });
    await pool.query('CREATE TABLE pings (event_id text PRIMARY KEY, n int NOT NULL)');
    bus = await Bus.connect({ servers: testNatsUrl, naming, name: 'consumer-away-test' });
    await bus.ensureEventStream(context);
  });

  afterAll(async () => {
    await deleteStreams(bus.nc, naming.streamPrefix);
    await bus.close();
    await pool.end();
    await postgres.remove();
  });

  beforeEach(async () => {
    await postgres.start();
    await bus.jsm.streams.purge(streamName(naming, context));
    await pool.query('TRUNCATE pings, inbox, dead_letters');
  });

  const consumerOf = (options: Partial<ConstructorParameters<typeof EventConsumer>[0]> & { name: string; bus: Bus }) =>
    new EventConsumer({
      pool,
      source: context,
      logger,
      handle: async (event, sql) => {
        await sql.query('INSERT INTO pings (event_id, n) VALUES ($1, $2)', [event.eventId, (event.data as { n: number }).n]);
      },
      backoffMs: () => 100,
      ackWaitMs: 1000,
      ...options,
    });

  it('an event delivered while PostgreSQL is unreachable is processed exactly once when it is back', async () => {
    const durable = `d${randomUUID().slice(0, 8)}`;
    await postgres.stop();
    const consumer = consumerOf({ name: durable, bus });
    consumer.start();
    try {
      await bus.js.publish(eventSubject(naming, context, 'ConsumerTestPinged', 'pr-1'), JSON.stringify(envelope(1)));
      // Delivered (and failed) at least twice while the database is away: it is handed back, not held.
      await eventually(async () => (await bus.jsm.consumers.info(streamName(naming, context), durable)).num_redelivered > 0, {
        what: 'the event redelivered while PostgreSQL is down',
      });
      await postgres.start();
      await eventually(async () => (await pool.query('SELECT n FROM pings')).rows.length > 0, { what: 'the event processed', timeoutMs: 30_000 });
      await eventually(async () => {
        const info = await bus.jsm.consumers.info(streamName(naming, context), durable);
        return info.num_ack_pending === 0 && info.num_pending === 0;
      }, { what: 'the event acknowledged' });
      expect((await pool.query('SELECT n FROM pings')).rows).toEqual([{ n: 1 }]);
      expect((await pool.query('SELECT count(*)::int AS n FROM inbox WHERE consumer = $1', [durable])).rows[0].n).toBe(1);
      expect((await pool.query('SELECT count(*)::int AS n FROM dead_letters')).rows[0].n).toBe(0);
    } finally {
      await postgres.start();
      await consumer.stop();
    }
  });

  it('a consumer stopped while its event waits for PostgreSQL holds nothing: the next consumer processes the event once', async () => {
    const durable = `d${randomUUID().slice(0, 8)}`;
    await postgres.stop();
    const first = consumerOf({ name: durable, bus });
    first.start();
    try {
      await bus.js.publish(eventSubject(naming, context, 'ConsumerTestPinged', 'pr-1'), JSON.stringify(envelope(2)));
      await eventually(async () => (await bus.jsm.consumers.info(streamName(naming, context), durable)).num_redelivered > 0, {
        what: 'the event handed back while PostgreSQL is down',
      });
    } finally {
      await first.stop();
    }
    await postgres.start();
    // No keep-alive of the stopped consumer may still extend the message: it comes to the next one.
    const second = consumerOf({ name: durable, bus });
    second.start();
    try {
      await eventually(async () => (await pool.query('SELECT n FROM pings WHERE n = 2')).rows.length > 0, {
        what: 'the event processed by the next consumer',
        timeoutMs: 30_000,
      });
      await eventually(async () => (await bus.jsm.consumers.info(streamName(naming, context), durable)).num_ack_pending === 0, {
        what: 'the event acknowledged',
      });
    } finally {
      await second.stop();
    }
    expect((await pool.query('SELECT count(*)::int AS n FROM inbox WHERE consumer = $1', [durable])).rows[0].n).toBe(1);
  });
});

/**
 * PostgreSQL stops answering in the middle of a handler's transaction, without closing anything
 * (docs/operations.md, "When PostgreSQL stops answering"): the consumer's pool is behind a proxy
 * that forwards nothing, with a short query bound.
 */
describe('durable event consumer when PostgreSQL stops answering', () => {
  const name = uniqueName('consumer_dark');
  const naming = testNaming(name);
  let proxy: CuttableProxy;
  let pool: pg.Pool;
  let bus: Bus;

  beforeAll(async () => {
    await migrate({ url: testDatabaseUrl, schema: name });
    proxy = await startCuttableProxy(testDatabaseUrl);
    pool = createPool({ url: proxy.url, schema: name, timeouts: { queryMs: 500, connectMs: 500 } });
    await pool.query('CREATE TABLE pings (event_id text PRIMARY KEY, n int NOT NULL)');
    bus = await Bus.connect({ servers: testNatsUrl, naming, name: 'consumer-dark-test' });
    await bus.ensureEventStream(context);
  });

  afterAll(async () => {
    proxy.restore();
    await deleteStreams(bus.nc, naming.streamPrefix);
    await bus.close();
    await pool.end();
    await proxy.close();
    await dropSchema(name);
  });

  it('hands the event back as an outage, not a failure of its handler, and handles it once when the database answers again', async () => {
    const said: string[] = [];
    let reached: () => void = () => undefined;
    const handlerReached = new Promise<void>((resolve) => (reached = resolve));
    let deliveries = 0;
    const consumer = new EventConsumer({
      pool,
      source: context,
      name: `d${randomUUID().slice(0, 8)}`,
      bus,
      logger: { log: () => undefined, warn: (message: string) => void said.push(message), error: (message: string) => void said.push(message) },
      handle: async (event, sql) => {
        deliveries++;
        reached();
        // The first delivery's insert is sent into the blackhole.
        if (deliveries === 1) await eventually(async () => blackholed, { what: 'the blackhole' });
        await sql.query('INSERT INTO pings (event_id, n) VALUES ($1, $2)', [event.eventId, (event.data as { n: number }).n]);
      },
      backoffMs: () => 100,
      ackWaitMs: 5000,
      // A failure of the handler would be its last: dead-lettered, never handled.
      maxDeliver: 1,
    });
    let blackholed = false;
    consumer.start();
    try {
      await bus.js.publish(eventSubject(naming, context, 'ConsumerTestPinged', 'pr-1'), JSON.stringify(envelope(1)));
      await handlerReached;
      proxy.blackhole();
      blackholed = true;
      await eventually(async () => said.includes('database unavailable; event handed back'), { what: 'the event handed back' });
      proxy.restore();
      await eventually(async () => (await pool.query('SELECT n FROM pings')).rows.length > 0, { what: 'the event handled', timeoutMs: 30_000 });
      expect((await pool.query('SELECT n FROM pings')).rows).toEqual([{ n: 1 }]);
      expect((await pool.query('SELECT count(*)::int AS n FROM dead_letters')).rows[0].n).toBe(0);
      expect(said.filter((message) => /handler failed/.test(message))).toEqual([]);
    } finally {
      proxy.restore();
      await consumer.stop();
    }
  });
});
