import 'reflect-metadata';
import { randomUUID } from 'node:crypto';
import { Inject, Injectable, Module, type OnModuleInit } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { INestApplication } from '@nestjs/common';
import { z } from 'zod';
import { defineEvent, eventSubject, streamName } from '@gantry/contracts';
import { EventStore } from '@gantry/eventstore';
import { Bus, RetryLater } from '@gantry/messaging';
import { eventually, removeTestNamespace, startScratchNats, testNaming, uniqueName, type ScratchServer } from '@gantry/testing';
import { Consumers } from './consumers.js';
import { GantryRuntimeModule } from './runtime.module.js';

defineEvent({
  context: 'workflow',
  type: 'ReadinessTestHeld',
  schemaVersion: 1,
  data: z.object({ hold: z.boolean() }),
  examples: { valid: [{ hold: true }], invalid: [{ hold: 'x' }] },
});

interface ReadyBody {
  status: string;
  checks: Record<string, { ok: boolean; detail?: Record<string, unknown> }>;
}

/** A service of the workflow context with one durable consumer that refuses to move while told to hold. */
async function startService(name: string, env: Record<string, string>, consumer?: { holding: { value: boolean } }) {
  const naming = testNaming(name);
  const saved = { ...process.env };
  Object.assign(process.env, { GANTRY_DB_SCHEMA: name, GANTRY_SUBJECT_ROOT: naming.subjectRoot, GANTRY_STREAM_PREFIX: naming.streamPrefix, ...env });
  @Injectable()
  class HeldConsumer implements OnModuleInit {
    constructor(@Inject(Consumers) private readonly consumers: Consumers) {}
    onModuleInit(): void {
      if (!consumer) return;
      this.consumers.add({
        name: 'readiness-test-held',
        source: 'workflow',
        handle: async () => {
          if (consumer.holding.value) throw new RetryLater('told to hold', 100);
        },
      });
    }
  }
  @Module({ imports: [GantryRuntimeModule.forRoot({ service: 'readiness-test', context: 'workflow', defaultPort: 0 })], providers: [HeldConsumer] })
  class TestModule {}
  let app: INestApplication;
  try {
    app = await NestFactory.create(TestModule, { logger: false, forceCloseConnections: true });
    await app.listen(0, '127.0.0.1');
  } finally {
    process.env = saved;
  }
  const url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
  const ready = async (): Promise<{ status: number; body: ReadyBody }> => {
    const response = await fetch(`${url}/ready`);
    return { status: response.status, body: (await response.json()) as ReadyBody };
  };
  return { app, ready, naming };
}

describe('readiness', () => {
  it('NATS stopped: /ready answers 503 naming the nats check within seconds, and 200 again once NATS is back', async () => {
    const nats = await startScratchNats();
    const name = uniqueName('ready_nats');
    const service = await startService(name, { GANTRY_NATS_URL: nats.url });
    try {
      await eventually(async () => (await service.ready()).status === 200, { what: 'ready with NATS up' });
      await nats.stop();
      const down = await eventually(async () => {
        const answer = await service.ready();
        return answer.status === 503 ? answer : null;
      }, { what: '/ready 503 with NATS stopped' });
      expect(down.body.checks.nats).toMatchObject({ ok: false });
      expect(down.body.checks.database).toMatchObject({ ok: true });
      await nats.start();
      await eventually(async () => (await service.ready()).status === 200, { what: 'ready again with NATS back', timeoutMs: 30_000 });
    } finally {
      await nats.start();
      await service.app.close();
      await removeTestNamespace(service.naming, name).catch(() => undefined);
      await nats.remove();
    }
  });

  it('the relay is judged by the age of its oldest unpublished event: a young backlog is ready, an old one is not', async () => {
    const name = uniqueName('ready_relay');
    const service = await startService(name, { GANTRY_READY_RELAY_MAX_AGE_MS: '60000' });
    const bus = service.app.get(Bus);
    const store = service.app.get(EventStore);
    try {
      await eventually(async () => (await service.ready()).status === 200, { what: 'ready' });
      // Without its stream every publish fails, so what is appended waits in the outbox.
      await bus.jsm.streams.delete(streamName(service.naming, 'workflow'));
      await store.append(`wf-${randomUUID()}`, 0, [{ type: 'Noted', data: {} }], { correlationId: 't' });
      const young = await service.ready();
      expect(young.body.checks.relay!.detail).toMatchObject({ pending: 1 });
      expect(young.status).toBe(200);
      // The same backlog an hour old.
      await store.pool.query(`UPDATE events SET recorded_at = now() - interval '1 hour'`);
      const old = await service.ready();
      expect(old.status).toBe(503);
      expect(old.body.checks.relay).toMatchObject({ ok: false, detail: { pending: 1 } });
      expect(old.body.checks.relay!.detail!.oldestAgeMs).toBeGreaterThanOrEqual(3_600_000);
      await bus.ensureEventStream('workflow');
      await eventually(async () => (await service.ready()).status === 200, { what: 'ready once the backlog is published' });
    } finally {
      await service.app.close();
      await removeTestNamespace(service.naming, name);
    }
  });

  it('a durable consumer stuck on an event makes /ready 503 once its lag passes the limit, and 200 when it moves again', async () => {
    const name = uniqueName('ready_lag');
    const holding = { value: true };
    const service = await startService(name, { GANTRY_READY_CONSUMER_MAX_LAG_MS: '1500' }, { holding });
    const bus = service.app.get(Bus);
    try {
      await eventually(async () => (await service.ready()).status === 200, { what: 'ready' });
      const envelope = {
        eventId: randomUUID(), type: 'ReadinessTestHeld', schemaVersion: 1, streamId: 'wf-1', streamVersion: 1, position: 1,
        occurredAt: new Date().toISOString(), correlationId: 'c', causationId: null, idempotencyKey: null, actor: null, data: { hold: true },
      };
      await bus.js.publish(eventSubject(service.naming, 'workflow', 'ReadinessTestHeld', 'wf-1'), JSON.stringify(envelope));
      const stuck = await eventually(async () => {
        const answer = await service.ready();
        return answer.status === 503 ? answer : null;
      }, { what: '/ready 503 while the consumer is stuck' });
      expect(stuck.body.checks.consumers).toMatchObject({ ok: false });
      expect(stuck.body.checks.relay).toMatchObject({ ok: true });
      holding.value = false;
      await eventually(async () => (await service.ready()).status === 200, { what: 'ready once the consumer caught up' });
    } finally {
      await service.app.close();
      await removeTestNamespace(service.naming, name);
    }
  });
});
