import { networkInterfaces } from 'node:os';
import { contractRegistry } from '@gantry/contracts';
import { removeTestNamespace, startApp, startAppExpectingExit, startupRefusal, testNaming, uniqueName, type RunningApp } from '@gantry/testing';

/**
 * Who can reach a service over HTTP (docs/configuration.md, "Who can reach a service"): loopback
 * only by default; bound elsewhere, only with a bearer token, which the commands ask for.
 */

/** An address of this host that is not loopback, when it has one. */
const external = Object.values(networkInterfaces())
  .flat()
  .find((address) => address && address.family === 'IPv4' && !address.internal)?.address;

const TOKEN = 'exposure-spec-token-0123456789abcdef';
const command = contractRegistry.commands().find((c) => c.context === 'jobs')!;

async function post(url: string, headers: Record<string, string> = {}) {
  const response = await fetch(`${url}/commands/${command.name}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(command.examples.invalid[0] ?? {}),
  });
  return { status: response.status, body: (await response.json()) as { ok?: boolean; error?: { code: string } } };
}

describe('HTTP exposure', () => {
  const name = uniqueName('exposure');
  const naming = testNaming(name);

  afterAll(async () => {
    await removeTestNamespace(naming, name);
  });

  describe('by default', () => {
    let app: RunningApp;
    beforeAll(async () => {
      // Blank is unset: the default bind address applies.
      app = await startApp('job-service', { schema: name, naming, env: { GANTRY_HTTP_HOST: '' } });
    });
    afterAll(async () => {
      await app?.kill('SIGKILL');
    });

    it('answers on the loopback interface, commands without a token', async () => {
      expect((await fetch(`${app.url}/health`)).status).toBe(200);
      expect((await post(app.url)).body.error?.code).toBe('INVALID_COMMAND');
    });

    (external ? it : it.skip)('is not reachable on any other address of the host', async () => {
      const refused = await fetch(`http://${external}:${app.port}/health`).then(
        () => 'answered',
        (error: Error & { cause?: { code?: string } }) => error.cause?.code ?? String(error),
      );
      expect(refused).toBe('ECONNREFUSED');
    });
  });

  it('bound to every interface without GANTRY_HTTP_TOKEN, the service refuses to start, naming it', async () => {
    const result = await startAppExpectingExit('job-service', { schema: name, naming, env: { GANTRY_HTTP_HOST: '0.0.0.0' } });
    expect(result.started).toBe(false);
    expect(result.code).toBe(1);
    expect(startupRefusal(result.output)).toContain('GANTRY_HTTP_TOKEN is required when GANTRY_HTTP_HOST is not a loopback address');
  });

  it('a token shorter than 16 characters is refused at start, without printing it', async () => {
    const result = await startAppExpectingExit('job-service', { schema: name, naming, env: { GANTRY_HTTP_HOST: '0.0.0.0', GANTRY_HTTP_TOKEN: 'short-secret' } });
    expect(result.started).toBe(false);
    expect(startupRefusal(result.output)).toContain('GANTRY_HTTP_TOKEN must be at least 16 characters');
    expect(result.output).not.toContain('short-secret');
  });

  it('the runner, which serves no commands, may be bound elsewhere without a token', async () => {
    const runner = await startApp('runner', { schema: name, naming, env: { GANTRY_HTTP_HOST: '0.0.0.0' } });
    try {
      expect((await fetch(`${runner.url}/health`)).status).toBe(200);
      // having no command transport is no error of its start
      expect(runner.output().split('\n').filter((line) => line.includes('"level":"error"'))).toEqual([]);
    } finally {
      await runner.kill('SIGKILL');
    }
  });

  describe('bound to every interface with a token', () => {
    let app: RunningApp;
    beforeAll(async () => {
      app = await startApp('job-service', { schema: name, naming, env: { GANTRY_HTTP_HOST: '0.0.0.0', GANTRY_HTTP_TOKEN: TOKEN } });
    });
    afterAll(async () => {
      await app?.kill('SIGKILL');
    });

    it('/health and /ready stay open', async () => {
      const base = external ? `http://${external}:${app.port}` : app.url;
      expect((await fetch(`${base}/health`)).status).toBe(200);
      expect((await fetch(`${base}/ready`)).status).toBe(200);
    });

    it('a command without the token, with another token or another scheme gets 401 and is not run', async () => {
      const wrongSameLength = TOKEN.replace(/.$/, (c) => (c === 'f' ? 'e' : 'f'));
      const attempts: Array<Record<string, string>> = [{}, { authorization: `Bearer ${wrongSameLength}` }, { authorization: 'Bearer x' }, { authorization: `Basic ${TOKEN}` }, { authorization: TOKEN }];
      for (const headers of attempts) {
        const reply = await post(app.url, headers);
        expect({ headers, status: reply.status, body: reply.body }).toEqual({ headers, status: 401, body: { ok: false, error: { code: 'UNAUTHENTICATED', message: expect.any(String) } } });
      }
      expect((await fetch(`${app.url}/commands`)).status).toBe(401);
    });

    it('a command with the token reaches its handler', async () => {
      const reply = await post(app.url, { authorization: `Bearer ${TOKEN}` });
      expect({ status: reply.status, code: reply.body.error?.code }).toEqual({ status: 400, code: 'INVALID_COMMAND' });
      const list = await fetch(`${app.url}/commands`, { headers: { authorization: `bearer ${TOKEN}` } });
      expect(list.status).toBe(200);
    });
  });
});
