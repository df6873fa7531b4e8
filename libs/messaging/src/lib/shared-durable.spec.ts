import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { z } from 'zod';
import { defineEvent, eventSubject, streamName, type Context } from '@gantry/contracts';
import { createPool, migrate, pruneExpired } from '@gantry/eventstore';
import { deleteStreams, dropSchema, eventually, testDatabaseUrl, testNaming, uniqueName } from '@gantry/testing';
import { Bus } from './bus.js';
import { replayDeadLetters } from './dead-letters.js';
import { EventConsumer, type EventConsumerOptions } from './event-consumer.js';
import { SharedDurable } from './shared-durable.js';

const context: Context = 'worktrees';
for (const type of ['SharedTestRed', 'SharedTestBlue', 'SharedTestGreen']) {
  defineEvent({
    context,
    type,
    schemaVersion: 1,
    data: z.object({ n: z.number().int() }),
    examples: { valid: [{ n: 1 }], invalid: [{ n: 'x' }] },
  });
}

const logger = { log: () => undefined, warn: () => undefined, error: () => undefined };

describe('a durable shared by several consumers', () => {
  const name = uniqueName('shared');
  const naming = testNaming(name);
  let pool: pg.Pool;
  let bus: Bus;
  const running: Array<{ stop(): Promise<void> }> = [];

  beforeAll(async () => {
    await migrate({ url: testDatabaseUrl, schema: name });
    pool = createPool({ url: testDatabaseUrl, schema: name });
    await pool.query('CREATE TABLE handled (member text NOT NULL, n int NOT NULL)');
    bus = await Bus.connect({ servers: 'nats://127.0.0.1:4222', naming, name: 'shared-durable-test' });
    await bus.ensureEventStream(context);
  });

  afterAll(async () => {
    await Promise.all(running.map((c) => c.stop()));
    await deleteStreams(bus.nc, naming.streamPrefix);
    await bus.close();
    await pool.end();
    await dropSchema(name);
  });

  beforeEach(async () => {
    await Promise.all(running.splice(0).map((c) => c.stop()));
    await bus.jsm.streams.purge(streamName(naming, context));
    await pool.query('TRUNCATE handled, inbox, dead_letters');
  });

  const stream = () => streamName(naming, context);

  /** Publishes an event of `type` numbered n; returns its stream sequence. */
  async function publish(type: string, n: number): Promise<number> {
    const body = {
      eventId: randomUUID(),
      type,
      schemaVersion: 1,
      streamId: `wt-${n}`,
      streamVersion: 1,
      position: n,
      occurredAt: new Date().toISOString(),
      correlationId: 'c',
      causationId: null,
      idempotencyKey: null,
      actor: null,
      data: { n },
    };
    return (await bus.js.publish(eventSubject(naming, context, type, `wt-${n}`), JSON.stringify(body))).seq;
  }

  /** A member that records each event it handles (committed with its inbox row) and each call (committed or not). */
  function member(shared: SharedDurable, memberName: string, types: string[], extra: Partial<EventConsumerOptions> & { fail?: (n: number, call: number) => boolean } = {}) {
    const calls: number[] = [];
    const consumer = new EventConsumer({
      name: memberName,
      bus,
      pool,
      source: context,
      via: shared,
      types,
      logger,
      backoffMs: () => 50,
      handle: async (event, sql) => {
        const n = (event.data as { n: number }).n;
        calls.push(n);
        await sql.query('INSERT INTO handled (member, n) VALUES ($1, $2)', [memberName, n]);
        if (extra.fail?.(n, calls.filter((c) => c === n).length)) throw new Error(`member ${memberName} fails on ${n}`);
      },
      ...extra,
    });
    return { consumer, calls };
  }

  const handled = async (memberName: string) =>
    (await pool.query<{ n: number }>('SELECT n FROM handled WHERE member = $1 ORDER BY n', [memberName])).rows.map((r) => r.n);

  const inboxOf = async (memberName: string) => (await pool.query('SELECT count(*)::int AS n FROM inbox WHERE consumer = $1', [memberName])).rows[0].n as number;

  async function caughtUp(durable: string, lastSeq: number): Promise<void> {
    await eventually(async () => {
      const info = await bus.jsm.consumers.info(stream(), durable);
      return info.num_ack_pending === 0 && info.num_pending === 0 && info.delivered.stream_seq >= lastSeq;
    }, { what: `${durable} has acknowledged everything up to ${lastSeq}` });
  }

  function shared(durable = `s${randomUUID().slice(0, 8)}`): SharedDurable {
    const it = new SharedDurable({ name: durable, bus, source: context, logger });
    running.push(it);
    return it;
  }

  it('each member handles its types once, with its own inbox; events no member takes are acknowledged, and the stream is read through one durable', async () => {
    const durable = shared();
    const red = member(durable, `red-${randomUUID().slice(0, 6)}`, ['SharedTestRed']);
    const blue = member(durable, `blue-${randomUUID().slice(0, 6)}`, ['SharedTestBlue', 'SharedTestRed']);
    await publish('SharedTestRed', 1);
    await publish('SharedTestGreen', 2);
    await publish('SharedTestBlue', 3);
    const last = await publish('SharedTestRed', 4);
    red.consumer.start();
    blue.consumer.start();
    await caughtUp(durable.name, last);
    expect(await handled(red.consumer.name)).toEqual([1, 4]);
    expect(await handled(blue.consumer.name)).toEqual([1, 3, 4]);
    expect(red.calls).toEqual([1, 4]);
    expect(blue.calls).toEqual([1, 3, 4]);
    expect(await inboxOf(red.consumer.name)).toBe(2);
    expect(await inboxOf(blue.consumer.name)).toBe(3);
    const durables = await (await bus.jsm.consumers.list(stream())).next();
    expect(durables.map((c) => c.name)).toEqual([durable.name]);
    const lag = await red.consumer.lag();
    expect(lag).toMatchObject({ attached: true, pending: 0, oldestUnprocessedAgeMs: 0 });
  });

  it('a member that fails holds back the acknowledgement, not the others: each handles the event once, the failing one until it succeeds', async () => {
    const durable = shared();
    const steady = member(durable, `steady-${randomUUID().slice(0, 6)}`, ['SharedTestRed']);
    let failing = true;
    const flaky = member(durable, `flaky-${randomUUID().slice(0, 6)}`, ['SharedTestRed'], { fail: (n) => n === 2 && failing, maxDeliver: 1000 });
    await publish('SharedTestRed', 1);
    const last = await publish('SharedTestRed', 2);
    steady.consumer.start();
    flaky.consumer.start();
    await eventually(async () => (await handled(steady.consumer.name)).length === 2 && flaky.calls.filter((n) => n === 2).length >= 3, {
      what: 'the steady member done, the flaky one tried again',
    });
    // The message is not acknowledged while a member has not finished it.
    const held = await bus.jsm.consumers.info(stream(), durable.name);
    expect(held.ack_floor.stream_seq).toBe(last - 1);
    failing = false;
    await caughtUp(durable.name, last);
    expect(await handled(steady.consumer.name)).toEqual([1, 2]);
    expect(await handled(flaky.consumer.name)).toEqual([1, 2]);
    // Redelivered for the flaky member's sake, it reached the steady one again, which found it in its inbox.
    expect(steady.calls).toEqual([1, 2]);
  });

  it("a member's dead letter finishes the event for it; the others' handling stands and the message is acknowledged", async () => {
    const durable = shared();
    const steady = member(durable, `steady-${randomUUID().slice(0, 6)}`, ['SharedTestRed']);
    const broken = member(durable, `broken-${randomUUID().slice(0, 6)}`, ['SharedTestRed'], { fail: () => true, maxDeliver: 3 });
    const last = await publish('SharedTestRed', 7);
    steady.consumer.start();
    broken.consumer.start();
    await caughtUp(durable.name, last);
    const letters = await pool.query('SELECT consumer, stream_sequence FROM dead_letters');
    expect(letters.rows).toEqual([{ consumer: broken.consumer.name, stream_sequence: String(last) }]);
    expect(await handled(steady.consumer.name)).toEqual([7]);
    expect(await handled(broken.consumer.name)).toEqual([]);
    expect(broken.calls).toEqual([7, 7, 7]);
  });

  it("a member's dead letter stands when another member's retry brings the event back: the member that gave it up does not run it again", async () => {
    const durable = shared();
    // Fails on its first delivery (and is given up there); it would succeed on a second.
    const broken = member(durable, `broken-${randomUUID().slice(0, 6)}`, ['SharedTestRed'], { fail: (_n, call) => call === 1, maxDeliver: 1 });
    const flaky = member(durable, `flaky-${randomUUID().slice(0, 6)}`, ['SharedTestRed'], { fail: (_n, call) => call === 1, maxDeliver: 1000 });
    const last = await publish('SharedTestRed', 9);
    broken.consumer.start();
    flaky.consumer.start();
    await caughtUp(durable.name, last);
    expect(flaky.calls).toEqual([9, 9]);
    expect(await handled(flaky.consumer.name)).toEqual([9]);
    expect(broken.calls).toEqual([9]);
    expect(await handled(broken.consumer.name)).toEqual([]);
    const letters = await pool.query('SELECT consumer FROM dead_letters');
    expect(letters.rows).toEqual([{ consumer: broken.consumer.name }]);
  });

  it("a member's dead letter handed back goes to that member alone: the others do not run again, even once their inbox no longer holds the event", async () => {
    const durable = shared();
    const steady = member(durable, `steady-${randomUUID().slice(0, 6)}`, ['SharedTestRed']);
    let failing = true;
    const broken = member(durable, `broken-${randomUUID().slice(0, 6)}`, ['SharedTestRed'], { fail: () => failing, maxDeliver: 1 });
    const last = await publish('SharedTestRed', 8);
    steady.consumer.start();
    broken.consumer.start();
    await caughtUp(durable.name, last);
    // The stream no longer holds the event: the steady member's inbox row of it is pruned.
    await pruneExpired(pool, { now: new Date(), inboxBefore: [{ consumer: steady.consumer.name, before: new Date(Date.now() + 60_000) }] });
    failing = false;
    expect(await replayDeadLetters(pool, bus.js, { consumer: broken.consumer.name })).toMatchObject({ replayed: [expect.any(Number)], failed: null });
    await eventually(async () => (await handled(broken.consumer.name)).length === 1, { what: 'the broken member handled the event handed back' });
    await caughtUp(durable.name, last + 1);
    expect(steady.calls).toEqual([8]);
    expect(await handled(steady.consumer.name)).toEqual([8]);
  });

  it('created where its members had durables of their own, it starts at the oldest event one of them had not acknowledged', async () => {
    const suffix = randomUUID().slice(0, 6);
    const ahead = `ahead-${suffix}`;
    const behind = `behind-${suffix}`;
    const seqs: number[] = [];
    for (let n = 1; n <= 4; n++) seqs.push(await publish('SharedTestRed', n));
    // Each member on a durable of its own: `ahead` handles all four events, `behind` the first two.
    const own = (memberName: string, upTo: number) => {
      const consumer = new EventConsumer({
        name: memberName,
        bus,
        pool,
        source: context,
        types: ['SharedTestRed'],
        logger,
        handle: async (event, sql) => {
          const n = (event.data as { n: number }).n;
          if (n > upTo) throw new Error('not this one yet');
          await sql.query('INSERT INTO handled (member, n) VALUES ($1, $2)', [memberName, n]);
        },
        backoffMs: () => 60_000,
      });
      running.push(consumer);
      consumer.start();
      return consumer;
    };
    const a = own(ahead, 4);
    const b = own(behind, 2);
    await caughtUp(ahead, seqs[3]!);
    await eventually(async () => (await bus.jsm.consumers.info(stream(), behind)).ack_floor.stream_seq === seqs[1], { what: 'behind acknowledged two' });
    await a.stop();
    await b.stop();

    const durable = shared();
    const aheadNow = member(durable, ahead, ['SharedTestRed']);
    const behindNow = member(durable, behind, ['SharedTestRed']);
    const last = await publish('SharedTestRed', 5);
    aheadNow.consumer.start();
    behindNow.consumer.start();
    await caughtUp(durable.name, last);
    // Events 1 and 2 were not delivered again; 3 and 4 reached `ahead` again, which had them in its inbox.
    expect(aheadNow.calls).toEqual([5]);
    expect(behindNow.calls).toEqual([3, 4, 5]);
    expect(await handled(ahead)).toEqual([1, 2, 3, 4, 5]);
    expect(await handled(behind)).toEqual([1, 2, 3, 4, 5]);
    const info = await bus.jsm.consumers.info(stream(), durable.name);
    expect(info.config.opt_start_seq).toBe(seqs[2]);
  });

  it('a member whose drain breaks ends the session for all: what was in hand comes back after the ack wait, and each member handles each event once', async () => {
    const durable = shared();
    // What the broken session held comes back after the ack wait.
    const steady = member(durable, `steady-${randomUUID().slice(0, 6)}`, ['SharedTestRed'], { ackWaitMs: 1000 });
    let broke = false;
    // A context around the handling that throws once: the member's drain fails, not its handler.
    const breaking = member(durable, `breaking-${randomUUID().slice(0, 6)}`, ['SharedTestRed'], {
      ackWaitMs: 1000,
      withinEvent: async (_event, work) => {
        if (!broke) {
          broke = true;
          throw new Error('the drain breaks');
        }
        await work();
      },
    });
    await publish('SharedTestRed', 1);
    const last = await publish('SharedTestRed', 2);
    steady.consumer.start();
    breaking.consumer.start();
    await caughtUp(durable.name, last);
    expect(broke).toBe(true);
    expect(await handled(steady.consumer.name)).toEqual([1, 2]);
    expect(await handled(breaking.consumer.name)).toEqual([1, 2]);
    expect(steady.calls).toEqual([1, 2]);
  });

  it('stopped mid-batch, its members finish the batch in hand and hand back what they had not begun, whichever member had it: the next process has it at once, not after the ack wait', async () => {
    const name = `s${randomUUID().slice(0, 8)}`;
    const [red, blue] = [`red-${randomUUID().slice(0, 6)}`, `blue-${randomUUID().slice(0, 6)}`];
    let started!: () => void;
    const firstStarted = new Promise<void>((resolve) => (started = resolve));
    const first = shared(name);
    member(first, red, ['SharedTestRed'], {
      ackWaitMs: 60_000,
      batchSize: 1,
      withinEvent: async (event, work) => {
        if ((event.data as { n: number }).n === 1) {
          started();
          await new Promise((resolve) => setTimeout(resolve, 1000));
        }
        await work();
      },
    });
    member(first, blue, ['SharedTestBlue'], { ackWaitMs: 60_000 });
    await publish('SharedTestRed', 1);
    await publish('SharedTestBlue', 2);
    await publish('SharedTestRed', 3);
    const last = await publish('SharedTestBlue', 4);
    first.start();
    await firstStarted;
    // The blue member is done with its events; the red one has 3 waiting behind 1.
    await eventually(async () => (await handled(blue)).length === 2 && (await bus.jsm.consumers.info(stream(), name)).delivered.stream_seq === last, { what: 'all delivered, the blue events handled' });
    await first.stop();
    expect(await handled(red)).toEqual([1]);
    const stoppedAt = Date.now();
    const next = shared(name);
    member(next, red, ['SharedTestRed'], { ackWaitMs: 60_000 });
    member(next, blue, ['SharedTestBlue'], { ackWaitMs: 60_000 });
    next.start();
    await eventually(async () => (await handled(red)).length === 2, { what: 'the red event not begun handled by the next process', timeoutMs: 20_000 });
    expect(Date.now() - stoppedAt).toBeLessThan(10_000);
    await caughtUp(name, last);
    expect(await handled(red)).toEqual([1, 3]);
    expect(await handled(blue)).toEqual([2, 4]);
  });

  it('stopped while it subscribes, it stops; a later start reads on', async () => {
    const durable = shared();
    const only = member(durable, `only-${randomUUID().slice(0, 6)}`, ['SharedTestRed']);
    only.consumer.start();
    await only.consumer.stop();
    const last = await publish('SharedTestRed', 1);
    only.consumer.start();
    await caughtUp(durable.name, last);
    expect(await handled(only.consumer.name)).toEqual([1]);
  });

  it('refuses a member of another stream, a second member of one name, and a member that joins once it has started', () => {
    const durable = shared();
    member(durable, 'one', ['SharedTestRed']);
    expect(() => member(durable, 'one', ['SharedTestBlue'])).toThrow(/two members named one/);
    expect(
      () => new EventConsumer({ name: 'other', bus, pool, source: 'jobs', via: durable, logger, handle: async () => undefined }),
    ).toThrow(/reads jobs, but shared durable/);
    durable.start();
    expect(() => member(durable, 'late', ['SharedTestRed'])).toThrow(/after it started/);
  });
});
