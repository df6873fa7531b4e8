import 'reflect-metadata';
import { randomUUID } from 'node:crypto';
import {
  Catch,
  Controller,
  Inject,
  Injectable,
  UseFilters,
  UseGuards,
  UseInterceptors,
  type CallHandler,
  type CanActivate,
  type ExecutionContext,
  type NestInterceptor,
  type OnApplicationBootstrap,
  type PipeTransform,
  type RpcExceptionFilter,
} from '@nestjs/common';
import { Payload } from '@nestjs/microservices';
import { map, throwError, type Observable } from 'rxjs';
import { z } from 'zod';
import { defineCommand, defineEvent, ErrorCode, eventSubject, GantryError, type EventEnvelope } from '@gantry/contracts';
import { EventStore } from '@gantry/eventstore';
import { Bus, CommandClient, RetryLater } from '@gantry/messaging';
import { eventually } from '@gantry/testing';
import { startTestService, type TestService } from '../../testing.js';
import { CommandCallContext, ConsumerContext } from './contexts.js';
import { CommandHandler, DurableConsumer } from './decorators.js';
import { GantryTransport } from './gantry-transport.js';

const Note = defineCommand({
  context: 'workflow',
  name: 'transport_test_note',
  request: z.object({ text: z.string().min(1) }),
  reply: z.object({ position: z.number().int(), correlationId: z.string(), via: z.string() }),
  examples: { valid: [{ text: 'x' }], invalid: [{ text: '' }] },
});
const Refuse = defineCommand({
  context: 'workflow',
  name: 'transport_test_refuse',
  request: z.object({}),
  reply: z.object({}),
  examples: { valid: [{}], invalid: [1] },
});
const Shout = defineCommand({
  context: 'workflow',
  name: 'transport_test_shout',
  request: z.object({ text: z.string() }),
  reply: z.object({ text: z.string(), guarded: z.boolean() }),
  examples: { valid: [{ text: 'x' }], invalid: [{}] },
});
const Wrong = defineCommand({
  context: 'jobs',
  name: 'transport_test_wrong_context',
  request: z.object({}),
  reply: z.object({}),
  examples: { valid: [{}], invalid: [1] },
});
defineEvent({
  context: 'workflow',
  type: 'TransportTestNoted',
  schemaVersion: 1,
  data: z.object({ text: z.string() }),
  examples: { valid: [{ text: 'x' }], invalid: [{ text: 1 }] },
});

@Controller()
class NoteCommands {
  constructor(@Inject(EventStore) private readonly store: EventStore) {}

  @CommandHandler(Note)
  async note(request: { text: string }, context: CommandCallContext) {
    const [event] = await this.store.append(`note-${randomUUID()}`, 0, [{ type: 'TransportTestNoted', data: request }], { correlationId: context.correlationId });
    return { position: event!.position, correlationId: context.correlationId, via: context.via };
  }

  @CommandHandler(Refuse)
  async refuse(): Promise<never> {
    throw new GantryError(ErrorCode.PRECONDITION_FAILED, 'refused on purpose');
  }
}

// Nest's own pipeline around a command: a pipe, a guard, an interceptor and an exception filter.
class UpperCasePipe implements PipeTransform {
  transform(value: { text: string }) {
    return { ...value, text: value.text.toUpperCase() };
  }
}
class RefuseSecretsGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    return !String(context.switchToRpc().getData<{ text: string }>().text).toLowerCase().includes('secret');
  }
}
class MarkGuardedInterceptor implements NestInterceptor {
  intercept(_: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(map((reply: object) => ({ ...reply, guarded: true })));
  }
}
@Catch()
class ForbiddenAsRefusal implements RpcExceptionFilter {
  catch(error: Error): Observable<never> {
    return throwError(() => new GantryError(ErrorCode.PRECONDITION_FAILED, `refused by the guard: ${error.message}`));
  }
}
@Controller()
@UseFilters(ForbiddenAsRefusal)
class ShoutCommands {
  // Declared parameters are kept as written (here a pipe on the payload only).
  @CommandHandler(Shout)
  @UseGuards(RefuseSecretsGuard)
  @UseInterceptors(MarkGuardedInterceptor)
  shout(@Payload(UpperCasePipe) request: { text: string }) {
    return { text: request.text, guarded: false };
  }
}

const held = { value: true };
@Controller()
class NotedConsumer {
  @DurableConsumer({ name: 'transport-test-noted', source: 'workflow', type: 'TransportTestNoted', backoffMs: () => 50 })
  async onNoted(event: EventEnvelope<{ text: string }>, { sql }: ConsumerContext) {
    if (event.data.text === 'hold' && held.value) throw new RetryLater('held by the test', 50);
    await sql.query('CREATE TABLE IF NOT EXISTS noted (event_id text PRIMARY KEY, text text NOT NULL)');
    await sql.query('INSERT INTO noted (event_id, text) VALUES ($1, $2)', [event.eventId, event.data.text]);
  }
}

describe('the Gantry transport', () => {
  let service: TestService;

  beforeAll(async () => {
    service = await startTestService({ label: 'transport', controllers: [NoteCommands, ShoutCommands, NotedConsumer] });
  });

  afterAll(async () => {
    await service.close();
  });

  const post = (name: string, body: unknown, headers: Record<string, string> = {}) =>
    fetch(`${service.url}/commands/${name}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });

  it('serves every @CommandHandler over NATS with the caller’s correlation id', async () => {
    const client = service.app.get(CommandClient);
    const reply = await client.request(Note, { text: 'hello' }, { correlationId: 'corr-nats' });
    expect(reply).toMatchObject({ position: expect.any(Number), correlationId: 'corr-nats', via: `${service.naming.subjectRoot}.workflow.cmd.transport_test_note` });
    await expect(client.request(Refuse, {})).rejects.toMatchObject({ code: ErrorCode.PRECONDITION_FAILED, message: 'refused on purpose' });
  });

  it('serves the same handlers over HTTP, with status codes that match the error', async () => {
    const ok = await post('transport_test_note', { text: 'via http' }, { 'x-correlation-id': 'corr-http' });
    expect(ok.status).toBe(200);
    expect(await ok.json()).toMatchObject({ ok: true, result: { correlationId: 'corr-http', via: 'http' } });
    const invalid = await post('transport_test_note', { text: '' });
    expect(invalid.status).toBe(400);
    expect(await invalid.json()).toMatchObject({ ok: false, error: { code: 'INVALID_COMMAND' } });
    expect((await post('transport_test_refuse', {})).status).toBe(412);
    expect((await post('no_such_command', {})).status).toBe(404);
  });

  it('a request that NATS carries is taken over HTTP as well: a few hundred KiB is run, not refused as too large', async () => {
    const text = 'x'.repeat(300 * 1024);
    const client = service.app.get(CommandClient);
    await expect(client.request(Shout, { text })).resolves.toEqual({ text: text.toUpperCase(), guarded: true });
    const overHttp = await post('transport_test_shout', { text });
    expect(overHttp.status).toBe(200);
    expect(await overHttp.json()).toEqual({ ok: true, result: { text: text.toUpperCase(), guarded: true } });
  });

  it('runs Nest’s pipes, guards, interceptors and exception filters around a command', async () => {
    const client = service.app.get(CommandClient);
    await expect(client.request(Shout, { text: 'quiet' })).resolves.toEqual({ text: 'QUIET', guarded: true });
    await expect(client.request(Shout, { text: 'a secret' })).rejects.toMatchObject({
      code: ErrorCode.PRECONDITION_FAILED,
      message: expect.stringMatching(/^refused by the guard/),
    });
  });

  it('a @DurableConsumer handles each event once in the inbox transaction, and RetryLater brings it back', async () => {
    const bus = service.app.get(Bus);
    const client = service.app.get(CommandClient);
    await client.request(Note, { text: 'hold' });
    await client.request(Note, { text: 'first' });
    const store = service.app.get(EventStore);
    await eventually(async () => (await store.pool.query(`SELECT 1 FROM noted WHERE text = 'first'`).catch(() => ({ rowCount: 0 }))).rowCount === 1, {
      what: 'the second event handled while the first is held',
    });
    held.value = false;
    await eventually(async () => (await store.pool.query(`SELECT 1 FROM noted WHERE text = 'hold'`)).rowCount === 1, { what: 'the held event handled' });
    // The same event once more (another message id): the inbox drops it.
    const { rows } = await store.pool.query(`SELECT event_id FROM noted WHERE text = 'first'`);
    const again: EventEnvelope = {
      eventId: rows[0].event_id, type: 'TransportTestNoted', schemaVersion: 1, streamId: 'note-x', streamVersion: 1, position: 1,
      occurredAt: new Date().toISOString(), correlationId: 'c', causationId: null, idempotencyKey: null, actor: null, data: { text: 'first' },
    };
    await bus.js.publish(eventSubject(service.naming, 'workflow', 'TransportTestNoted', 'note-x'), JSON.stringify(again));
    await eventually(async () => {
      const info = await bus.jsm.consumers.info(`${service.naming.streamPrefix}WORKFLOW`, 'transport-test-noted');
      return info.num_pending === 0 && info.num_ack_pending === 0;
    }, { what: 'the copy acknowledged' });
    expect((await store.pool.query(`SELECT count(*)::int AS n FROM noted WHERE text = 'first'`)).rows[0].n).toBe(1);
  });
});

describe('the Gantry transport refuses to start', () => {
  async function startFails(controllers: Array<new (...args: never[]) => unknown>, providers: Array<new (...args: never[]) => unknown> = []) {
    return startTestService({ label: 'transport_refused', controllers, providers }).then(
      async (service) => {
        await service.close();
        return null;
      },
      (error: unknown) => String(error),
    );
  }

  it('with two handlers for one command', async () => {
    @Controller()
    class Again {
      @CommandHandler(Refuse)
      refuseAgain() {
        return {};
      }
    }
    expect(await startFails([NoteCommands, Again])).toMatch(/two handlers for command workflow\.transport_test_refuse/);
  });

  it('with two durable consumers of one name', async () => {
    @Controller()
    class SameName {
      @DurableConsumer({ name: 'transport-test-noted', source: 'jobs' })
      async other() {}
    }
    expect(await startFails([NotedConsumer, SameName])).toMatch(/two handlers for durable consumer transport-test-noted/);
  });

  it('with a consumer of one type that names a shared durable, or a shared durable named like another consumer', async () => {
    @Controller()
    class OneTypeShared {
      @DurableConsumer({ name: 'transport-test-one-type', source: 'workflow', type: 'TransportTestNoted', durable: 'transport-test-shared' })
      async one() {}
    }
    expect(await startFails([OneTypeShared])).toMatch(/reads only TransportTestNoted: it cannot share durable transport-test-shared/);
    @Controller()
    class SharesAnothersOwn {
      @DurableConsumer({ name: 'transport-test-member', source: 'workflow', durable: 'transport-test-noted' })
      async member() {}
    }
    expect(await startFails([NotedConsumer, SharesAnothersOwn])).toMatch(/shares durable transport-test-noted, which is another consumer's own/);
    @Controller()
    class Member {
      @DurableConsumer({ name: 'transport-test-member', source: 'workflow', durable: 'transport-test-shared' })
      async member() {}
    }
    @Controller()
    class NamedLikeTheShared {
      @DurableConsumer({ name: 'transport-test-shared', source: 'workflow' })
      async own() {}
    }
    expect(await startFails([Member, NamedLikeTheShared])).toMatch(/two handlers for durable consumer transport-test-shared/);
  });

  it('with a command of another context', async () => {
    @Controller()
    class Foreign {
      @CommandHandler(Wrong)
      wrong() {
        return {};
      }
    }
    expect(await startFails([Foreign])).toMatch(/does not belong to the workflow service/);
  });

  it('with a handler on a provider instead of a controller', async () => {
    @Injectable()
    class NotAController {
      @CommandHandler(Refuse)
      refuse() {
        return {};
      }
    }
    expect(await startFails([], [NotAController])).toMatch(/NotAController\.refuse: command and consumer handlers belong on controllers/);
  });
});

describe('work the Gantry transport runs before it serves (beforeServing)', () => {
  const order: string[] = [];
  const failing = { value: false };

  // Asks for its work in its start-up hook; another provider's start-up hook (registered after it) is slow.
  @Injectable()
  class AsksFirst implements OnApplicationBootstrap {
    constructor(@Inject(GantryTransport) private readonly transport: GantryTransport) {}

    async onApplicationBootstrap(): Promise<void> {
      order.push('asks');
      this.transport.beforeServing(async () => {
        order.push(`runs ${this.transport.isListening ? 'while serving' : 'before serving'}`);
        if (failing.value) throw new Error('the leases could not be resumed');
      });
    }
  }
  @Injectable()
  class SlowToStart implements OnApplicationBootstrap {
    async onApplicationBootstrap(): Promise<void> {
      await new Promise((resolve) => setTimeout(resolve, 200));
      order.push('slow start-up hook done');
    }
  }

  it('runs after every start-up hook and before the service serves; it is done once the start is', async () => {
    order.length = 0;
    failing.value = false;
    const service = await startTestService({ label: 'transport_before_serving', controllers: [NoteCommands], providers: [AsksFirst, SlowToStart] });
    try {
      // Nest runs the start-up hooks in an order of its own: the work comes after both, whichever ran first.
      expect(order).toHaveLength(3);
      expect([...order.slice(0, 2)].sort()).toEqual(['asks', 'slow start-up hook done']);
      expect(order[2]).toBe('runs before serving');
      expect(await service.app.get(CommandClient).request(Refuse, {}).catch((error: GantryError) => error.code)).toBe(ErrorCode.PRECONDITION_FAILED);
    } finally {
      await service.close();
    }
  });

  it('fails the start when it fails', async () => {
    failing.value = true;
    const started = await startTestService({ label: 'transport_before_serving', controllers: [NoteCommands], providers: [AsksFirst] }).then(
      async (service) => {
        await service.close();
        return 'started';
      },
      (error: unknown) => String(error),
    );
    expect(started).toMatch(/the leases could not be resumed/);
  });
});
