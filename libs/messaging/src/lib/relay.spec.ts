import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import type pg from 'pg';
import { streamName, type Context } from '@gantry/contracts';
import { createPool, EventStore, migrate } from '@gantry/eventstore';
import { deleteStreams, dropSchema, eventually, startNodeProcess, testDatabaseUrl, testNaming, uniqueName } from '@gantry/testing';
import { Bus } from './bus.js';
import { OutboxRelay } from './relay.js';

const context: Context = 'jobs';
const here = path.dirname(fileURLToPath(import.meta.url));
const relayEntry = path.resolve(here, '../../dist/bin/relay-main.js');
const quiet = { log: () => undefined, error: () => undefined };

/** Every message id in the stream, in stream order. */
async function publishedIds(bus: Bus): Promise<string[]> {
  const name = streamName(bus.naming, context);
  const info = await bus.jsm.streams.info(name);
  if (info.state.messages === 0) return [];
  const consumer = await bus.js.consumers.get(name);
  const ids: string[] = [];
  const messages = await consumer.consume();
  for await (const msg of messages) {
    ids.push(msg.headers?.get('Nats-Msg-Id') ?? '');
    if (msg.seq >= info.state.last_seq) break;
  }
  await messages.close();
  return ids;
}

describe('outbox relay', () => {
  const name = uniqueName('relay');
  const naming = testNaming(name);
  let pool: pg.Pool;
  let store: EventStore;
  let bus: Bus;

  beforeAll(async () => {
    await migrate({ url: testDatabaseUrl, schema: name });
    pool = createPool({ url: testDatabaseUrl, schema: name, max: 12 });
    store = new EventStore({ pool, schema: name });
    bus = await Bus.connect({ servers: 'nats://127.0.0.1:4222', naming, name: 'relay-test' });
    await bus.ensureEventStream(context);
  });

  afterAll(async () => {
    await deleteStreams(bus.nc, naming.streamPrefix);
    await bus.close();
    await pool.end();
    await dropSchema(name);
  });

  beforeEach(async () => {
    await bus.jsm.streams.purge(streamName(naming, context));
    await pool.query('TRUNCATE outbox, events');
  });

  it('publishes both events when two transactions commit in the reverse order of their positions', async () => {
    const relay = new OutboxRelay({ databaseUrl: testDatabaseUrl, pool, schema: name, bus, context, logger: quiet, pollMs: 100 });
    relay.start();
    const early = await pool.connect();
    try {
      await early.query('BEGIN');
      const [first] = await store.appendWithin(early, `job-${randomUUID()}`, 0, [{ type: 'Early', data: {} }], {
        correlationId: 't',
        idempotencyKey: null,
      });
      const [second] = await store.append(`job-${randomUUID()}`, 0, [{ type: 'Late', data: {} }], { correlationId: 't' });
      expect(first!.position).toBeLessThan(second!.position);
      await eventually(async () => (await publishedIds(bus)).includes(second!.eventId), { what: 'the later position published' });
      await early.query('COMMIT');
      const ids = await eventually(async () => {
        const all = await publishedIds(bus);
        return all.includes(first!.eventId) ? all : null;
      }, { what: 'the earlier position published after its late commit' });
      expect(ids.sort()).toEqual([first!.eventId, second!.eventId].sort());
      expect(await relay.pending()).toBe(0);
    } finally {
      early.release();
      await relay.stop();
    }
  });

  it('publishes each stream in version order with the envelope and Nats-Msg-Id', async () => {
    const relay = new OutboxRelay({ databaseUrl: testDatabaseUrl, pool, schema: name, bus, context, logger: quiet, pollMs: 100 });
    relay.start();
    const stream = `job-${randomUUID()}`;
    for (let v = 0; v < 5; v++) await store.append(stream, v, [{ type: 'Step', data: { v } }], { correlationId: 'corr', actor: 'me' });
    await eventually(async () => (await publishedIds(bus)).length === 5, { what: 'five events published' });
    const consumer = await bus.js.consumers.get(streamName(naming, context));
    const versions: number[] = [];
    const messages = await consumer.consume();
    for await (const msg of messages) {
      const envelope = msg.json<{ streamVersion: number; correlationId: string; actor: string; eventId: string }>();
      expect(msg.subject).toBe(`${naming.subjectRoot}.jobs.evt.Step.${stream}`);
      expect(msg.headers?.get('Nats-Msg-Id')).toBe(envelope.eventId);
      expect(envelope).toMatchObject({ correlationId: 'corr', actor: 'me' });
      versions.push(envelope.streamVersion);
      if (versions.length === 5) break;
    }
    await messages.close();
    await relay.stop();
    expect(versions).toEqual([1, 2, 3, 4, 5]);
  });

  it('only one of two relays is active; the standby takes over when the active one stops', async () => {
    const a = new OutboxRelay({ databaseUrl: testDatabaseUrl, pool, schema: name, bus, context, logger: quiet, pollMs: 100, standbyRetryMs: 100 });
    const b = new OutboxRelay({ databaseUrl: testDatabaseUrl, pool, schema: name, bus, context, logger: quiet, pollMs: 100, standbyRetryMs: 100 });
    a.start();
    await eventually(() => a.isLeader, { what: 'a active' });
    b.start();
    await new Promise((r) => setTimeout(r, 300));
    expect(b.isLeader).toBe(false);
    await a.stop();
    await eventually(() => b.isLeader, { what: 'b takes over' });
    await store.append(`job-${randomUUID()}`, 0, [{ type: 'AfterFailover', data: {} }], { correlationId: 't' });
    await eventually(async () => (await publishedIds(bus)).length === 1, { what: 'published by the standby' });
    await b.stop();
  });

  it('a crash between publish and outbox delete re-publishes, and JetStream drops the duplicates', async () => {
    const relay = new OutboxRelay({ databaseUrl: testDatabaseUrl, pool, schema: name, bus, context, logger: quiet, pollMs: 100 });
    relay.start();
    await store.append(`job-${randomUUID()}`, 0, [{ type: 'A', data: {} }, { type: 'B', data: {} }], { correlationId: 't' });
    await eventually(async () => (await relay.pending()) === 0 && (await publishedIds(bus)).length === 2, { what: 'published' });
    await pool.query('INSERT INTO outbox (position) SELECT position FROM events'); // as if the deletes never committed
    await eventually(async () => (await relay.pending()) === 0, { what: 're-drained' });
    await relay.stop();
    expect(await publishedIds(bus)).toHaveLength(2);
  });

  it('killed with SIGKILL mid-batch and restarted: every event is in the stream exactly once', async () => {
    const total = 3000;
    for (let s = 0; s < 30; s++) {
      const stream = `job-${randomUUID()}`;
      await store.append(stream, 0, Array.from({ length: total / 30 }, (_, i) => ({ type: 'Bulk', data: { i } })), { correlationId: 't' });
    }
    const env = {
      GANTRY_DATABASE_URL: testDatabaseUrl,
      GANTRY_DB_SCHEMA: name,
      GANTRY_CONTEXT: context,
      GANTRY_SUBJECT_ROOT: naming.subjectRoot,
      GANTRY_STREAM_PREFIX: naming.streamPrefix,
      GANTRY_RELAY_BATCH: '100',
    };
    const first = startNodeProcess(relayEntry, env);
    const stream = streamName(naming, context);
    await eventually(async () => (await bus.jsm.streams.info(stream)).state.messages >= 300, { what: 'the relay to be mid-way', timeoutMs: 30_000, intervalMs: 5 });
    await first.kill('SIGKILL');
    const publishedBeforeKill = (await bus.jsm.streams.info(stream)).state.messages;
    expect(publishedBeforeKill).toBeLessThan(total);
    const second = startNodeProcess(relayEntry, env);
    try {
      await eventually(async () => Number((await pool.query('SELECT count(*) FROM outbox')).rows[0].count) === 0, {
        what: 'the outbox drained after restart',
        timeoutMs: 60_000,
      });
    } finally {
      await second.kill('SIGTERM');
    }
    const ids = await publishedIds(bus);
    const { rows } = await pool.query<{ event_id: string }>('SELECT event_id FROM events ORDER BY position');
    expect(ids.length).toBe(total);
    expect(new Set(ids).size).toBe(total);
    expect(new Set(ids)).toEqual(new Set(rows.map((r) => r.event_id)));
  });
});
