import 'reflect-metadata';
import { randomUUID } from 'node:crypto';
import { Controller } from '@nestjs/common';
import { z } from 'zod';
import { defineEvent, eventSubject, streamName } from '@gantry/contracts';
import { EventStore } from '@gantry/eventstore';
import { Bus, RetryLater } from '@gantry/messaging';
import { eventually, startScratchNats } from '@gantry/testing';
import { startTestService } from '../testing.js';
import { DurableConsumer } from './transport/decorators.js';

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

const holding = { value: false };

@Controller()
class HeldConsumer {
  // Refuses to move while told to hold.
  @DurableConsumer({ name: 'readiness-test-held', source: 'workflow', type: 'ReadinessTestHeld' })
  async onHeld(): Promise<void> {
    if (holding.value) throw new RetryLater('told to hold', 100);
  }
}

async function startService(label: string, env: Record<string, string>, withConsumer = false) {
  const service = await startTestService({ label, env, controllers: withConsumer ? [HeldConsumer] : [] });
  const ready = async (): Promise<{ status: number; body: ReadyBody }> => {
    const response = await fetch(`${service.url}/ready`);
    return { status: response.status, body: (await response.json()) as ReadyBody };
  };
  return { ...service, ready };
}

describe('readiness', () => {
  it('NATS stopped: /ready answers 503 naming the nats check within seconds, and 200 again once NATS is back', async () => {
    const nats = await startScratchNats();
    const service = await startService('ready_nats', { GANTRY_NATS_URL: nats.url });
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
      await service.close();
      await nats.remove();
    }
  });

  it('the relay is judged by the age of its oldest unpublished event: a young backlog is ready, an old one is not', async () => {
    const service = await startService('ready_relay', { GANTRY_READY_RELAY_MAX_AGE_MS: '60000' });
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
      await service.close();
    }
  });

  it('a durable consumer stuck on an event makes /ready 503 once its lag passes the limit, and 200 when it moves again', async () => {
    holding.value = true;
    const service = await startService('ready_lag', { GANTRY_READY_CONSUMER_MAX_LAG_MS: '1500' }, true);
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
      await service.close();
    }
  });
});
