import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import type { INestApplication } from '@nestjs/common';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { eventStreamSubjects, eventSubject, streamName } from '@gantry/contracts';
import { createPool, EventStore, migrate } from '@gantry/eventstore';
import { EventConsumer } from '@gantry/messaging';
import {
  appEntry,
  connectTestNats,
  consumerCaughtUp,
  dropSchema,
  eventually,
  freePort,
  removeTestNamespace,
  startScratchNats,
  testDatabaseUrl,
  testNatsUrl,
  testNaming,
  uniqueName,
  type App,
  type ScratchNats,
} from '@gantry/testing';
import { createTestWorld } from '@gantry/service-runtime/testing';
import { registerProducts, startInProcess, type TestWorld } from './harness.js';

/**
 * `node apps/job-service/dist/main.js republish` (docs/operations.md, "JetStream state lost"): the
 * compiled service's maintenance command, run as an operator would. These start apps/job-service/dist
 * (and apps/runner/dist): build first.
 */

interface Outcome {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs an app's binary with these arguments and settings, and answers how it exited and what it wrote. */
function runBinary(app: App, args: string[], env: Record<string, string>): Promise<Outcome> {
  return new Promise((resolve) => {
    execFile(process.execPath, [appEntry(app), ...args], { env: { ...process.env, GANTRY_DATABASE_URL: testDatabaseUrl, LOG_LEVEL: 'warn', ...env }, timeout: 60_000 }, (error, stdout, stderr) => {
      resolve({ code: error ? ((error as { code?: number }).code ?? null) : 0, stdout, stderr });
    });
  });
}

const republish = (args: string[], env: Record<string, string>) => runBinary('job-service', ['republish', ...args], env);

describe('the republish command, while the job service runs, after its event stream was deleted', () => {
  let nats: ScratchNats;
  let world: TestWorld;
  let app: INestApplication;
  /** A consumer of another service, down while the stream went: its own schema, inbox and table of what it handled. */
  const watcherSchema = uniqueName('republish_watcher');
  const watcherName = 'republish-test-watcher';
  let watcherPool: pg.Pool;
  let watcher: EventConsumer | null = null;

  beforeAll(async () => {
    nats = await startScratchNats();
    world = await createTestWorld('republish', { natsUrl: nats.url });
    app = await startInProcess(world, { GANTRY_NATS_URL: nats.url });
    await migrate({ url: testDatabaseUrl, schema: watcherSchema });
    watcherPool = createPool({ url: testDatabaseUrl, schema: watcherSchema, max: 4 });
    await watcherPool.query('CREATE TABLE handled (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, event_id text NOT NULL)');
  });

  afterAll(async () => {
    await watcher?.stop();
    await app?.close();
    await watcherPool?.end();
    await dropSchema(watcherSchema);
    await world?.close();
    await nats?.remove();
  });

  const startWatcher = () => {
    watcher = new EventConsumer({
      name: watcherName,
      bus: world.bus,
      pool: watcherPool,
      source: 'jobs',
      validate: false,
      logger: { log: () => undefined, warn: () => undefined, error: () => undefined },
      backoffMs: () => 50,
      // One row per handling, committed with the consumer's inbox row: a second handling is a second row.
      handle: async (event, sql) => {
        await sql.query('INSERT INTO handled (event_id) VALUES ($1)', [event.eventId]);
      },
    });
    watcher.start();
  };
  const handledTimes = async (): Promise<Map<string, number>> => {
    const { rows } = await watcherPool.query<{ event_id: string; n: number }>('SELECT event_id, count(*)::int AS n FROM handled GROUP BY event_id');
    return new Map(rows.map((r) => [r.event_id, r.n]));
  };
  const productEventIds = async (productIds: string[]): Promise<string[]> =>
    (await world.db.query<{ event_id: string }>(`SELECT event_id FROM events WHERE type = 'ProductRegistered' AND stream_id = ANY($1) ORDER BY position`, [productIds.map((id) => `product-${id}`)])).rows.map((r) => r.event_id);
  const outboxEmpty = () => eventually(async () => Number((await world.db.query('SELECT count(*) AS n FROM outbox')).rows[0].n) === 0, { what: 'the relay to empty the outbox', timeoutMs: 15_000 });

  it('puts back the events the lost stream held: the consumer that was down handles each event once, those it had handled not again', async () => {
    const stream = streamName(world.naming, 'jobs');
    const run = randomUUID().slice(0, 6);
    const since = new Date(Date.now() - 1000).toISOString();

    // Handled before the loss.
    startWatcher();
    const handledBefore = [`a1-${run}`, `a2-${run}`];
    await registerProducts(world.client, handledBefore);
    const idsA = await productEventIds(handledBefore);
    expect(idsA).toHaveLength(2);
    await eventually(async () => {
      const times = await handledTimes();
      return idsA.every((id) => times.get(id) === 1);
    }, { what: 'the watcher to handle the first events' });

    // Published while the watcher is down, then lost with the stream.
    await watcher!.stop();
    watcher = null;
    const lost = [`b1-${run}`, `b2-${run}`, `b3-${run}`];
    await registerProducts(world.client, lost);
    const idsB = await productEventIds(lost);
    await outboxEmpty();
    await world.bus.jsm.streams.delete(stream);

    // Published after the loss, on the stream the relay creates again.
    const afterLoss = [`c1-${run}`];
    await registerProducts(world.client, afterLoss);
    const idsC = await productEventIds(afterLoss);
    await outboxEmpty();
    startWatcher();
    await eventually(async () => (await handledTimes()).get(idsC[0]!) === 1, { what: 'the watcher, back, to handle the event published after the loss' });
    await consumerCaughtUp(world.bus.jsm, stream, watcherName);
    // The lost events are not on the stream: the watcher never gets them by itself.
    const before = await handledTimes();
    expect(idsB.filter((id) => before.has(id))).toEqual([]);

    const env = { GANTRY_DB_SCHEMA: world.name, GANTRY_NATS_URL: nats.url, GANTRY_SUBJECT_ROOT: world.naming.subjectRoot, GANTRY_STREAM_PREFIX: world.naming.streamPrefix };
    const result = await republish(['--since', since], env);
    expect(result).toMatchObject({ code: 0, stderr: '' });
    expect(result.stdout).toContain(`stream ${stream}: max age 7 days, duplicate window 2 minutes (from JetStream)`);
    const inWindow = Number((await world.db.query('SELECT count(*) AS n FROM events WHERE occurred_at >= $1', [since])).rows[0].n);
    expect(result.stdout).toContain(`put back ${inWindow} events in the outbox`);
    expect(result.stdout).toMatch(/product {2}ProductRegistered {2}6 {2}0/);

    await outboxEmpty();
    await eventually(async () => {
      const times = await handledTimes();
      return [...idsA, ...idsB, ...idsC].every((id) => times.has(id));
    }, { what: 'the watcher to handle the events put back', timeoutMs: 20_000 });
    // Everything the relay published again has been delivered and settled: no second handling is still on its way.
    await consumerCaughtUp(world.bus.jsm, stream, watcherName);
    const after = await handledTimes();
    expect(new Set(after.keys())).toEqual(new Set([...idsA, ...idsB, ...idsC]));
    expect([...after.values()].every((n) => n === 1)).toBe(true);

    // Run again (an operator unsure the first went through, or after it failed part-way): the stream
    // holds everything the first run put back, which is not put back, nor published, a second time.
    const again = await republish(['--since', since], env);
    expect(again).toMatchObject({ code: 0, stderr: '' });
    expect(again.stdout).toContain('put back 0 events in the outbox');
    expect(again.stdout).toContain(`left out ${inWindow} events an earlier run put back, which the stream still holds`);
    expect(Number((await world.db.query('SELECT count(*) AS n FROM outbox')).rows[0].n)).toBe(0);

    // Lost again (the watcher's reader makes the stream again at once): the stream no longer holds them, and they all go back.
    await world.bus.jsm.streams.delete(stream);
    const afterSecondLoss = await republish(['--since', since], env);
    expect(afterSecondLoss).toMatchObject({ code: 0, stderr: '' });
    expect(afterSecondLoss.stdout).toContain(`put back ${inWindow} events in the outbox`);
    await outboxEmpty();
  }, 90_000);
});

describe('the republish command, its dry run and what it refuses', () => {
  const schema = uniqueName('republish_cli');
  let pool: pg.Pool;
  let store: EventStore;
  /** Settings of a database URL with a password (the test server trusts any): it is never printed. */
  const password = `pw-${randomUUID()}`;
  /** Its own subjects and streams on the test NATS: the service's event stream is this test's to make and delete. */
  const naming = testNaming(schema);
  const env = {
    GANTRY_DB_SCHEMA: schema,
    GANTRY_DATABASE_URL: testDatabaseUrl.replace('://postgres@', `://postgres:${password}@`),
    GANTRY_NATS_URL: testNatsUrl,
    GANTRY_SUBJECT_ROOT: naming.subjectRoot,
    GANTRY_STREAM_PREFIX: naming.streamPrefix,
  };
  const stream = streamName(naming, 'jobs');
  const outbox = async () => Number((await pool.query('SELECT count(*) AS n FROM outbox')).rows[0].n);

  beforeAll(async () => {
    expect(env.GANTRY_DATABASE_URL).toContain(password);
    // A service's log with no relay running on it: what the command writes stays in its outbox.
    await migrate({ url: testDatabaseUrl, schema });
    pool = createPool({ url: testDatabaseUrl, schema, max: 2 });
    let now = new Date(Date.now() - 3 * 60 * 60 * 1000);
    store = new EventStore({ pool, schema, clock: () => now });
    await store.append('product-old', 0, [{ type: 'ProductRegistered', data: {} }], { correlationId: 't' });
    now = new Date(Date.now() - 60 * 1000);
    await store.append('job-1', 0, [{ type: 'JobEnqueued', data: {} }, { type: 'JobClaimed', data: {} }], { correlationId: 't' });
    await store.append('job-2', 0, [{ type: 'JobEnqueued', data: {} }], { correlationId: 't' });
    await pool.query('DELETE FROM outbox');
  });

  afterAll(async () => {
    await pool?.end();
    await removeTestNamespace(naming, schema);
  });

  beforeEach(async () => {
    // Each test a first run: no earlier run whose events it would leave out.
    await pool.query('DELETE FROM outbox; DELETE FROM republish_runs');
  });

  const minutesAgo = (minutes: number) => new Date(Date.now() - minutes * 60 * 1000).toISOString();

  it('a dry run prints what it would put back per stream type and event type, and changes nothing', async () => {
    const result = await republish(['--since', minutesAgo(10), '--dry-run'], env);
    expect(result).toMatchObject({ code: 0, stderr: '' });
    expect(result.stdout).toContain('dry run: would put back 3 events in the outbox');
    expect(result.stdout).toContain('job  JobClaimed  1  0');
    expect(result.stdout).toContain('job  JobEnqueued  2  0');
    expect(result.stdout).not.toContain('ProductRegistered');
    expect(result.stdout).toContain(`schema ${schema}`);
    expect(result.stdout + result.stderr).not.toContain(password);
    expect(await outbox()).toBe(0);
  });

  it.each([
    [[], '--since is required'],
    [['--since', 'yesterday'], '--since must be an ISO 8601 time with a time zone'],
    [['--since', '2026-12-05T21:00:00'], '--since must be an ISO 8601 time with a time zone'],
    // Date would read these as 2026-03-02 and the next day's midnight: a window other than the one asked.
    [['--since', '2026-02-30T21:00:00Z'], "--since '2026-02-30T21:00:00Z' is not a time that exists"],
    [['--since', '2026-12-05T21:00:00Z', '--until', '2026-12-05T24:00:00Z'], "--until '2026-12-05T24:00:00Z' is not a time that exists"],
    [['--since', new Date(Date.now() + 60 * 60 * 1000).toISOString()], 'is in the future'],
    [['--since', minutesAgo(10), '--until', minutesAgo(20)], 'must be after --since'],
    [['--since', minutesAgo(10), '--sincee', 'x'], "Unknown option '--sincee'"],
    [['--since', minutesAgo(10), '--batch-size', '0'], '--batch-size must be a whole number'],
  ])('refuses %j: exits 2 with a clear message, changes nothing', async (args, message) => {
    const result = await republish(args as string[], env);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('republish: refused, nothing changed');
    expect(result.stderr).toContain(message);
    expect(result.stdout + result.stderr).not.toContain(password);
    expect(await outbox()).toBe(0);
  });

  /** The service's event stream as its relay makes it, with this max age; or none. */
  const streamWithMaxAge = async (maxAgeMs: number | null) => {
    const nc = await connectTestNats('republish-test');
    try {
      const jsm = await jetstreamManager(nc);
      await jsm.streams.delete(stream).catch(() => undefined);
      if (maxAgeMs !== null) await jsm.streams.add({ name: stream, subjects: eventStreamSubjects(naming, 'jobs'), max_age: maxAgeMs * 1_000_000 });
    } finally {
      await nc.close();
    }
  };
  const HOUR = 60 * 60 * 1000;

  it("refuses a --since older than the max age JetStream has for the stream (whatever GANTRY_STREAM_MAX_AGE_MS says), saying why, and with --force puts them back, warning", async () => {
    const args = ['--since', minutesAgo(4 * 60)];
    // The stream keeps 2 hours; the command's own setting is the default 7 days.
    await streamWithMaxAge(2 * HOUR);
    const refused = await republish(args, env);
    expect(refused.code).toBe(2);
    expect(refused.stdout).toContain(`stream ${stream}: max age 2 hours, duplicate window 2 minutes (from JetStream)`);
    expect(refused.stderr).toContain(`older than the event stream's max age (stream ${stream}'s, from JetStream: 2 hours`);
    expect(refused.stderr).toContain('--force');
    expect(await outbox()).toBe(0);

    const forced = await republish([...args, '--force'], env);
    expect(forced.code).toBe(0);
    expect(forced.stderr).toContain('warning (--force)');
    expect(forced.stdout).toContain('put back 4 events in the outbox');
    expect(await outbox()).toBe(4);

    // A stream that keeps more than the setting says: the stream's age decides.
    await pool.query('DELETE FROM outbox');
    await streamWithMaxAge(6 * HOUR);
    const kept = await republish(args, { ...env, GANTRY_STREAM_MAX_AGE_MS: String(HOUR) });
    expect(kept).toMatchObject({ code: 0, stderr: '' });
    expect(await outbox()).toBe(4);
  });

  it('a stream that is gone goes by GANTRY_STREAM_MAX_AGE_MS, the age its relay creates it again with, and says so', async () => {
    await streamWithMaxAge(null);
    const args = ['--since', minutesAgo(4 * 60)];
    const refused = await republish(args, { ...env, GANTRY_STREAM_MAX_AGE_MS: String(2 * HOUR) });
    expect(refused.code).toBe(2);
    expect(refused.stdout).toContain(`stream ${stream} does not exist (JetStream lost it): the service's relay creates it again with GANTRY_STREAM_MAX_AGE_MS (2 hours)`);
    expect(refused.stderr).toContain(`older than the event stream's max age (GANTRY_STREAM_MAX_AGE_MS, stream ${stream} being gone: 2 hours`);
    expect(await outbox()).toBe(0);
    const accepted = await republish(args, env);
    expect(accepted).toMatchObject({ code: 0, stderr: '' });
    expect(await outbox()).toBe(4);
  });

  it('a run again leaves out what an earlier run put back while the stream holds all published since; after a purge it puts them back', async () => {
    await streamWithMaxAge(6 * HOUR);
    const args = ['--since', minutesAgo(10)];
    expect((await republish(args, env)).stdout).toContain('put back 3 events in the outbox');
    // The relay published them.
    await pool.query('DELETE FROM outbox');
    const nc = await connectTestNats('republish-test');
    try {
      const js = jetstream(nc);
      for (let i = 0; i < 3; i++) await js.publish(eventSubject(naming, 'jobs', 'JobEnqueued', `job-${i}`), '{}', { msgID: `m-${i}` });
      const again = await republish(args, env);
      expect(again.stdout).toContain('put back 0 events in the outbox');
      expect(again.stdout).toContain('left out 3 events an earlier run put back, which the stream still holds');
      const dry = await republish([...args, '--dry-run'], env);
      expect(dry.stdout).toContain('would leave out 3 events');
      expect(await outbox()).toBe(0);

      // Purged: what the runs published is gone from it.
      await (await jetstreamManager(nc)).streams.purge(stream);
      const afterPurge = await republish(args, env);
      expect(afterPurge.stdout).toContain('put back 3 events in the outbox');
      expect(afterPurge.stdout).not.toContain('left out');
      expect(await outbox()).toBe(3);

    } finally {
      await nc.close();
    }
  });

  it('a run begun within the duplicate window of a purge proves nothing: the server may have dropped what it published as copies, and a run again puts them back', async () => {
    await streamWithMaxAge(6 * HOUR);
    const args = ['--since', minutesAgo(10)];
    const nc = await connectTestNats('republish-test');
    try {
      const js = jetstream(nc);
      const eventIds = (await pool.query<{ event_id: string }>('SELECT event_id FROM events WHERE occurred_at >= $1 ORDER BY position', [args[1]])).rows.map((r) => r.event_id);
      for (const id of eventIds) await js.publish(eventSubject(naming, 'jobs', 'JobEnqueued', 'job-1'), '{}', { msgID: id });
      await (await jetstreamManager(nc)).streams.purge(stream);
      expect((await republish(args, env)).stdout).toContain('put back 3 events in the outbox');
      // The relay publishes them: the server, which remembers their ids, drops each as a copy.
      for (const id of eventIds) expect((await js.publish(eventSubject(naming, 'jobs', 'JobEnqueued', 'job-1'), '{}', { msgID: id })).duplicate).toBe(true);
      await pool.query('DELETE FROM outbox');
      const again = await republish(args, env);
      expect(again.stdout).toContain('put back 3 events in the outbox');
      expect(again.stdout).not.toContain('left out');
    } finally {
      await nc.close();
    }
  });

  it('a NATS it cannot reach fails it with exit 1 and changes nothing, unless --force, which goes by GANTRY_STREAM_MAX_AGE_MS, warning', async () => {
    const noNats = { ...env, GANTRY_NATS_URL: `nats://127.0.0.1:${await freePort()}` };
    const failed = await republish(['--since', minutesAgo(10)], noNats);
    expect(failed.code).toBe(1);
    expect(failed.stderr).toContain(`republish: failed: JetStream could not be asked for stream ${stream}'s max age`);
    expect(failed.stderr).toContain('nothing changed');
    expect(failed.stdout + failed.stderr).not.toContain(password);
    expect(await outbox()).toBe(0);

    const forced = await republish(['--since', minutesAgo(10), '--force'], noNats);
    expect(forced.code).toBe(0);
    expect(forced.stderr).toContain('warning (--force): JetStream could not be asked');
    expect(forced.stdout).toContain('put back 3 events in the outbox');
    expect(await outbox()).toBe(3);
  });

  it('refuses a --since older than the receipt window, even with streams kept for ever, and with --force puts them back, warning', async () => {
    // A consumer without an inbox row of an event (it was dead-lettered after its handler had sent a
    // command) would send that command again, under a key whose receipt may be pruned.
    const args = ['--since', minutesAgo(4 * 60)];
    const window = { ...env, GANTRY_STREAM_MAX_AGE_MS: '0', GANTRY_RECEIPT_TTL_MS: String(2 * 60 * 60 * 1000) };
    const refused = await republish(args, window);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain('older than the receipt window (GANTRY_RECEIPT_TTL_MS: 2 hours');
    expect(refused.stderr).toContain('--force');
    expect(await outbox()).toBe(0);

    const forced = await republish([...args, '--force'], window);
    expect(forced.code).toBe(0);
    expect(forced.stderr).toContain('warning (--force)');
    expect(await outbox()).toBe(4);
  });

  it('refuses a schema without an event log, a setting the service refuses, and an unknown command; the runner has no such command', async () => {
    const missing = await republish(['--since', minutesAgo(10)], { ...env, GANTRY_DB_SCHEMA: `${schema}_missing` });
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain('has no event log');
    expect(missing.stdout + missing.stderr).not.toContain(password);

    // a log from before republish_runs: the binary upgraded, the service not started since
    const old = `${schema}_old`;
    await pool.query(`CREATE SCHEMA ${old}; CREATE TABLE ${old}.events (position bigint); CREATE TABLE ${old}.outbox (position bigint)`);
    try {
      const unmigrated = await republish(['--since', minutesAgo(10)], { ...env, GANTRY_DB_SCHEMA: old });
      expect(unmigrated.code).toBe(2);
      expect(unmigrated.stderr).toContain('is not migrated to this version (no republish_runs table): start the service of this version once');
    } finally {
      await pool.query(`DROP SCHEMA ${old} CASCADE`);
    }

    const badSchema = await republish(['--since', minutesAgo(10)], { ...env, GANTRY_DB_SCHEMA: 'jobs; DROP TABLE events' });
    expect(badSchema.code).toBe(2);
    expect(badSchema.stderr).toContain('GANTRY_DB_SCHEMA must be a schema name');
    expect(badSchema.stderr).not.toContain('DROP TABLE');

    const badSetting = await republish(['--since', minutesAgo(10)], { ...env, GANTRY_STREAM_MAX_AGE_MS: 'a-week' });
    expect(badSetting.code).toBe(2);
    expect(badSetting.stderr).toContain('GANTRY_STREAM_MAX_AGE_MS');

    const typo = await runBinary('job-service', ['republsh', '--since', minutesAgo(10)], env);
    expect(typo.code).toBe(2);
    expect(typo.stderr).toContain("unknown command 'republsh'");

    const runner = await runBinary('runner', ['republish', '--since', minutesAgo(10)], env);
    expect(runner.code).toBe(2);
    expect(runner.stderr).toContain('runner keeps no event log');
    expect(await outbox()).toBe(0);
  });

  it('a database it cannot reach fails it with exit 1, naming the cause and not the password; --help prints the usage', async () => {
    const port = await freePort();
    const unreachable = await republish(['--since', minutesAgo(10)], { ...env, GANTRY_DATABASE_URL: `postgres://postgres:${password}@127.0.0.1:${port}/gantry` });
    expect(unreachable.code).toBe(1);
    expect(unreachable.stderr).toContain('republish: failed');
    expect(unreachable.stderr).toContain('ECONNREFUSED');
    expect(unreachable.stdout + unreachable.stderr).not.toContain(password);

    const help = await republish(['--help'], env);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain('usage: node apps/<service>/dist/main.js republish --since <time>');
    expect(await outbox()).toBe(0);
  });

  it('puts back the window\'s events in batches, and a second run while they wait adds none', async () => {
    const first = await republish(['--since', minutesAgo(10), '--batch-size', '2'], env);
    expect(first.code).toBe(0);
    expect(first.stdout).toContain('put back 3 events in the outbox in 2 batches (0 more already waited there)');
    expect(await outbox()).toBe(3);
    const second = await republish(['--since', minutesAgo(10)], env);
    expect(second.stdout).toContain('put back 0 events in the outbox in 1 batch (3 more already waited there)');
    expect(await outbox()).toBe(3);
  });
});
