import 'reflect-metadata';
import { randomUUID } from 'node:crypto';
import { Controller, Inject, Injectable, type OnApplicationBootstrap } from '@nestjs/common';
import { z } from 'zod';
import { defineEvent, eventSubject, streamName } from '@gantry/contracts';
import { EventStore } from '@gantry/eventstore';
import { Bus, RetryLater } from '@gantry/messaging';
import { eventually, startScratchNats } from '@gantry/testing';
import { startTestService } from '../testing.js';
import type { HealthBody } from '../testing/probe-process.js';
import { Liveness, Readiness } from './readiness.js';
import { DurableConsumer } from './transport/decorators.js';

defineEvent({
  context: 'workflow',
  type: 'ReadinessTestHeld',
  schemaVersion: 1,
  data: z.object({ hold: z.boolean() }),
  examples: { valid: [{ hold: true }], invalid: [{ hold: 'x' }] },
});

const holding = { value: false };

@Controller()
class HeldConsumer {
  // Refuses to move while told to hold.
  @DurableConsumer({ name: 'readiness-test-held', source: 'workflow', type: 'ReadinessTestHeld' })
  async onHeld(): Promise<void> {
    if (holding.value) throw new RetryLater('told to hold', 100);
  }
}

const troubles = { failing: false };

/** A part of the service with checks of its own: one that throws while told to, one that never answers. */
@Injectable()
class TroubledPart implements OnApplicationBootstrap {
  constructor(
    @Inject(Readiness) private readonly readiness: Readiness,
    @Inject(Liveness) readonly liveness: Liveness,
  ) {}

  onApplicationBootstrap(): void {
    this.readiness.register('troubled', () => {
      if (troubles.failing) throw new Error('the troubled part lost its footing');
      return { ok: true, detail: { status: 'fine' } };
    });
    this.readiness.register('silent', () => (troubles.failing ? new Promise<never>(() => undefined) : { ok: true }));
  }
}

async function startService(label: string, env: Record<string, string>, withConsumer = false, providers: Array<typeof TroubledPart> = []) {
  const service = await startTestService({ label, env, controllers: withConsumer ? [HeldConsumer] : [], providers });
  const ready = async (): Promise<{ status: number; body: HealthBody }> => {
    const response = await fetch(`${service.url}/ready`);
    return { status: response.status, body: (await response.json()) as HealthBody };
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
      expect(down.body.status).toBe('error');
      expect(Object.keys(down.body.error)).toEqual(['nats']);
      expect(down.body.error.nats).toMatchObject({ status: 'down' });
      expect(down.body.details.database).toMatchObject({ status: 'up' });
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
      expect(young.body.details.relay).toMatchObject({ status: 'up', pending: 1 });
      expect(young.status).toBe(200);
      // The same backlog an hour old.
      await store.pool.query(`UPDATE events SET recorded_at = now() - interval '1 hour'`);
      const old = await service.ready();
      expect(old.status).toBe(503);
      expect(old.body.error.relay).toMatchObject({ status: 'down', pending: 1 });
      expect(old.body.error.relay!.oldestAgeMs).toBeGreaterThanOrEqual(3_600_000);
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
      expect(Object.keys(stuck.body.error)).toEqual(['consumers']);
      expect(stuck.body.error.consumers).toMatchObject({ status: 'down', consumers: { 'readiness-test-held': { attached: true } } });
      expect(stuck.body.details.relay).toMatchObject({ status: 'up' });
      holding.value = false;
      await eventually(async () => (await service.ready()).status === 200, { what: 'ready once the consumer caught up' });
    } finally {
      await service.close();
    }
  });

  it("a part's own check that throws or does not answer makes /ready 503 naming it with the reason; /health names a part that declared itself unhealthy", async () => {
    troubles.failing = false;
    const service = await startService('ready_parts', {}, false, [TroubledPart]);
    try {
      await eventually(async () => (await service.ready()).status === 200, { what: 'ready' });
      // A detail with a `status` of its own stays beside terminus's status.
      expect((await service.ready()).body.details.troubled).toEqual({ status: 'up', detail: { status: 'fine' } });
      troubles.failing = true;
      const down = await service.ready();
      expect(down.status).toBe(503);
      expect(down.body.error).toEqual({
        troubled: { status: 'down', message: 'the troubled part lost its footing' },
        silent: { status: 'down', message: 'check timed out' },
      });
      expect(down.body.details.database).toMatchObject({ status: 'up' });
      troubles.failing = false;
      expect((await service.ready()).status).toBe(200);

      const liveness = service.app.get(Liveness);
      expect((await fetch(`${service.url}/health`)).status).toBe(200);
      liveness.markUnhealthy('engine', 'the engine stalled');
      const health = await fetch(`${service.url}/health`);
      expect(health.status).toBe(503);
      expect(await health.json()).toMatchObject({ status: 'error', error: { engine: { status: 'down', message: 'the engine stalled' } } });
      liveness.markHealthy('engine');
      expect((await fetch(`${service.url}/health`)).status).toBe(200);
    } finally {
      troubles.failing = false;
      await service.close();
    }
  });
});
