import pg from 'pg';
import { z } from 'zod';
import { commandSubject, defineCommand, ErrorCode, GantryError } from '@gantry/contracts';
import { deleteStreams, startCuttableProxy, testDatabaseUrl, testNatsUrl, testNaming, uniqueName } from '@gantry/testing';
import { Bus } from './bus.js';
import { CommandClient } from './commands.js';
import { outOfReachOf } from './out-of-reach.js';

const Ask = defineCommand({
  context: 'prs',
  name: 'out_of_reach_test_ask',
  request: z.object({}),
  reply: z.object({}),
  examples: { valid: [{}], invalid: [null] },
});

/** What a promise was rejected with. */
async function rejectionOf(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error('it did not fail');
}

describe('what a handler met out of reach', () => {
  const naming = testNaming(uniqueName('out_of_reach'));
  let bus: Bus;
  let client: CommandClient;

  beforeAll(async () => {
    bus = await Bus.connect({ servers: testNatsUrl, naming, name: 'out-of-reach-test' });
    client = new CommandClient(bus);
  });

  afterAll(async () => {
    await deleteStreams(bus.nc, naming.streamPrefix);
    await bus.close();
  });

  /** Answers the command with `answer` (never, when null) while `work` runs. */
  async function served(answer: object | null, work: () => Promise<void>): Promise<void> {
    const service = bus.nc.subscribe(commandSubject(naming, 'prs', Ask.name), {
      callback: (_error, msg) => {
        if (answer) msg.respond(JSON.stringify(answer));
      },
    });
    try {
      await work();
    } finally {
      service.unsubscribe();
    }
  }

  it('a database whose connections are lost, met on a client of the handler’s own', async () => {
    const proxy = await startCuttableProxy(testDatabaseUrl);
    proxy.cut();
    const client = new pg.Client({ connectionString: proxy.url, connectionTimeoutMillis: 1000 });
    try {
      const error = await rejectionOf(client.connect());
      expect(outOfReachOf(error)).toBe('database');
      expect(outOfReachOf(new Error('the task could not be loaded', { cause: error }))).toBe('database');
    } finally {
      await client.end().catch(() => undefined);
      await proxy.close();
    }
  });

  it('another service: a bare NATS request nobody serves; a command nobody serves, not answered in time, or refused UNAVAILABLE', async () => {
    expect(outOfReachOf(await rejectionOf(bus.nc.request(uniqueName('nobody.serves'), '', { timeout: 1000 })))).toBe('service');
    expect(outOfReachOf(await rejectionOf(client.request(Ask, {}, { timeoutMs: 1000 })))).toBe('service');
    await served(null, async () => {
      expect(outOfReachOf(await rejectionOf(client.request(Ask, {}, { timeoutMs: 200 })))).toBe('service');
    });
    await served({ ok: false, error: { code: ErrorCode.UNAVAILABLE, message: "the service's database is not reachable; send it again" } }, async () => {
      expect(outOfReachOf(await rejectionOf(client.request(Ask, {}, { timeoutMs: 1000 })))).toBe('service');
    });
  });

  it("not an outage: a bug, another service's refusal other than UNAVAILABLE or TIMEOUT, those codes on an error of the process's own, an SQL error the database answered", async () => {
    expect(outOfReachOf(new TypeError("Cannot read properties of undefined (reading 'id')"))).toBeNull();
    await served({ ok: false, error: { code: ErrorCode.NOT_FOUND, message: 'no such job' } }, async () => {
      expect(outOfReachOf(await rejectionOf(client.request(Ask, {}, { timeoutMs: 1000 })))).toBeNull();
    });
    expect(outOfReachOf(new GantryError(ErrorCode.UNAVAILABLE, 'git is not installed on this host, or could not be started'))).toBeNull();
    expect(outOfReachOf(new GantryError(ErrorCode.TIMEOUT, 'git fetch did not finish within 1000 ms'))).toBeNull();
    const db = new pg.Client({ connectionString: testDatabaseUrl });
    await db.connect();
    try {
      expect(outOfReachOf(await rejectionOf(db.query('SELECT 1/0')))).toBeNull();
    } finally {
      await db.end();
    }
  });
});
