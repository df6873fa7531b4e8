import 'reflect-metadata';
import { Controller } from '@nestjs/common';
import { z } from 'zod';
import { defineCommand, ErrorCode } from '@gantry/contracts';
import { eventually } from '@gantry/testing';
import { startTestService } from '../../testing.js';
import { CommandHandler } from './decorators.js';

const Slow = defineCommand({
  context: 'workflow',
  name: 'slow_shutdown_test',
  request: z.object({ n: z.number().int() }),
  reply: z.object({ n: z.number().int() }),
  examples: { valid: [{ n: 1 }], invalid: [{ n: 'x' }] },
});

const started: number[] = [];
let release: () => void = () => undefined;
let gate = Promise.resolve();

@Controller()
class SlowCommands {
  @CommandHandler(Slow)
  async slow(request: { n: number }) {
    started.push(request.n);
    await gate;
    return { n: request.n };
  }
}

const post = (url: string, n: number) =>
  fetch(`${url}/commands/slow_shutdown_test`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ n }) }).then(
    async (response) => ({ status: response.status, body: (await response.json()) as unknown }),
    (error: unknown) => ({ failed: String((error as { cause?: unknown }).cause ?? error) }),
  );

/**
 * SIGTERM (the application's close) while `POST /commands` requests are in flight: each is answered
 * before the HTTP server drops its connections, and one that arrives while the service stops is
 * refused UNAVAILABLE without running (docs/operations.md, "Stopping").
 */
describe('HTTP commands when the service stops', () => {
  it('a command in flight is answered with its result; one that arrives meanwhile is refused 503 UNAVAILABLE and not run', async () => {
    gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    const service = await startTestService({ label: 'http_shutdown', controllers: [SlowCommands] });
    try {
      const inFlight = post(service.url, 1);
      await eventually(async () => started.includes(1), { what: 'the first command running' });
      const closing = service.close();
      // close() waits for the command in flight; the HTTP server still listens meanwhile.
      await new Promise((resolve) => setTimeout(resolve, 200));
      const late = await post(service.url, 2);
      release();
      await closing;
      expect(await inFlight).toEqual({ status: 200, body: { ok: true, result: { n: 1 } } });
      expect(late).toMatchObject({ status: 503, body: { ok: false, error: { code: ErrorCode.UNAVAILABLE } } });
      expect(started).toEqual([1]);
    } finally {
      release();
    }
  }, 60_000);
});
