import { SettingsError, settingsOf } from '@gantry/service-runtime';
import { jobServiceSettings } from '../src/application/job-service-settings.js';

describe('the lease sweep interval (GANTRY_LEASE_SWEEP_MS)', () => {
  it('defaults to one second', () => {
    expect(settingsOf(jobServiceSettings, {}).leaseSweepMs).toBe(1000);
  });

  it('takes a whole number of milliseconds', () => {
    expect(settingsOf(jobServiceSettings, { GANTRY_LEASE_SWEEP_MS: '250' }).leaseSweepMs).toBe(250);
  });

  it.each(['0', '-5', '1.5', 'fast'])('refuses %s at start rather than sweeping at a nonsense rate', (raw) => {
    expect(() => settingsOf(jobServiceSettings, { GANTRY_LEASE_SWEEP_MS: raw })).toThrow(SettingsError);
    expect(() => settingsOf(jobServiceSettings, { GANTRY_LEASE_SWEEP_MS: raw })).toThrow(/GANTRY_LEASE_SWEEP_MS must be a whole number/);
  });
});
