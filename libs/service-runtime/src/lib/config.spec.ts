import { serviceSettings, shutdownGraceSetting, type ServiceConfig } from './config.js';
import { defineSettings, readSettings, SettingsError, settingsOf } from './settings.js';

const runtime = serviceSettings({ service: 'config-test', schema: 'jobs', port: 3101, commandsOverHttp: true });
const read = (env: Record<string, string>): ServiceConfig => settingsOf(runtime, env);

describe("the runtime's settings refuse what a timer or JetStream cannot hold, naming the variable", () => {
  it('GANTRY_PRUNE_INTERVAL_MS of 30 days is refused: a timer holds at most 2^31 - 1 ms and would prune every millisecond', () => {
    expect(() => read({ GANTRY_PRUNE_INTERVAL_MS: String(30 * 24 * 3_600_000) })).toThrow(SettingsError);
    expect(() => read({ GANTRY_PRUNE_INTERVAL_MS: String(2 ** 31) })).toThrow(/GANTRY_PRUNE_INTERVAL_MS must be a whole number from 10 to 2147483647/);
    expect(read({ GANTRY_PRUNE_INTERVAL_MS: String(2 ** 31 - 1) }).retention.pruneIntervalMs).toBe(2 ** 31 - 1);
  });

  it("GANTRY_STREAM_MAX_AGE_MS beyond JetStream's nanosecond range is refused at start, not answered 'invalid JSON' by the server", () => {
    expect(() => read({ GANTRY_STREAM_MAX_AGE_MS: '10000000000000' })).toThrow(/GANTRY_STREAM_MAX_AGE_MS must be a whole number from 0 to 9223372036854/);
    expect(read({ GANTRY_STREAM_MAX_AGE_MS: '9223372036854' }).streamLimits.maxAgeMs).toBe(9_223_372_036_854);
    expect(read({ GANTRY_STREAM_MAX_AGE_MS: '0' }).streamLimits.maxAgeMs).toBe(0);
  });
});

describe('a variable two parts read', () => {
  it('is named once when it is refused', () => {
    const other = defineSettings({ name: 'other', token: Symbol('other'), variables: { GANTRY_SHUTDOWN_GRACE_MS: shutdownGraceSetting() }, build: (v) => v });
    const refused = (() => {
      try {
        readSettings([runtime, other] as never, { GANTRY_SHUTDOWN_GRACE_MS: 'soon' });
      } catch (error) {
        return error;
      }
      return null;
    })();
    expect(refused).toBeInstanceOf(SettingsError);
    expect((refused as SettingsError).problems).toEqual([{ variable: 'GANTRY_SHUTDOWN_GRACE_MS', problem: expect.stringContaining('whole number') }]);
  });
});
