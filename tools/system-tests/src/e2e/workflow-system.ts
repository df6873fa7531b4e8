import type { z } from 'zod';
import type { CommandContract, ReplyOf } from '@gantry/contracts';
import { dropSchema, startApp, type RunningApp } from '@gantry/testing';
import { E2eSystem } from './e2e-system.js';

/**
 * The runner end to end with the workflow engine: the job service, the worktree service, the
 * workflow engine and runners driving the stand-in agent, each its own process, on the real NATS
 * and PostgreSQL and a local origin.
 */
export class WorkflowSystem extends E2eSystem {
  engine!: RunningApp;

  override async start(): Promise<void> {
    await super.start();
    this.engine = await startApp('workflow-engine', { schema: `${this.name}_wf`, naming: this.naming, env: { LOG_LEVEL: 'log' } });
  }

  request<C extends CommandContract>(contract: C, payload: z.input<C['request']>): Promise<ReplyOf<C>> {
    return this.client.request(contract, payload);
  }

  override async stop(): Promise<void> {
    await this.engine?.kill('SIGKILL');
    await super.stop();
    await dropSchema(`${this.name}_wf`);
  }
}
