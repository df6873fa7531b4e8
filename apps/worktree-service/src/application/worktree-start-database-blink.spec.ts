import { mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { eventually, startCuttableProxy, testDatabaseUrl, type CuttableProxy } from '@gantry/testing';
import { createWorld, type TestWorld } from './testing/world.js';
import { startServiceProcess, type ServiceProcess } from './testing/process.js';

/*
 * A start whose database goes away for a moment (every connection reset, new ones refused: a
 * PostgreSQL restarting) while it reconciles the log with the disk (docs/worktrees.md, "Restart and
 * recovery"): the reconciliation is done again in the process once the database is back, rather than
 * failing the start. The service's PostgreSQL is behind a proxy the test cuts; the reconciliation is
 * held between its plan and its actions (an orphan directory to move aside under its key's lock)
 * while the proxy is cut. Starts apps/worktree-service/dist: build first.
 */
describe("a start whose database blinks during its reconciliation (real git, PostgreSQL and NATS)", () => {
  let proxy: CuttableProxy;
  let world: TestWorld;
  let service: ServiceProcess | undefined;

  beforeAll(async () => {
    proxy = await startCuttableProxy(testDatabaseUrl);
    world = await createWorld('wt-startblink');
  });
  afterAll(async () => {
    try {
      await service?.kill('SIGKILL');
    } finally {
      await world?.close();
      await proxy?.close();
    }
  });

  it('does its reconciliation again once the database is back, and becomes ready', async () => {
    // A directory no clone knows, with something in it (an empty one is removed, not moved).
    const orphan = path.join(world.root, 'worktrees', 'orphan-blink');
    mkdirSync(orphan, { recursive: true });
    writeFileSync(path.join(orphan, 'left-behind.txt'), 'not committed\n');
    service = await startServiceProcess(
      world,
      { GANTRY_DATABASE_URL: proxy.url, GANTRY_DB_CONNECT_TIMEOUT_MS: '1000', GANTRY_TEST_HOLD_AT: 'worktree-reconcile:planned' },
      false,
    );
    const running = service;
    await eventually(() => running.output().includes('"testHold":"worktree-reconcile:planned"'), { what: 'the reconciliation planned', timeoutMs: 30_000 });
    // Its plan made, the database goes: the orphan's key lock cannot be taken.
    proxy.cut();
    running.process.kill('SIGUSR2');
    const exited = () => running.process.exitCode !== null || running.process.signalCode !== null;
    await eventually(() => exited() || running.output().includes("the start's reconciliation lost the database"), { what: 'the reconciliation failed', timeoutMs: 30_000 });
    expect(exited()).toBe(false);

    proxy.restore();
    await eventually(async () => (await fetch(`${running.url}/ready`).catch(() => null))?.ok === true, { what: 'the service ready', timeoutMs: 30_000 });
    expect(running.output()).not.toContain('service failed to start');
    // The orphan moved aside, once.
    expect(readdirSync(path.join(world.root, 'quarantine'))).toEqual([expect.stringMatching(/^orphan-blink-/)]);
    expect(readdirSync(path.join(world.root, 'worktrees'))).not.toContain('orphan-blink');
  }, 90_000);
});
