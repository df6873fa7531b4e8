import { streamName, type Context } from '@gantry/contracts';
import { deleteStreams, testNatsUrl, testNaming, uniqueName } from '@gantry/testing';
import { Bus } from './bus.js';
import { DurableReader } from './durable-reader.js';

const context: Context = 'prs';
const logger = { log: () => undefined, warn: () => undefined, error: () => undefined };
const NANOS_PER_MS = 1_000_000;

describe('a durable reader\'s consumer', () => {
  const naming = testNaming(uniqueName('reader'));
  let bus: Bus;

  beforeAll(async () => {
    bus = await Bus.connect({ servers: testNatsUrl, naming, name: 'durable-reader-test' });
    await bus.ensureEventStream(context);
  });

  afterAll(async () => {
    await deleteStreams(bus.nc, naming.streamPrefix);
    await bus.close();
  });

  const reader = (name: string, ackWaitMs: number) => new DurableReader({ name, bus, source: context, ackWaitMs, logger }, async () => undefined);

  it('that exists with settings an earlier version gave it is updated to the code\'s settings, not created again', async () => {
    const stream = streamName(naming, context);
    const name = 'upgraded';
    await reader(name, 30_000).ensureConsumer();
    const { created } = await bus.jsm.consumers.info(stream, name);
    // Settings an earlier version of the service created the durable with.
    await bus.jsm.consumers.update(stream, name, { ack_wait: 5_000 * NANOS_PER_MS, max_deliver: 5, max_ack_pending: 10 });

    await reader(name, 45_000).ensureConsumer();

    const { config } = await bus.jsm.consumers.info(stream, name);
    expect(config.ack_wait).toBe(45_000 * NANOS_PER_MS);
    expect(config.max_deliver).toBe(-1);
    expect(config.max_ack_pending).toBe(1000);
    expect((await bus.jsm.consumers.info(stream, name)).created).toEqual(created);
  });

  it('whose settings are the code\'s is left as it is', async () => {
    const stream = streamName(naming, context);
    const name = 'unchanged';
    await reader(name, 20_000).ensureConsumer();
    const before = await bus.jsm.consumers.info(stream, name);
    await reader(name, 20_000).ensureConsumer();
    const after = await bus.jsm.consumers.info(stream, name);
    expect(after.config).toEqual(before.config);
    expect(after.created).toEqual(before.created);
  });
});
