import { DEFAULT_LEASE_SWEEP_MS, leaseSweepIntervalMs } from '../src/application/lease-expiry.js';

describe('the lease sweep interval (GANTRY_LEASE_SWEEP_MS)', () => {
  it('defaults to one second', () => {
    expect(leaseSweepIntervalMs({})).toBe(DEFAULT_LEASE_SWEEP_MS);
    expect(DEFAULT_LEASE_SWEEP_MS).toBe(1000);
  });

  it('takes a whole number of milliseconds', () => {
    expect(leaseSweepIntervalMs({ GANTRY_LEASE_SWEEP_MS: '250' })).toBe(250);
  });

  it.each(['0', '-5', '1.5', 'fast'])('refuses %s at start rather than sweeping at a nonsense rate', (raw) => {
    expect(() => leaseSweepIntervalMs({ GANTRY_LEASE_SWEEP_MS: raw })).toThrow(/GANTRY_LEASE_SWEEP_MS/);
  });
});
