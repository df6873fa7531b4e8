import { defineSettings, setting } from '@gantry/service-runtime';

/** The workflow engine's own settings (docs/configuration.md, docs/workflow-engine.md "Settings"); the shared ones are the runtime's. */
export interface EngineSettings {
  /** false: the engine-owned actions have no executor (AC-A6(b), AC-D2). */
  officeActions: boolean;
  runQueuePatienceMs: number;
  commandTimeoutMs: number;
}

export const ENGINE_SETTINGS = Symbol('gantry:workflow-engine-settings');

export const engineSettings = defineSettings({
  name: 'workflow',
  token: ENGINE_SETTINGS,
  variables: {
    GANTRY_WORKFLOW_OFFICE_ACTIONS: setting.flag(true),
    GANTRY_WORKFLOW_RUN_QUEUE_PATIENCE_MS: setting.wholeNumber({ min: 0, max: 2 ** 31 - 1, default: 30_000 }),
    GANTRY_WORKFLOW_COMMAND_TIMEOUT_MS: setting.wholeNumber({ min: 100, max: 2 ** 31 - 1, default: 10_000 }),
  },
  build: (v): EngineSettings => ({
    officeActions: v.GANTRY_WORKFLOW_OFFICE_ACTIONS,
    runQueuePatienceMs: v.GANTRY_WORKFLOW_RUN_QUEUE_PATIENCE_MS,
    commandTimeoutMs: v.GANTRY_WORKFLOW_COMMAND_TIMEOUT_MS,
  }),
});
