import { startApp, type RunningApp } from '@gantry/testing';
import type { TestWorld } from './world.js';

export type ServiceProcess = RunningApp;

/** The compiled service as its own process (so a test can SIGKILL it) on the world's schema, naming and root; with `waitReady`, resolves once /ready is 200. */
export async function startServiceProcess(world: TestWorld, env: Record<string, string> = {}, waitReady = true, options: { cwd?: string } = {}): Promise<ServiceProcess> {
  return startApp('worktree-service', { schema: world.name, naming: world.naming, env: world.env(env), waitReady, cwd: options.cwd });
}
