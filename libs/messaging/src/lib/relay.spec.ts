import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import pg from 'pg';
import { dispatchSubject, eventSubject, streamName, type Context } from '@gantry/contracts';
import { createPool, EventStore, migrate, outboxChannel } from '@gantry/eventstore';
import { deleteStreams, dropSchema, eventually, mostRowsReadByAStep, startCuttableProxy, startNodeProcess, startScratchNats, testDatabaseUrl, testNaming, uniqueName, type ScratchServer } from '@gantry/testing';
import { Bus } from './bus.js';
import { OUTBOX_BACKLOG_QUERY, OUTBOX_BATCH_QUERY, OutboxRelay, type Companions } from './relay.js';

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

/** Records the text of every message the relay of `schema` sends on its connection, until `restore`. */
function recordRelayMessages(schema: string): { sent: string[]; restore: () => void } {
  const sent: string[] = [];
  const send = pg.Client.prototype.query;
  pg.Client.prototype.query = function (this: pg.Client & { connectionParameters: { application_name?: string } }, ...args: unknown[]) {
    if (this.connectionParameters.application_name === `gantry-relay-${schema}`) sent.push(typeof args[0] === 'string' ? args[0] : ((args[0] as { text?: string })?.text ?? ''));
    return (send as (...a: unknown[]) => unknown).apply(this, args);
  } as typeof send;
  return { sent, restore: () => (pg.Client.prototype.query = send) };
}

/** What a message of the relay's connection does to the outbox. */
function relayMessage(text: string): string {
  return text.startsWith('DELETE') ? (text.includes('SELECT') ? 'delete + read' : 'delete') : 'read';
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
      // The last batch's rows go with a read made for them soon after (removeWithinMs).
      await eventually(async () => (await relay.pending()) === 0, { what: 'the published rows deleted' });
    } finally {
      early.release();
      await relay.stop();
    }
  });

  it('while it finds work it deletes a batch in the message that reads the next, and after a short batch it waits; that batch goes with a read made for it', async () => {
    const streams = Array.from({ length: 5 }, () => `job-${randomUUID()}`);
    for (const stream of streams) await store.append(stream, 0, Array.from({ length: 50 }, (_, i) => ({ type: 'Bulk', data: { i } })), { correlationId: 't' });
    const { sent, restore } = recordRelayMessages(name);
    // Polling every minute: within this test only finding a full batch makes the relay read again.
    const relay = new OutboxRelay({ databaseUrl: testDatabaseUrl, pool, schema: name, bus, context, logger: quiet, pollMs: 60_000, batchSize: 100 });
    try {
      relay.start();
      await eventually(async () => (await relay.pending()) === 0, { what: 'the outbox drained' });
    } finally {
      await relay.stop();
      restore();
    }
    expect((await publishedIds(bus)).length).toBe(250);
    const work = sent.filter((text) => text.includes('FROM outbox'));
    // Batches of 100, 100 and 50: each deleted with the read after it, the last with a read made for it
    // since no commit came (within removeWithinMs, not after the minute's poll).
    expect(work.map(relayMessage)).toEqual(['read', 'delete + read', 'delete + read', 'delete + read']);
  });

  it('the rows of a short batch are deleted with the read the next commit wakes the relay for, never in a round trip of their own', async () => {
    const { sent, restore } = recordRelayMessages(name);
    // Neither the poll nor the bound comes within the test: only commits make the relay read.
    const relay = new OutboxRelay({ databaseUrl: testDatabaseUrl, pool, schema: name, bus, context, logger: quiet, pollMs: 60_000, removeWithinMs: 60_000 });
    const appended: string[] = [];
    try {
      relay.start();
      await eventually(() => sent.some((text) => text.includes('FROM outbox')), { what: 'the relay\'s first look, at an empty outbox' });
      for (let i = 0; i < 3; i++) {
        const [event] = await store.append(`job-${randomUUID()}`, 0, [{ type: 'One', data: { i } }], { correlationId: 't' });
        appended.push(event!.eventId);
        relay.appended();
        await eventually(async () => (await publishedIds(bus)).includes(event!.eventId), { what: `event ${i} published` });
      }
      // The last one's row waits for the next read; the earlier ones went with the reads after them.
      expect(await relay.pending()).toBe(1);
    } finally {
      await relay.stop();
      restore();
    }
    expect(await relay.pending()).toBe(0);
    expect(await publishedIds(bus)).toEqual(appended);
    // No delete of its own while the relay ran (the first look may still be under way when the first
    // commit comes, and read it): each went with the read of a later commit, and the last row's when
    // the relay stopped.
    const work = sent.filter((text) => text.includes('FROM outbox')).map(relayMessage);
    expect(work.slice(0, -1)).not.toContain('delete');
    expect(work.filter((message) => message === 'delete + read').length).toBeGreaterThanOrEqual(2);
    expect(work.at(-1)).toBe('delete');
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
    // Twice refused the lead while a holds it: it stands by rather than publishing beside a.
    await eventually(() => b.timesStoodBy >= 2, { what: 'b standing by' });
    expect(b.isLeader).toBe(false);
    expect(a.isLeader).toBe(true);
    await a.stop();
    await eventually(() => b.isLeader, { what: 'b takes over' });
    await store.append(`job-${randomUUID()}`, 0, [{ type: 'AfterFailover', data: {} }], { correlationId: 't' });
    await eventually(async () => (await publishedIds(bus)).length === 1, { what: 'published by the standby' });
    await b.stop();
  });

  it('no commit notifies: the active relay is woken in-process, and a standby replica wakes it with a NOTIFY after its commit', async () => {
    // Polling every minute: within this test only a wake-up can make either relay publish.
    const active = new OutboxRelay({ databaseUrl: testDatabaseUrl, pool, schema: name, bus, context, logger: quiet, pollMs: 60_000 });
    const standby = new OutboxRelay({ databaseUrl: testDatabaseUrl, pool, schema: name, bus, context, logger: quiet, pollMs: 60_000, standbyRetryMs: 60_000 });
    const here = new EventStore({ pool, schema: name });
    const elsewhere = new EventStore({ pool: createPool({ url: testDatabaseUrl, schema: name, max: 2 }), schema: name });
    here.onAppended(() => active.appended());
    elsewhere.onAppended(() => standby.appended());
    active.start();
    await eventually(() => active.isLeader, { what: 'the active relay' });
    standby.start();
    // The standby listens before it tries to lead; its failed try is its last statement.
    await eventually(async () => (await pool.query(`SELECT 1 FROM pg_stat_activity WHERE application_name = $1 AND query LIKE '%pg_try_advisory_lock%'`, [`gantry-relay-${name}`])).rowCount === 1, {
      what: 'the standby relay listening',
    });

    // A listener of our own counts the notifications on the relays' channel.
    const listener = new pg.Client({ connectionString: testDatabaseUrl });
    let notifications = 0;
    listener.on('notification', () => notifications++);
    await listener.connect();
    await listener.query(`LISTEN "${outboxChannel(name)}"`);

    await here.append(`job-${randomUUID()}`, 0, [{ type: 'Here', data: {} }], { correlationId: 't' });
    await eventually(async () => (await publishedIds(bus)).length === 1, { what: 'published after an in-process wake' });
    expect(notifications).toBe(0); // the commit notified nobody
    await elsewhere.append(`job-${randomUUID()}`, 0, [{ type: 'Elsewhere', data: {} }], { correlationId: 't' });
    await eventually(async () => (await publishedIds(bus)).length === 2, { what: 'published after the standby replica notified' });
    expect(notifications).toBeGreaterThanOrEqual(1);
    await listener.end();
    await standby.stop();
    await active.stop();
    await elsewhere.pool.end();
  });

  it('reads the waiting events by the outbox\'s positions, never walking the log up to them', async () => {
    await pool.query(`INSERT INTO events (event_id, stream_id, stream_version, type, schema_version, data, metadata, occurred_at)
                      SELECT gen_random_uuid(), 'job-' || g, 1, 'Old', 1, '{}', '{}', now() FROM generate_series(1, 20000) g`);
    await pool.query('INSERT INTO outbox (position) SELECT position FROM events');
    await pool.query('ANALYZE events, outbox');
    // All but the newest ten published since the statistics were taken, as under a steady load.
    await pool.query('DELETE FROM outbox WHERE position < (SELECT max(position) - 9 FROM events)');
    for (const [query, params] of [[OUTBOX_BATCH_QUERY, [500]], [OUTBOX_BACKLOG_QUERY, []]] as const) {
      expect({ query, rows: await mostRowsReadByAStep(pool, query, [...params]) }).toEqual({ query, rows: 10 });
    }
    const { rows: batch } = await pool.query<{ position: string }>(OUTBOX_BATCH_QUERY, [500]);
    const { rows: waiting } = await pool.query<{ position: string }>('SELECT position FROM outbox ORDER BY position');
    expect(batch.map((r) => r.position)).toEqual(waiting.map((r) => r.position));
    expect(batch).toHaveLength(10);
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

  it('a publish that fails in the middle of a stream holds back the rest of that stream: each stream lands in version order', async () => {
    const failures: string[] = [];
    const logger = { log: () => undefined, error: (_: string, fields: Record<string, unknown>) => void failures.push(String(fields.error)) };
    const relay = new OutboxRelay({ databaseUrl: testDatabaseUrl, pool, schema: name, bus, context, logger, pollMs: 100 });
    const stream = streamName(naming, context);
    // The injected failure: JetStream refuses any message above 2 KB, so version 2 of the job fails to publish.
    await bus.jsm.streams.update(stream, { max_msg_size: 2048 });
    const job = `job-${randomUUID()}`;
    const other = `job-${randomUUID()}`;
    await store.append(job, 0, [
      { type: 'Step', data: { v: 1 } },
      { type: 'Step', data: { v: 2, note: 'x'.repeat(4096) } },
      { type: 'Step', data: { v: 3 } },
    ], { correlationId: 't' });
    await store.append(other, 0, [{ type: 'Step', data: { v: 1 } }], { correlationId: 't' });
    relay.start();
    try {
      await eventually(() => failures.some((f) => /maximum|exceeds/i.test(f)), { what: 'the refused publish reported' });
      // Another stream is not held up by this one.
      await eventually(async () => (await publishedIds(bus)).length >= 2, { what: 'the publishable events out' });
      await bus.jsm.streams.update(stream, { max_msg_size: -1 });
      await eventually(async () => (await relay.pending()) === 0, { what: 'the outbox drained once the stream takes the event' });
    } finally {
      await relay.stop();
    }
    const { rows } = await pool.query<{ event_id: string; stream_id: string; stream_version: number }>(
      'SELECT event_id, stream_id, stream_version FROM events',
    );
    const byId = new Map(rows.map((r) => [r.event_id, r]));
    const versions = (await publishedIds(bus)).map((id) => byId.get(id)!).filter((r) => r.stream_id === job).map((r) => r.stream_version);
    expect(versions).toEqual([1, 2, 3]);
  });

  it('publishes an event\'s companions with it, its envelope counting them; a companion JetStream refuses keeps the event in the outbox until it is taken, and each lands once', async () => {
    const failures: string[] = [];
    const logger = { log: () => undefined, error: (_: string, fields: Record<string, unknown>) => void failures.push(String(fields.error)) };
    const dispatch = await bus.ensureDispatchStream();
    await bus.jsm.streams.purge(dispatch);
    const companions: Companions = (event, naming) =>
      event.type === 'Offered' ? [{ subject: dispatchSubject(naming, 'TASK'), payload: JSON.stringify({ for: event.streamId, note: 'x'.repeat(4096) }), msgID: `${event.eventId}-offer` }] : [];
    const relay = new OutboxRelay({ databaseUrl: testDatabaseUrl, pool, schema: name, bus, context, logger, pollMs: 100, companions });
    // The injected failure: the dispatch stream refuses any message above 2 KB, so the companion fails to publish.
    await bus.jsm.streams.update(dispatch, { max_msg_size: 2048 });
    const job = `job-${randomUUID()}`;
    const [offered, plain] = await store.append(job, 0, [{ type: 'Offered', data: {} }, { type: 'Plain', data: {} }], { correlationId: 't' });
    relay.start();
    try {
      await eventually(() => failures.some((f) => /maximum|exceeds/i.test(f)), { what: 'the refused companion reported' });
      // The event is held back with its companion, and the rest of its stream behind it.
      expect(await relay.pending()).toBe(2);
      await bus.jsm.streams.update(dispatch, { max_msg_size: -1 });
      await eventually(async () => (await relay.pending()) === 0, { what: 'the outbox drained once the companion is taken' });
    } finally {
      await relay.stop();
    }
    expect(await publishedIds(bus)).toEqual([offered!.eventId, plain!.eventId]);
    const envelopeOf = async (eventId: string) => {
      const subject = eventSubject(naming, context, eventId === offered!.eventId ? 'Offered' : 'Plain', job);
      return (await bus.jsm.streams.getMessage(streamName(naming, context), { last_by_subj: subject }))!.json<Record<string, unknown>>();
    };
    expect((await envelopeOf(offered!.eventId))['companions']).toBe(1);
    expect(await envelopeOf(plain!.eventId)).not.toHaveProperty('companions');
    const info = await bus.jsm.streams.info(dispatch);
    expect(info.state.messages).toBe(1);
    const companion = await bus.jsm.streams.getMessage(dispatch, { seq: info.state.last_seq });
    expect(companion!.header.get('Nats-Msg-Id')).toBe(`${offered!.eventId}-offer`);
    expect(companion!.json<{ for: string }>().for).toBe(job);
  });

  it('an event whose companions cannot be made goes out without them, its envelope saying none went, and the rest of its stream follows', async () => {
    const failures: string[] = [];
    const logger = { log: () => undefined, error: (message: string, fields: Record<string, unknown>) => void failures.push(`${message}: ${String(fields.error)}`) };
    const companions: Companions = (event) => {
      if (event.type === 'Broken') throw new Error('no offer for this one');
      return [];
    };
    const relay = new OutboxRelay({ databaseUrl: testDatabaseUrl, pool, schema: name, bus, context, logger, pollMs: 100, companions });
    const job = `job-${randomUUID()}`;
    const [broken, next] = await store.append(job, 0, [{ type: 'Broken', data: {} }, { type: 'Next', data: {} }], { correlationId: 't' });
    relay.start();
    try {
      await eventually(async () => (await relay.pending()) === 0, { what: 'the outbox drained' });
    } finally {
      await relay.stop();
    }
    expect(await publishedIds(bus)).toEqual([broken!.eventId, next!.eventId]);
    const envelope = (await bus.jsm.streams.getMessage(streamName(naming, context), { last_by_subj: eventSubject(naming, context, 'Broken', job) }))!.json<Record<string, unknown>>();
    expect(envelope).not.toHaveProperty('companions');
    expect(failures).toEqual([expect.stringMatching(/could not make the companions.*no offer for this one/)]);
  });

  /**
   * Runs the relay on its own until it has published `published` events and waits, on a lock held on
   * the outbox row at `lockedOffset`, to run a message like `deleting`; kills it there with SIGKILL and
   * starts another. Returns what the stream and the outbox held between the two, the message ids in
   * the stream once the outbox is empty again, and the events' ids.
   */
  async function killedWhileDeleting(options: { batch?: number; lockedOffset: number; published: number; deleting: string; what: string }) {
    const env = {
      GANTRY_DATABASE_URL: testDatabaseUrl,
      GANTRY_DB_SCHEMA: name,
      GANTRY_CONTEXT: context,
      GANTRY_SUBJECT_ROOT: naming.subjectRoot,
      GANTRY_STREAM_PREFIX: naming.streamPrefix,
      ...(options.batch ? { GANTRY_RELAY_BATCH: String(options.batch) } : {}),
    };
    const outboxRows = async () => Number((await pool.query('SELECT count(*) FROM outbox')).rows[0].count);
    const holder = await pool.connect();
    await holder.query('BEGIN');
    // (Not OFFSET … FOR UPDATE: that also locks the rows it skips.)
    await holder.query('SELECT 1 FROM outbox WHERE position = (SELECT position FROM outbox ORDER BY position OFFSET $1 LIMIT 1) FOR UPDATE', [options.lockedOffset]);
    const first = startNodeProcess(relayEntry, env);
    const stream = streamName(naming, context);
    try {
      await eventually(async () => (await bus.jsm.streams.info(stream)).state.messages === options.published, { what: `${options.published} events published`, timeoutMs: 30_000 });
      await eventually(async () => {
        const { rows } = await pool.query(
          `SELECT 1 FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock' AND query LIKE $2`,
          [`gantry-relay-${name}`, options.deleting],
        );
        return rows.length === 1;
      }, { what: options.what });
      await first.kill('SIGKILL');
      // The killed relay's session would still run its DELETE once the lock is free (the server
      // notices a dead client only when it next talks to it): end it, as if the DELETE never came.
      await pool.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1', [`gantry-relay-${name}`]);
    } finally {
      await holder.query('ROLLBACK');
      holder.release();
    }
    const streamHeld = (await bus.jsm.streams.info(stream)).state.messages;
    const leftInOutbox = await outboxRows();
    const second = startNodeProcess(relayEntry, env);
    try {
      await eventually(async () => (await outboxRows()) === 0, { what: 'the outbox drained after restart', timeoutMs: 60_000 });
    } finally {
      await second.kill('SIGTERM');
    }
    const { rows } = await pool.query<{ event_id: string }>('SELECT event_id FROM events ORDER BY position');
    return { streamHeld, leftInOutbox, ids: await publishedIds(bus), events: rows.map((r) => r.event_id) };
  }

  it('killed with SIGKILL between publishing a batch and removing it from the outbox, then restarted: every event is in the stream exactly once', async () => {
    const total = 3000;
    for (let s = 0; s < 30; s++) {
      const stream = `job-${randomUUID()}`;
      await store.append(stream, 0, Array.from({ length: total / 30 }, (_, i) => ({ type: 'Bulk', data: { i } })), { correlationId: 't' });
    }
    // A lock on one outbox row of the eleventh batch: the relay publishes that batch and then waits
    // to delete it, which is where it is killed.
    const killed = await killedWhileDeleting({ batch: 100, lockedOffset: 1050, published: 1100, deleting: 'DELETE FROM outbox%', what: 'the relay waiting to remove the published batch' });
    expect(killed.streamHeld).toBe(1100);
    expect(killed.leftInOutbox).toBe(total - 1000);
    expect(killed.ids.length).toBe(total);
    expect(new Set(killed.ids).size).toBe(total);
    expect(new Set(killed.ids)).toEqual(new Set(killed.events));
  });

  it('killed with SIGKILL while a short batch\'s published rows wait for the next read to delete them, then restarted: every event is in the stream exactly once', async () => {
    for (let s = 0; s < 4; s++) await store.append(`job-${randomUUID()}`, 0, Array.from({ length: 5 }, (_, i) => ({ type: 'Few', data: { i } })), { correlationId: 't' });
    // A lock on one of the 20 rows: the relay publishes them in one batch short of full, and the read
    // made to delete them waits on that row, which is where it is killed.
    const killed = await killedWhileDeleting({ lockedOffset: 10, published: 20, deleting: 'DELETE FROM outbox%SELECT%', what: 'the relay waiting to delete the short batch with its next read' });
    expect(killed.leftInOutbox).toBe(20);
    expect(killed.ids.length).toBe(20);
    expect(new Set(killed.ids)).toEqual(new Set(killed.events));
  });

  it('run on its own, takes the database bounds: a poll sent while PostgreSQL stops answering is given up, and once it answers the relay publishes again', async () => {
    const proxy = await startCuttableProxy(testDatabaseUrl);
    const env = {
      GANTRY_DATABASE_URL: proxy.url,
      GANTRY_DB_SCHEMA: name,
      GANTRY_CONTEXT: context,
      GANTRY_SUBJECT_ROOT: naming.subjectRoot,
      GANTRY_STREAM_PREFIX: naming.streamPrefix,
      GANTRY_DB_CONNECT_TIMEOUT_MS: '1000',
      GANTRY_DB_QUERY_TIMEOUT_MS: '1000',
      GANTRY_DB_KEEPALIVE_MS: '1000',
    };
    const relay = startNodeProcess(relayEntry, env);
    try {
      const [before] = await store.append(`job-${randomUUID()}`, 0, [{ type: 'BeforeTheOutage', data: {} }], { correlationId: 't' });
      await eventually(async () => (await publishedIds(bus)).includes(before!.eventId), { what: 'the first event published' });
      proxy.blackhole();
      // Appended beside the proxy: its notification, and the relay's polls for it, go into the dark.
      const [during] = await store.append(`job-${randomUUID()}`, 0, [{ type: 'DuringTheOutage', data: {} }], { correlationId: 't' });
      await new Promise((resolve) => setTimeout(resolve, 2_500)); // a poll or two sent into the outage
      proxy.restore();
      // Unbounded, the relay would wait for ever for the answer the proxy dropped.
      await eventually(async () => (await publishedIds(bus)).includes(during!.eventId), { what: 'the event appended during the outage published', timeoutMs: 30_000 });
    } finally {
      proxy.cut();
      await relay.kill('SIGKILL');
      await proxy.close();
    }
  });
});

describe('the relay run on its own', () => {
  it('refuses a bad setting at start, naming the variable and not its value, and touches nothing', async () => {
    // A refusal comes after the modules load (about a second of CPU); at CI's load that took over 30 s.
    const run = promisify(execFile);
    const failure = await run(process.execPath, [relayEntry], {
      env: { PATH: process.env.PATH, GANTRY_DB_SCHEMA: 'relay_refused', GANTRY_CONTEXT: 'jobs', GANTRY_RELAY_BATCH: 'lots-of-secret-9f3' },
      timeout: 120_000,
    }).then(
      () => null,
      (error: { code?: number; stderr?: string }) => error,
    );
    expect(failure?.code).toBe(1);
    expect(failure?.stderr).toContain('GANTRY_RELAY_BATCH');
    expect(failure?.stderr).not.toContain('lots-of-secret-9f3');
    const keepAlive = await run(process.execPath, [relayEntry], {
      env: { PATH: process.env.PATH, GANTRY_DB_SCHEMA: 'relay_refused', GANTRY_CONTEXT: 'jobs', GANTRY_DB_KEEPALIVE_MS: '5' },
      timeout: 120_000,
    }).then(
      () => null,
      (error: { code?: number; stderr?: string }) => error,
    );
    expect(keepAlive?.code).toBe(1);
    expect(keepAlive?.stderr).toContain('GANTRY_DB_KEEPALIVE_MS');
    const pool = new pg.Pool({ connectionString: testDatabaseUrl });
    try {
      const { rows } = await pool.query(`SELECT 1 FROM information_schema.schemata WHERE schema_name = 'relay_refused'`);
      expect(rows).toEqual([]);
    } finally {
      await pool.end();
    }
  }, 300_000);

  it.each([
    ['GANTRY_DB_SCHEMA', 'Relay-Refused', 'must be a schema name'],
    ['GANTRY_SUBJECT_ROOT', 'gantry..relay', 'must be NATS subject tokens joined by dots'],
    ['GANTRY_STREAM_PREFIX', 'GANTRY/', 'must be the start of a JetStream stream name'],
  ])('refuses a %s that is not a valid name as a setting, with the rule the services give', async (variable, value, rule) => {
    const run = promisify(execFile);
    const failure = await run(process.execPath, [relayEntry], {
      env: { PATH: process.env.PATH, GANTRY_DB_SCHEMA: 'relay_refused', GANTRY_CONTEXT: 'jobs', [variable]: value },
      timeout: 120_000,
    }).then(
      () => null,
      (error: { code?: number; stderr?: string }) => error,
    );
    expect(failure?.code).toBe(1);
    expect(failure?.stderr).toMatch(/^relay refused its settings: /);
    expect(failure?.stderr).toContain(`${variable}: ${rule}`);
  }, 150_000);
});

describe('outbox relay, its stream deleted under it', () => {
  const name = uniqueName('relay_gone');
  const naming = testNaming(name);
  let nats: ScratchServer;
  let pool: pg.Pool;
  let store: EventStore;
  let bus: Bus;

  beforeAll(async () => {
    nats = await startScratchNats();
    await migrate({ url: testDatabaseUrl, schema: name });
    pool = createPool({ url: testDatabaseUrl, schema: name, max: 4 });
    store = new EventStore({ pool, schema: name });
    bus = await Bus.connect({ servers: nats.url, naming, name: 'relay-gone-test', streams: { maxAgeMs: 3_600_000 } });
    await bus.ensureEventStream(context);
  });

  afterAll(async () => {
    await bus?.close();
    await pool?.end();
    await dropSchema(name);
    await nats?.remove();
  });

  it('creates the stream again, with the installation settings, and publishes what was appended since; nothing is lost', async () => {
    const relay = new OutboxRelay({ databaseUrl: testDatabaseUrl, pool, schema: name, bus, context, logger: quiet, pollMs: 100 });
    relay.start();
    try {
      const [before] = await store.append(`job-${randomUUID()}`, 0, [{ type: 'Before', data: {} }], { correlationId: 't' });
      await eventually(async () => (await publishedIds(bus)).includes(before!.eventId), { what: 'the first event published' });
      await bus.jsm.streams.delete(streamName(naming, context));
      const [after] = await store.append(`job-${randomUUID()}`, 0, [{ type: 'After', data: {} }], { correlationId: 't' });
      const ids = await eventually(async () => {
        const all = await publishedIds(bus).catch((): string[] => []);
        return all.includes(after!.eventId) ? all : null;
      }, { what: 'the later event published on the stream created again' });
      // What the deleted stream held is not brought back: the log has it (docs/operations.md).
      expect(ids).toEqual([after!.eventId]);
      // the outbox row goes in the relay's next statement, once JetStream acknowledged the publish
      await eventually(async () => (await relay.pending()) === 0, { what: 'the outbox emptied' });
      const info = await bus.jsm.streams.info(streamName(naming, context));
      expect(info.config.max_age).toBe(3_600_000 * 1_000_000);
      // What the operator's recovery does (the republish command, docs/operations.md, "JetStream state
      // lost"): the events since before the loss put back in the outbox are published again, under their event ids.
      await pool.query(`INSERT INTO outbox (position) SELECT position FROM events WHERE occurred_at >= $1 ON CONFLICT DO NOTHING`, [before!.occurredAt]);
      await eventually(async () => (await publishedIds(bus)).includes(before!.eventId), { what: 'the event the deleted stream held published again' });
      expect((await publishedIds(bus)).sort()).toEqual([before!.eventId, after!.eventId].sort());
    } finally {
      await relay.stop();
    }
  });
});
