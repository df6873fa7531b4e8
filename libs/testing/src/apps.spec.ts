import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { freePort } from './apps.js';

const ephemeralFrom = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);

const listenOn = (port: number) =>
  new Promise<Server>((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve(server));
  });

describe('freePort', () => {
  it('picks free ports of its own band, below the range the kernel hands out, one after another', async () => {
    const ports = [];
    for (let i = 0; i < 20; i++) ports.push(await freePort());
    expect(new Set(ports).size).toBe(20);
    for (const port of ports) expect(port).toBeLessThan(ephemeralFrom);
    // Each can be listened on.
    for (const server of await Promise.all(ports.map(listenOn))) await new Promise((resolve) => server.close(resolve));
  });

  it('passes over a port that is taken', async () => {
    // Whichever port comes next, a listener already holds it: taken ports are skipped.
    const probe = await freePort();
    const taken = await listenOn(probe + 1);
    try {
      const next = await freePort();
      expect(next).not.toBe(probe + 1);
      expect(next).not.toBe(probe);
    } finally {
      await new Promise((resolve) => taken.close(resolve));
    }
  });
});
