import { ENQUEUE_IDEMPOTENCY_WINDOW_MS } from '@gantry/contracts';
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
  build: (v, refuse): EngineSettings => {
    // An enqueue is sent again under its key for the patience, and its last try waits up to a command
    // timeout: it must reach the job service while the first try's receipt still answers, or a first
    // try whose reply was lost would have its run queued a second time.
    const lastTryMs = v.GANTRY_WORKFLOW_RUN_QUEUE_PATIENCE_MS + v.GANTRY_WORKFLOW_COMMAND_TIMEOUT_MS;
    if (lastTryMs >= ENQUEUE_IDEMPOTENCY_WINDOW_MS) {
      refuse(
        'GANTRY_WORKFLOW_RUN_QUEUE_PATIENCE_MS',
        `plus GANTRY_WORKFLOW_COMMAND_TIMEOUT_MS (${v.GANTRY_WORKFLOW_RUN_QUEUE_PATIENCE_MS} + ${v.GANTRY_WORKFLOW_COMMAND_TIMEOUT_MS} ms) must be less than the run queue's 24 hours, ` +
          'the window in which it answers a repeat of an enqueue with the job it made: a later try of an enqueue whose reply was lost would queue the run again',
      );
    }
    return {
      officeActions: v.GANTRY_WORKFLOW_OFFICE_ACTIONS,
      runQueuePatienceMs: v.GANTRY_WORKFLOW_RUN_QUEUE_PATIENCE_MS,
      commandTimeoutMs: v.GANTRY_WORKFLOW_COMMAND_TIMEOUT_MS,
    };
  },
});
