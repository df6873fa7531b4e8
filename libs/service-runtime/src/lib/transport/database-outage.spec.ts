import 'reflect-metadata';
import { randomUUID } from 'node:crypto';
import { Controller, Inject } from '@nestjs/common';
import pg from 'pg';
import { z } from 'zod';
import { defineCommand, ErrorCode } from '@gantry/contracts';
import { EventStore } from '@gantry/eventstore';
import { CommandClient } from '@gantry/messaging';
import { eventually, startCuttableProxy, testDatabaseUrl, type CuttableProxy } from '@gantry/testing';
import { startTestService, type TestService } from '../../testing.js';
import { CommandHandler } from './decorators.js';

const Record = defineCommand({
  context: 'workflow',
  name: 'record_outage_test_entry',
  request: z.object({ entry: z.string().min(1), idempotencyKey: z.string().min(1) }),
  reply: z.object({ entries: z.number().int() }),
  examples: { valid: [{ entry: 'a', idempotencyKey: 'k' }], invalid: [{ entry: '' }] },
});

@Controller()
class EntryCommands {
  constructor(@Inject(EventStore) private readonly store: EventStore) {}

  @CommandHandler(Record)
  async record(request: z.infer<typeof Record.request>) {
    const outcome = await this.store.execute(
      { metadata: { correlationId: 'c' }, idempotency: { scope: 'record', key: request.idempotencyKey, request } },
      async (uow) => {
        const history = await uow.readStream(`entries-${request.entry}`);
        await uow.append(`entries-${request.entry}`, history.length, [{ type: 'EntryRecorded', data: {} }]);
        return { entries: history.length + 1 };
      },
    );
    return outcome.result;
  }
}

/**
 * A command whose service cannot reach PostgreSQL (a restart, a failover, a cut connection) is not
 * the command's fault: it is answered UNAVAILABLE, which callers send again under the same key, and
 * not INTERNAL, which they take as a final answer (docs/architecture.md, "Commands").
 */
describe('commands while the service cannot reach PostgreSQL', () => {
  let proxy: CuttableProxy;
  let service: TestService;
  let client: CommandClient;
  let direct: pg.Pool;

  beforeAll(async () => {
    proxy = await startCuttableProxy(testDatabaseUrl);
    service = await startTestService({ label: 'db_outage', env: { GANTRY_DATABASE_URL: proxy.url }, controllers: [EntryCommands] });
    client = service.app.get(CommandClient);
    direct = new pg.Pool({ connectionString: testDatabaseUrl, options: `-c search_path=${service.schema}`, max: 2 });
  });

  afterEach(() => proxy.restore());

  afterAll(async () => {
    proxy.restore();
    await direct.end();
    await service.close();
    await proxy.close();
  });

  const eventsOf = async (entry: string) => Number((await direct.query('SELECT count(*) FROM events WHERE stream_id = $1', [`entries-${entry}`])).rows[0].count);

  it('is answered UNAVAILABLE over NATS and 503 UNAVAILABLE over HTTP, and writes nothing', async () => {
    const entry = randomUUID();
    await client.request(Record, { entry, idempotencyKey: randomUUID() });
    proxy.cut();
    await expect(client.request(Record, { entry, idempotencyKey: randomUUID() })).rejects.toMatchObject({ code: ErrorCode.UNAVAILABLE });
    const http = await fetch(`${service.url}/commands/record_outage_test_entry`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ entry, idempotencyKey: randomUUID() }),
    });
    expect(http.status).toBe(503);
    expect(await http.json()).toMatchObject({ ok: false, error: { code: ErrorCode.UNAVAILABLE } });
    proxy.restore();
    expect(await eventsOf(entry)).toBe(1);
  });

  it('a caller that retries gets its command done once when PostgreSQL is back, not a final INTERNAL', async () => {
    const entry = randomUUID();
    proxy.cut();
    const sent = client.request(Record, { entry, idempotencyKey: randomUUID() }, { timeoutMs: 2000, retryUntil: Date.now() + 30_000 });
    await new Promise((resolve) => setTimeout(resolve, 1500));
    proxy.restore();
    await expect(sent).resolves.toEqual({ entries: 1 });
    await eventually(async () => (await eventsOf(entry)) === 1, { what: 'one event' });
  });
});
