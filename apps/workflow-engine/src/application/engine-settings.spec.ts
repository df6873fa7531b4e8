import { ENQUEUE_IDEMPOTENCY_WINDOW_MS } from '@gantry/contracts';
import { SettingsError, settingsOf } from '@gantry/service-runtime';
import { engineSettings } from './engine-settings.js';

const read = (env: Record<string, string>) => settingsOf(engineSettings, env);

describe('the engine settings', () => {
  it("refuses a run queue patience whose last try could reach the job service after the enqueue's 24 h window: a lost reply would have its run queued twice (docs/architecture.md, \"How late a command comes again\")", () => {
    const hour = 60 * 60 * 1000;
    expect(ENQUEUE_IDEMPOTENCY_WINDOW_MS).toBe(24 * hour);
    const tooLong = { GANTRY_WORKFLOW_RUN_QUEUE_PATIENCE_MS: String(24 * hour), GANTRY_WORKFLOW_COMMAND_TIMEOUT_MS: '10000' };
    expect(() => read(tooLong)).toThrow(SettingsError);
    expect(() => read(tooLong)).toThrow(/GANTRY_WORKFLOW_RUN_QUEUE_PATIENCE_MS.*GANTRY_WORKFLOW_COMMAND_TIMEOUT_MS.*24 hours/);
    // the last try's own wait counts too
    expect(() => read({ GANTRY_WORKFLOW_RUN_QUEUE_PATIENCE_MS: String(24 * hour - 5_000), GANTRY_WORKFLOW_COMMAND_TIMEOUT_MS: '10000' })).toThrow(SettingsError);
    expect(read({ GANTRY_WORKFLOW_RUN_QUEUE_PATIENCE_MS: String(23 * hour), GANTRY_WORKFLOW_COMMAND_TIMEOUT_MS: '10000' }).runQueuePatienceMs).toBe(23 * hour);
    expect(read({}).runQueuePatienceMs).toBe(30_000);
  });
});
