import 'reflect-metadata';
import { Inject, Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { INestApplication } from '@nestjs/common';
import { z } from 'zod';
import { defineCommand, ErrorCode, GantryError } from '@gantry/contracts';
import { EventStore } from '@gantry/eventstore';
import { CommandClient } from '@gantry/messaging';
import { testNaming, uniqueName, removeTestNamespace } from '@gantry/testing';
import { CommandHandler } from './command-handler.decorator.js';
import { GantryRuntimeModule } from './runtime.module.js';

const Note = defineCommand({
  context: 'workflow',
  name: 'runtime_test_note',
  request: z.object({ text: z.string().min(1) }),
  reply: z.object({ position: z.number().int() }),
  examples: { valid: [{ text: 'x' }], invalid: [{ text: '' }] },
});
const Refuse = defineCommand({
  context: 'workflow',
  name: 'runtime_test_refuse',
  request: z.object({}),
  reply: z.object({}),
  examples: { valid: [{}], invalid: [1] },
});

@Injectable()
class NoteHandlers {
  constructor(@Inject(EventStore) private readonly store: EventStore) {}

  @CommandHandler(Note)
  async note(request: { text: string }) {
    const [event] = await this.store.append('note-1', 'any', [{ type: 'Noted', data: request }], { correlationId: 'c' });
    return { position: event!.position };
  }

  @CommandHandler(Refuse)
  async refuse(): Promise<never> {
    throw new GantryError(ErrorCode.PRECONDITION_FAILED, 'refused on purpose');
  }
}

describe('GantryRuntimeModule', () => {
  const name = uniqueName('runtime');
  const naming = testNaming(name);
  let app: INestApplication;
  let url: string;

  beforeAll(async () => {
    process.env.GANTRY_DB_SCHEMA = name;
    process.env.GANTRY_SUBJECT_ROOT = naming.subjectRoot;
    process.env.GANTRY_STREAM_PREFIX = naming.streamPrefix;
    @Module({ imports: [GantryRuntimeModule.forRoot({ service: 'runtime-test', context: 'workflow', defaultPort: 0 })], providers: [NoteHandlers] })
    class TestModule {}
    app = await NestFactory.create(TestModule, { logger: false, forceCloseConnections: true });
    await app.listen(0, '127.0.0.1');
    url = await app.getUrl();
    url = url.replace('[::1]', '127.0.0.1');
  });

  afterAll(async () => {
    await app.close();
    await removeTestNamespace(naming, name);
    delete process.env.GANTRY_DB_SCHEMA;
    delete process.env.GANTRY_SUBJECT_ROOT;
    delete process.env.GANTRY_STREAM_PREFIX;
  });

  it('serves every @CommandHandler method over NATS', async () => {
    const client = app.get(CommandClient);
    const reply = await client.request(Note, { text: 'hello' });
    expect(reply.position).toBeGreaterThan(0);
    await expect(client.request(Refuse, {})).rejects.toMatchObject({ code: ErrorCode.PRECONDITION_FAILED });
  });

  it('serves the same commands over HTTP with status codes that match the error', async () => {
    const ok = await fetch(`${url}/commands/runtime_test_note`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ text: 'via http' }) });
    expect(ok.status).toBe(200);
    expect(await ok.json()).toMatchObject({ ok: true, result: { position: expect.any(Number) } });
    const invalid = await fetch(`${url}/commands/runtime_test_note`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ text: '' }) });
    expect(invalid.status).toBe(400);
    expect(await invalid.json()).toMatchObject({ ok: false, error: { code: 'INVALID_COMMAND' } });
    const refused = await fetch(`${url}/commands/runtime_test_refuse`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
    expect(refused.status).toBe(412);
    const unknown = await fetch(`${url}/commands/no_such_command`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
    expect(unknown.status).toBe(404);
  });

  it('reports ready with its checks, and the relay publishes what the handlers appended', async () => {
    const ready = await fetch(`${url}/ready`);
    expect(ready.status).toBe(200);
    const body = (await ready.json()) as { checks: Record<string, { ok: boolean }> };
    expect(Object.keys(body.checks).sort()).toEqual(['consumers', 'database', 'nats', 'relay']);
  });
});
