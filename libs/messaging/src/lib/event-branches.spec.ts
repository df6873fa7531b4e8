import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { RetentionPolicy, StorageType } from '@nats-io/jetstream';
import { eventSubject, streamName, type Context } from '@gantry/contracts';
import { createPool, migrate } from '@gantry/eventstore';
import { deleteStreams, dropSchema, eventually, testDatabaseUrl, testNaming, uniqueName } from '@gantry/testing';
import { Bus } from './bus.js';
import { EventConsumer } from './event-consumer.js';
import { SharedDurable } from './shared-durable.js';

const context: Context = 'jobs';
const logger = { log: () => undefined, warn: () => undefined, error: () => undefined };

/**
 * A job's story log goes on the `log` branch of the jobs subjects (docs/architecture.md, "The bus"):
 * consumers of lifecycle events are never sent it, those of the log are, and the stream holds both.
 */
describe('the log branch of a stream', () => {
  const name = uniqueName('branches');
  const naming = testNaming(name);
  let pool: pg.Pool;
  let bus: Bus;
  const running: Array<{ stop(): Promise<void> }> = [];

  beforeAll(async () => {
    await migrate({ url: testDatabaseUrl, schema: name });
    pool = createPool({ url: testDatabaseUrl, schema: name });
    bus = await Bus.connect({ servers: 'nats://127.0.0.1:4222', naming, name: 'event-branches-test' });
  });

  afterAll(async () => {
    await Promise.all(running.map((c) => c.stop()));
    await deleteStreams(bus.nc, naming.streamPrefix);
    await bus.close();
    await pool.end();
    await dropSchema(name);
  });

  const stream = () => streamName(naming, context);

  /** Publishes an event of `type` for job `jobId` on its subject; returns its stream sequence. */
  async function publish(type: string, jobId: string, version: number): Promise<number> {
    const body = {
      eventId: randomUUID(),
      type,
      schemaVersion: 1,
      streamId: jobId,
      streamVersion: version,
      position: version,
      occurredAt: new Date().toISOString(),
      correlationId: 'c',
      causationId: null,
      idempotencyKey: null,
      actor: null,
      data: {},
    };
    return (await bus.js.publish(eventSubject(naming, context, type, jobId), JSON.stringify(body))).seq;
  }

  /** A consumer of `types` that records the types it is handed, by job. */
  function consumer(types: string[], via?: SharedDurable) {
    const handled: Array<{ jobId: string; type: string }> = [];
    const it = new EventConsumer({
      name: `c-${randomUUID().slice(0, 8)}`,
      bus,
      pool,
      source: context,
      types,
      via,
      validate: false,
      logger,
      handle: async (event) => {
        handled.push({ jobId: event.streamId, type: event.type });
      },
    });
    running.push(it);
    return { it, handled };
  }

  it('adds the log branch to a stream made before it, and keeps the events it holds', async () => {
    // A stream as it was made before the story log had a branch of its own.
    await bus.jsm.streams.add({ name: stream(), subjects: [`${naming.subjectRoot}.jobs.evt.>`], retention: RetentionPolicy.Limits, storage: StorageType.File });
    const before = await publish('JobEnqueued', 'job-old', 1);
    await bus.ensureEventStream(context);
    const info = await bus.jsm.streams.info(stream());
    expect(info.config.subjects).toEqual([`${naming.subjectRoot}.jobs.evt.>`, `${naming.subjectRoot}.jobs.log.>`]);
    expect((await bus.jsm.streams.getMessage(stream(), { seq: before }))?.subject).toBe(`${naming.subjectRoot}.jobs.evt.JobEnqueued.job-old`);
    const logged = await publish('CommitLogged', 'job-old', 2);
    expect((await bus.jsm.streams.getMessage(stream(), { seq: logged }))?.subject).toBe(`${naming.subjectRoot}.jobs.log.CommitLogged.job-old`);
  });

  it('sends a consumer of lifecycle events none of the story log, a consumer of the log only the log, and one of both every event', async () => {
    const jobId = `job-${randomUUID().slice(0, 8)}`;
    const lifecycle = consumer(['JobEnqueued', 'JobFinished']);
    const log = consumer(['ImplementationLogged', 'CommitLogged', 'TestResultLogged']);
    const both = consumer(['JobFinished', 'CommitLogged']);
    const types = ['JobEnqueued', 'JobClaimed', 'ImplementationLogged', 'CommitLogged', 'TestResultLogged', 'JobFinished'];
    const first = (await bus.jsm.streams.info(stream())).state.last_seq + 1;
    let last = 0;
    for (const [i, type] of types.entries()) last = await publish(type, jobId, i + 1);
    for (const c of [lifecycle, log, both]) c.it.start();
    const of = (c: { handled: Array<{ jobId: string; type: string }> }) => c.handled.filter((h) => h.jobId === jobId).map((h) => h.type);
    await eventually(async () => of(lifecycle).length === 2 && of(log).length === 3 && of(both).length === 2, { what: 'every consumer handled its events' });

    const delivered = async (durable: string) => {
      const info = await bus.jsm.consumers.info(stream(), durable);
      return { filter: info.config.filter_subject ?? '', delivered: info.delivered.consumer_seq, pending: info.num_pending };
    };
    // Each consumer was sent the events on its branch since the stream began (the previous test's two among them).
    const earlier = first - 1;
    expect(await delivered(lifecycle.it.name)).toEqual({ filter: `${naming.subjectRoot}.jobs.evt.>`, delivered: 1 + 3, pending: 0 });
    expect(await delivered(log.it.name)).toEqual({ filter: `${naming.subjectRoot}.jobs.log.>`, delivered: 1 + 3, pending: 0 });
    expect(await delivered(both.it.name)).toEqual({ filter: '', delivered: earlier + types.length, pending: 0 });
    expect(last - earlier).toBe(types.length);
    expect(of(lifecycle)).toEqual(['JobEnqueued', 'JobFinished']);
    expect(of(log)).toEqual(['ImplementationLogged', 'CommitLogged', 'TestResultLogged']);
    expect(of(both)).toEqual(['CommitLogged', 'JobFinished']);
    // The job of the first test: its enqueue went to the lifecycle consumer, its log entry to the other two.
    expect(lifecycle.handled.filter((h) => h.jobId === 'job-old').map((h) => h.type)).toEqual(['JobEnqueued']);
    expect(log.handled.filter((h) => h.jobId === 'job-old').map((h) => h.type)).toEqual(['CommitLogged']);
  });

  it('a durable shared by consumers of lifecycle events reads the evt branch only', async () => {
    const shared = new SharedDurable({ name: `s-${randomUUID().slice(0, 8)}`, bus, source: context, logger });
    running.push(shared);
    const offers = consumer(['JobEnqueued'], shared);
    const reactions = consumer(['JobClaimed', 'JobFinished'], shared);
    const jobId = `job-${randomUUID().slice(0, 8)}`;
    for (const [i, type] of ['JobEnqueued', 'JobClaimed', 'CommitLogged', 'TestResultLogged', 'JobFinished'].entries()) await publish(type, jobId, i + 1);
    offers.it.start();
    reactions.it.start();
    await eventually(async () => offers.handled.some((h) => h.jobId === jobId) && reactions.handled.some((h) => h.jobId === jobId && h.type === 'JobFinished'), {
      what: 'the members handled their events',
    });
    const info = await bus.jsm.consumers.info(stream(), shared.name);
    expect(info.config.filter_subject).toBe(`${naming.subjectRoot}.jobs.evt.>`);
    // Every evt-branch event of the stream so far (1 + 3 from the tests above, 3 here), none of its 1 + 3 + 2 log entries.
    expect(info.delivered.consumer_seq).toBe(1 + 3 + 3);
    expect(reactions.handled.filter((h) => h.jobId === jobId).map((h) => h.type)).toEqual(['JobClaimed', 'JobFinished']);
  });
});
