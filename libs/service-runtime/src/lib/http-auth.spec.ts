import 'reflect-metadata';
import { Controller, type ExecutionContext } from '@nestjs/common';
import { z } from 'zod';
import { defineCommand, type Context } from '@gantry/contracts';
import { startTestService, type TestService } from '../testing.js';
import type { ServiceConfig } from './config.js';
import { HttpTokenGuard } from './http-auth.js';
import { CommandHandler } from './transport/decorators.js';

const context: Context = 'workflow';
let ran = 0;
const Echo = defineCommand({
  context,
  name: 'echo_auth_test',
  request: z.object({ text: z.string() }),
  reply: z.object({ text: z.string() }),
  examples: { valid: [{ text: 'a' }], invalid: [{}] },
});

@Controller()
class EchoCommands {
  @CommandHandler(Echo)
  echo(request: z.infer<typeof Echo.request>) {
    ran++;
    return { text: request.text };
  }
}

const TOKEN = 'http-auth-spec-token-0123456789';

describe('the routes behind the bearer token', () => {
  let service: TestService;

  beforeAll(async () => {
    service = await startTestService({ label: 'http-auth', context, controllers: [EchoCommands], env: { GANTRY_HTTP_TOKEN: TOKEN } });
  });

  afterAll(async () => {
    await service?.close();
  });

  const post = async (body: string, token: string | null) => {
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (token !== null) headers['authorization'] = `Bearer ${token}`;
    const response = await fetch(`${service.url}/commands/echo_auth_test`, { method: 'POST', headers, body });
    return { status: response.status, body: (await response.json()) as { ok: boolean; error?: { code: string; message: string } } };
  };

  it('answer a caller without the token 401 whatever its body: not JSON, or larger than a command may be, is not read first', async () => {
    expect((await post('{"text": ', null)).status).toBe(401);
    expect((await post('{"text": ', 'wrong-token-0123456789')).status).toBe(401);
    expect((await post(JSON.stringify({ text: 'x'.repeat(2 * 1024 * 1024) }), null)).status).toBe(401);
    // express routes paths whatever their case: so is the refusal
    const shouted = await fetch(`${service.url}/COMMANDS/echo_auth_test`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"text": ' });
    expect(shouted.status).toBe(401);
    expect(ran).toBe(0);
  });

  it('refuse in the shape of every refusal, with the code of an unauthenticated caller', async () => {
    const refusal = { ok: false, error: { code: 'UNAUTHENTICATED', message: expect.stringMatching(/bearer token/) } };
    expect(await post('{"text": "hi"}', null)).toEqual({ status: 401, body: refusal });
    expect(await post('{"text": "hi"}', 'wrong-token-0123456789')).toEqual({ status: 401, body: refusal });
    // The guard, where the routes are, refuses what the early refusal would miss, alike.
    const guard = new HttpTokenGuard({ httpToken: TOKEN } as ServiceConfig);
    const request = { switchToHttp: () => ({ getRequest: () => ({ headers: { authorization: 'Bearer nope' } }) }) } as unknown as ExecutionContext;
    expect(() => guard.canActivate(request)).toThrow(expect.objectContaining({ code: 'UNAUTHENTICATED' }) as unknown as Error);
    expect(ran).toBe(0);
  });

  it('answer the holder of the token as before', async () => {
    expect(await post(JSON.stringify({ text: 'hi' }), TOKEN)).toEqual({ status: 200, body: { ok: true, result: { text: 'hi' } } });
    expect((await post('{"text": ', TOKEN)).status).toBe(400);
    expect((await post(JSON.stringify({ text: 'x'.repeat(2 * 1024 * 1024) }), TOKEN)).status).toBe(413);
  });
});
