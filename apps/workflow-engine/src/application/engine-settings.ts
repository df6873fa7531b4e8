import { z } from 'zod';

/** The workflow engine's own settings (docs/workflow-engine.md, "Settings"), read once from the environment. */
const SettingsSchema = z.object({
  GANTRY_WORKFLOW_OFFICE_ACTIONS: z.enum(['on', 'off']).default('on'),
  GANTRY_WORKFLOW_RUN_QUEUE_PATIENCE_MS: z.coerce.number().int().min(0).default(30_000),
  GANTRY_WORKFLOW_COMMAND_TIMEOUT_MS: z.coerce.number().int().min(100).default(10_000),
});

export interface EngineSettings {
  /** false: the engine-owned actions have no executor (AC-A6(b), AC-D2). */
  officeActions: boolean;
  runQueuePatienceMs: number;
  commandTimeoutMs: number;
}

export const ENGINE_SETTINGS = Symbol('gantry:workflow-engine-settings');

export function loadEngineSettings(env: NodeJS.ProcessEnv = process.env): EngineSettings {
  const parsed = SettingsSchema.safeParse(Object.fromEntries(Object.entries(env).filter(([, v]) => v !== '')));
  if (!parsed.success) throw new Error(`invalid workflow-engine settings: ${z.prettifyError(parsed.error)}`);
  return {
    officeActions: parsed.data.GANTRY_WORKFLOW_OFFICE_ACTIONS === 'on',
    runQueuePatienceMs: parsed.data.GANTRY_WORKFLOW_RUN_QUEUE_PATIENCE_MS,
    commandTimeoutMs: parsed.data.GANTRY_WORKFLOW_COMMAND_TIMEOUT_MS,
  };
}
