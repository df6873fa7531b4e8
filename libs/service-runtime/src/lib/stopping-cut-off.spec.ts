import 'reflect-metadata';
import { Controller } from '@nestjs/common';
import { z } from 'zod';
import { defineCommand, type Context, type EventEnvelope } from '@gantry/contracts';
import { startCuttableProxy, testNatsUrl, type CuttableProxy } from '@gantry/testing';
import { startTestService, type TestService } from '../testing.js';
import { CommandHandler, DurableConsumer } from './transport/decorators.js';

const context: Context = 'workflow';
const Ping = defineCommand({
  context,
  name: 'ping_while_cut_off',
  request: z.object({}),
  reply: z.object({}),
  examples: { valid: [{}], invalid: [null] },
});

@Controller()
class Served {
  @CommandHandler(Ping)
  ping() {
    return {};
  }

  @DurableConsumer({ name: 'stopping-cut-off-test', source: 'workflow' })
  async onEvent(_event: EventEnvelope): Promise<void> {}
}

describe('a service whose NATS stops answering', () => {
  let proxy: CuttableProxy;
  let service: TestService | null = null;

  beforeAll(async () => {
    proxy = await startCuttableProxy(testNatsUrl);
  });

  afterAll(async () => {
    proxy.restore();
    await service?.close().catch(() => undefined);
    await proxy.close();
  });

  it('still stops well within the shutdown grace (30 s by default): its subscriptions and its connection are let go, not drained for ever', async () => {
    service = await startTestService({ label: 'stopping-cut-off', context, controllers: [Served], env: { GANTRY_NATS_URL: proxy.url } });
    proxy.blackhole();
    const started = Date.now();
    const stopped = await Promise.race([
      service.app.close().then(() => 'stopped'),
      new Promise<string>((resolve) => setTimeout(() => resolve('still stopping'), 25_000)),
    ]);
    expect(stopped).toBe('stopped');
    // each wait for NATS to confirm a drain is bounded (DRAIN_BOUND_MS): the subscriptions', then the connection's
    expect(Date.now() - started).toBeLessThan(25_000);
  }, 90_000);
});
