import 'reflect-metadata';
import { randomUUID } from 'node:crypto';
import { Controller, Inject } from '@nestjs/common';
import { z } from 'zod';
import { commandSubject, defineCommand, defineEvent, ErrorCode, eventSubject, GantryError, type Context } from '@gantry/contracts';
import { EventStore } from '@gantry/eventstore';
import { Bus, CommandClient, OutboxRelay, RetryLater } from '@gantry/messaging';
import { connectTestNats, eventually } from '@gantry/testing';
import type { NatsConnection } from '@nats-io/transport-node';
import { startTestService, type TestService } from '../testing.js';
import { reportOnScrape } from './metrics.js';
import { CommandHandler, DurableConsumer } from './transport/decorators.js';

const context: Context = 'workflow';
const Tally = defineCommand({
  context,
  name: 'tally_test_count',
  request: z.object({ counter: z.string().min(1), idempotencyKey: z.string().min(1) }),
  reply: z.object({ count: z.number().int() }),
  examples: { valid: [{ counter: 'c', idempotencyKey: 'k' }], invalid: [{ counter: '' }] },
});
const Decline = defineCommand({
  context,
  name: 'decline_test_request',
  request: z.object({}),
  reply: z.object({}),
  examples: { valid: [{}], invalid: [null] },
});
const Reach = defineCommand({
  context,
  name: 'reach_test_service',
  request: z.object({}),
  reply: z.object({}),
  examples: { valid: [{}], invalid: [null] },
});

defineEvent({
  context,
  type: 'MetricsTestTallied',
  schemaVersion: 1,
  data: z.object({ counter: z.string() }),
  examples: { valid: [{ counter: 'c' }], invalid: [{ counter: 1 }] },
});

const consumer = { holding: false, outOfReach: 0 };

@Controller()
class TallyConsumer {
  constructor(@Inject(CommandClient) private readonly client: CommandClient) {}

  @DurableConsumer({ name: 'metrics-test-tallies', source: 'workflow', type: 'MetricsTestTallied', backoffMs: () => 50 })
  async onTallied(): Promise<void> {
    if (consumer.holding) throw new RetryLater('held by the test', 50);
    // A command it asks, refused UNAVAILABLE (the service's database away) as many times as the test says.
    if (consumer.outOfReach > 0) await this.client.request(Reach, {});
  }
}

@Controller()
class TallyCommands {
  constructor(@Inject(EventStore) private readonly store: EventStore) {}

  @CommandHandler(Tally)
  async tally(request: z.infer<typeof Tally.request>) {
    const stream = `counter-${request.counter}`;
    const outcome = await this.store.executeInOneMessage(
      { metadata: { correlationId: 'c' }, idempotency: { scope: 'tally', key: request.idempotencyKey, request }, streams: [stream] },
      async (work) => {
        const history = await work.readStream(stream);
        await work.append(stream, history.length, [{ type: 'MetricsTestTallied', data: { counter: request.counter } }]);
        return { count: history.length + 1 };
      },
    );
    return outcome.result;
  }

  @CommandHandler(Reach)
  async reach(): Promise<object> {
    if (consumer.outOfReach === 0) return {};
    consumer.outOfReach--;
    throw new GantryError(ErrorCode.UNAVAILABLE, "the service's database is not reachable; send it again");
  }

  @CommandHandler(Decline)
  async decline(): Promise<never> {
    throw new GantryError(ErrorCode.INVALID_TRANSITION, 'not now');
  }
}

/** The samples of a metric family in Prometheus' text format: `name{labels} value` lines. */
function samples(text: string, name: string): Array<{ labels: Record<string, string>; value: number }> {
  const found: Array<{ labels: Record<string, string>; value: number }> = [];
  for (const line of text.split('\n')) {
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!match || match[1] !== name) continue;
    const labels = Object.fromEntries([...(match[2] ?? '').matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1]!, m[2]!]));
    found.push({ labels, value: Number(match[3]) });
  }
  return found;
}

const POOL_MAX = 5;

describe('GET /metrics', () => {
  let service: TestService;
  let client: CommandClient;
  let raw: NatsConnection;

  beforeAll(async () => {
    // A small pool, so that a test can hold all of it.
    service = await startTestService({ label: 'metrics', context, controllers: [TallyCommands, TallyConsumer], env: { GANTRY_DB_POOL_MAX: String(POOL_MAX) } });
    client = service.app.get(CommandClient);
    raw = await connectTestNats();
  });

  afterAll(async () => {
    await raw.close();
    await service.close();
  });

  const scrape = async () => {
    const response = await fetch(`${service.url}/metrics`);
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
    return response.text();
  };
  /** How many answers of `command` with `outcome` the histogram holds. */
  const answered = (text: string, command: string, outcome: string) =>
    samples(text, 'gantry_command_duration_seconds_count').find((s) => s.labels['command'] === command && s.labels['outcome'] === outcome)?.value ?? 0;
  const rawRequest = async (command: string, body: string) =>
    JSON.parse(new TextDecoder().decode((await raw.request(commandSubject(service.naming, context, command), body, { timeout: 5000 })).data));

  it('counts each command answered by its name and outcome: ok, a refusal by its code, a bad request as INVALID_COMMAND', async () => {
    const before = await scrape();
    await client.request(Tally, { counter: randomUUID(), idempotencyKey: randomUUID() });
    await client.request(Tally, { counter: randomUUID(), idempotencyKey: randomUUID() });
    await expect(client.request(Decline, {})).rejects.toMatchObject({ code: ErrorCode.INVALID_TRANSITION });
    expect(await rawRequest('tally_test_count', '{"counter": ')).toMatchObject({ ok: false, error: { code: 'INVALID_COMMAND' } });
    const after = await scrape();

    const tally = 'workflow.tally_test_count';
    expect(answered(after, tally, 'ok') - answered(before, tally, 'ok')).toBe(2);
    expect(answered(after, 'workflow.decline_test_request', 'INVALID_TRANSITION') - answered(before, 'workflow.decline_test_request', 'INVALID_TRANSITION')).toBe(1);
    expect(answered(after, tally, 'INVALID_COMMAND') - answered(before, tally, 'INVALID_COMMAND')).toBe(1);
    // The buckets hold the same answers: the last one (+Inf) counts every one of them.
    const infinite = samples(after, 'gantry_command_duration_seconds_bucket').find(
      (s) => s.labels['command'] === tally && s.labels['outcome'] === 'ok' && s.labels['le'] === '+Inf',
    );
    expect(infinite?.value).toBe(answered(after, tally, 'ok'));
    const seconds = samples(after, 'gantry_command_duration_seconds_sum').find((s) => s.labels['command'] === tally && s.labels['outcome'] === 'ok')!.value;
    expect(seconds).toBeGreaterThan(0);
    expect(seconds).toBeLessThan(60);
  });

  it('a command the service does not serve (asked over HTTP) is counted under one name, not under the name asked for', async () => {
    const asked = `no_such_command_${randomUUID().slice(0, 8)}`;
    const response = await fetch(`${service.url}/commands/${asked}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
    expect(response.status).toBe(404);
    expect(await response.json()).toMatchObject({ ok: false, error: { code: 'NOT_FOUND' } });
    const text = await scrape();
    expect(text).not.toContain(asked);
    expect(answered(text, '(unknown)', 'NOT_FOUND')).toBeGreaterThanOrEqual(1);
  });

  it('counts the write messages of commands and the commands they carried', async () => {
    const before = await scrape();
    const total = (text: string, name: string) => samples(text, name)[0]?.value ?? 0;
    // Eight commands at once: the event store writes them in one message or a few.
    await Promise.all(Array.from({ length: 8 }, () => client.request(Tally, { counter: randomUUID(), idempotencyKey: randomUUID() })));
    const after = await scrape();
    const messages = total(after, 'gantry_write_batch_commands_count') - total(before, 'gantry_write_batch_commands_count');
    const commands = total(after, 'gantry_write_batch_commands_sum') - total(before, 'gantry_write_batch_commands_sum');
    expect(commands).toBe(8);
    expect(messages).toBeGreaterThanOrEqual(1);
    expect(messages).toBeLessThanOrEqual(8);
    expect(total(after, 'gantry_write_batch_duration_seconds_count') - total(before, 'gantry_write_batch_duration_seconds_count')).toBe(messages);
  });

  /** The value of a gauge (of one consumer's series, when `consumerName` is given). */
  const gauge = (text: string, name: string, consumerName?: string) =>
    samples(text, name).find((s) => consumerName === undefined || s.labels['consumer'] === consumerName)?.value;

  it("reports the relay's backlog (committed events not yet published, the oldest one's age) and what it published", async () => {
    const relay = service.app.get(OutboxRelay);
    const published = async () => gauge(await scrape(), 'gantry_relay_published_events_total') ?? 0;
    await eventually(async () => gauge(await scrape(), 'gantry_relay_backlog_events') === 0, { what: 'the earlier events published' });
    const publishedBefore = await published();
    await relay.stop();
    try {
      await client.request(Tally, { counter: randomUUID(), idempotencyKey: randomUUID() });
      await client.request(Tally, { counter: randomUUID(), idempotencyKey: randomUUID() });
      await new Promise((r) => setTimeout(r, 20));
      const held = await scrape();
      expect(gauge(held, 'gantry_relay_backlog_events')).toBe(2);
      expect(gauge(held, 'gantry_relay_backlog_oldest_age_seconds')).toBeGreaterThan(0);
      expect(await published()).toBe(publishedBefore);
    } finally {
      relay.start();
    }
    await eventually(async () => gauge(await scrape(), 'gantry_relay_backlog_events') === 0, { what: 'the backlog published' });
    expect(gauge(await scrape(), 'gantry_relay_backlog_oldest_age_seconds')).toBe(0);
    expect(await published()).toBe(publishedBefore + 2);
  });

  it("reports each durable consumer: attached, the events waiting for it, the oldest one's age, and what it settled", async () => {
    const tallies = 'metrics-test-tallies';
    await eventually(async () => gauge(await scrape(), 'gantry_consumer_pending_events', tallies) === 0, { what: 'the consumer caught up' });
    let text = await scrape();
    expect(gauge(text, 'gantry_consumer_attached', tallies)).toBe(1);
    expect(gauge(text, 'gantry_consumer_lag_seconds', tallies)).toBe(0);

    const settled = (t: string, settlement: string) =>
      samples(t, 'gantry_consumer_settlements_total').find((x) => x.labels['consumer'] === tallies && x.labels['settlement'] === settlement)?.value ?? 0;
    const before = text;
    consumer.holding = true;
    try {
      await client.request(Tally, { counter: randomUUID(), idempotencyKey: randomUUID() });
      await eventually(async () => (gauge(await scrape(), 'gantry_consumer_lag_seconds', tallies) ?? 0) > 0.2, { what: 'the held event ageing' });
      text = await scrape();
      expect(gauge(text, 'gantry_consumer_pending_events', tallies)).toBe(1);
    } finally {
      consumer.holding = false;
    }
    await eventually(async () => gauge(await scrape(), 'gantry_consumer_pending_events', tallies) === 0, { what: 'the held event handled' });
    // Handed back while held (nak, at least once), then handled (ack).
    const after = await scrape();
    expect(settled(after, 'nak') - settled(before, 'nak')).toBeGreaterThanOrEqual(1);
    expect(settled(after, 'ack') - settled(before, 'ack')).toBe(1);
    expect(settled(after, 'term') - settled(before, 'term')).toBe(0);
  });

  it('counts the deliveries a consumer handed back for an outage, by what was out of reach; none of them dead-lettered', async () => {
    const tallies = 'metrics-test-tallies';
    const handedBack = (t: string) =>
      samples(t, 'gantry_consumer_outage_handbacks_total').find((x) => x.labels['consumer'] === tallies && x.labels['out_of_reach'] === 'service')?.value ?? 0;
    await eventually(async () => gauge(await scrape(), 'gantry_consumer_pending_events', tallies) === 0, { what: 'the consumer caught up' });
    const before = await scrape();
    // More than maxDeliver (10) tries: a failure of the handler would be dead-lettered.
    consumer.outOfReach = 12;
    await client.request(Tally, { counter: randomUUID(), idempotencyKey: randomUUID() });
    await eventually(async () => consumer.outOfReach === 0 && gauge(await scrape(), 'gantry_consumer_pending_events', tallies) === 0, { what: 'the event handled once the service answers' });
    const after = await scrape();
    expect(handedBack(after) - handedBack(before)).toBe(12);
    expect(gauge(after, 'gantry_dead_letters', tallies)).toBeUndefined();
  });

  it('reports the dead letters kept, by consumer, and the message given up (term)', async () => {
    const tallies = 'metrics-test-tallies';
    const before = await scrape();
    expect(gauge(before, 'gantry_dead_letters', tallies)).toBeUndefined();
    const given = (t: string) =>
      samples(t, 'gantry_consumer_settlements_total').find((x) => x.labels['consumer'] === tallies && x.labels['settlement'] === 'term')?.value ?? 0;
    // A message on the consumer's subject that is not an event at all: dead-lettered on arrival.
    await service.app.get(Bus).js.publish(eventSubject(service.naming, context, 'MetricsTestTallied', 'c-1'), '{ not JSON');
    await eventually(async () => gauge(await scrape(), 'gantry_dead_letters', tallies) === 1, { what: 'the dead letter counted' });
    expect(given(await scrape()) - given(before)).toBe(1);
  });

  it('reports the connection pool: its limit (GANTRY_DB_POOL_MAX), the connections busy, and the work waiting for one when all are', async () => {
    const { pool } = service.app.get(EventStore);
    const settled = async () => {
      const text = await scrape();
      return gauge(text, 'gantry_db_pool_waiting') === 0 && gauge(text, 'gantry_db_pool_busy') === 0;
    };
    await eventually(settled, { what: 'the pool idle' });
    expect(gauge(await scrape(), 'gantry_db_pool_max')).toBe(POOL_MAX);
    // Every connection the pool may open, held: a command now waits for one.
    const held = await Promise.all(Array.from({ length: POOL_MAX }, () => pool.connect()));
    let answered: Promise<unknown> | undefined;
    try {
      expect(pool.totalCount).toBe(POOL_MAX);
      answered = client.request(Tally, { counter: randomUUID(), idempotencyKey: randomUUID() });
      await eventually(async () => pool.waitingCount >= 1, { what: 'the command waiting for a connection' });
      // The scrape reads the pool as it begins; its own reads of the database (the relay's backlog,
      // the dead letters) wait behind the command, and the scrape answers without them.
      const text = await scrape();
      expect(gauge(text, 'gantry_db_pool_busy')).toBe(POOL_MAX);
      expect(gauge(text, 'gantry_db_pool_waiting')).toBeGreaterThanOrEqual(1);
      expect(gauge(text, 'gantry_db_pool_max')).toBe(POOL_MAX);
      expect(gauge(text, 'gantry_scrape_readings_left_out')).toBe(2);
      expect(gauge(text, 'gantry_relay_backlog_events')).toBeNaN();
      expect(gauge(text, 'gantry_consumer_attached', 'metrics-test-tallies')).toBe(1); // NATS answered
      // A second scrape while those reads still wait asks nothing more of the pool.
      const waiting = pool.waitingCount;
      expect(waiting).toBeGreaterThanOrEqual(3);
      expect(gauge(await scrape(), 'gantry_scrape_readings_left_out')).toBe(2);
      expect(pool.waitingCount).toBe(waiting);
    } finally {
      for (const client of held) client.release();
    }
    await expect(answered).resolves.toEqual({ count: 1 });
    await eventually(settled, { what: 'the pool idle again' });
    const after = await scrape();
    expect(gauge(after, 'gantry_scrape_readings_left_out')).toBe(0);
    expect(gauge(after, 'gantry_relay_backlog_events')).toBeGreaterThanOrEqual(0);
    expect(pool.totalCount).toBeLessThanOrEqual(POOL_MAX);
  });

  it('a service of the process that cannot answer (its database away) is left out of a scrape, which still answers', async () => {
    // The answering service's relay deletes the rows of what it published last with its next read.
    await eventually(async () => gauge(await scrape(), 'gantry_relay_backlog_events') === 0, { what: 'the earlier events published and their rows gone' });
    const away = new Error('connect ECONNREFUSED 127.0.0.1:5432');
    const stop = reportOnScrape({
      relayBacklog: () => Promise.reject(away),
      relayPublished: () => 0,
      databasePool: () => ({ max: 0, open: 0, idle: 0, waiting: 0 }),
      consumers: () => [{ name: 'metrics-test-away', lag: () => Promise.reject(away) }],
      deadLetters: () => Promise.reject(away),
    });
    try {
      const text = await scrape();
      // The figures summed over the services are those of the one that answered.
      expect(gauge(text, 'gantry_relay_backlog_events')).toBe(0);
      expect(gauge(text, 'gantry_consumer_attached', 'metrics-test-tallies')).toBe(1);
      expect(gauge(text, 'gantry_consumer_attached', 'metrics-test-away')).toBeUndefined();
      expect(gauge(text, 'gantry_scrape_readings_left_out')).toBe(3);
    } finally {
      stop();
    }
  });

  it("has the process's own metrics (CPU, memory, event-loop lag, garbage collection)", async () => {
    const text = await scrape();
    for (const name of ['process_cpu_seconds_total', 'process_resident_memory_bytes', 'nodejs_eventloop_lag_p99_seconds', 'nodejs_heap_size_used_bytes']) {
      expect(samples(text, name).length).toBeGreaterThan(0);
    }
    expect(text).toContain('# TYPE nodejs_gc_duration_seconds histogram');
  });

  it('needs no token, like /health, while the commands over HTTP do', async () => {
    const secured = await startTestService({ label: 'metrics-token', context, controllers: [TallyCommands], env: { GANTRY_HTTP_TOKEN: 'metrics-test-token-0123456789' } });
    try {
      expect((await fetch(`${secured.url}/metrics`)).status).toBe(200);
      expect((await fetch(`${secured.url}/commands/decline_test_request`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' })).status).toBe(401);
    } finally {
      await secured.close();
    }
  });
});
