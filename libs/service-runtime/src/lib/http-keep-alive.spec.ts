import { request, Agent } from 'node:http';
import type { Socket } from 'node:net';
import { startTestService, type TestService } from '../testing.js';

/** GET /health on `agent`'s kept-alive connection: the status and the socket it went on. */
function health(url: string, agent: Agent): Promise<{ status: number; socket: Socket }> {
  return new Promise((resolve, reject) => {
    const req = request(`${url}/health`, { agent }, (res) => {
      res.resume();
      res.on('end', () => resolve({ status: res.statusCode ?? 0, socket: req.socket as Socket }));
    });
    req.on('error', reject);
    req.end();
  });
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A service keeps an idle kept-alive connection open GANTRY_HTTP_KEEP_ALIVE_MS (docs/configuration.md,
 * "Who can reach a service"), not Node's 5 s: a load balancer that keeps its idle connections for
 * 60 s would otherwise send requests on connections the service closed.
 */
describe('kept-alive HTTP connections', () => {
  let service: TestService | undefined;
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  afterEach(async () => {
    agent.destroy();
    await service?.close();
    service = undefined;
  });

  it('an idle connection is still open after 6 s by default, and the next request goes on it', async () => {
    service = await startTestService({ label: 'keep_alive' });
    const first = await health(service.url, agent);
    expect(first.status).toBe(200);
    let closed = false;
    first.socket.once('close', () => (closed = true));
    await sleep(6_000);
    expect(closed).toBe(false);
    const second = await health(service.url, agent);
    expect(second.status).toBe(200);
    expect(second.socket).toBe(first.socket);
  }, 30_000);

  it('GANTRY_HTTP_KEEP_ALIVE_MS sets it: 1 s, and the service closes the idle connection', async () => {
    service = await startTestService({ label: 'keep_alive_short', env: { GANTRY_HTTP_KEEP_ALIVE_MS: '1000' } });
    const first = await health(service.url, agent);
    expect(first.status).toBe(200);
    const closed = new Promise<boolean>((resolve) => {
      first.socket.once('close', () => resolve(true));
      setTimeout(() => resolve(false), 4_000).unref();
    });
    expect(await closed).toBe(true);
  }, 30_000);
});
