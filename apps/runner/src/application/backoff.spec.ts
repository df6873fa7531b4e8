import { Backoff, backoffDelayMs, PAUSE_HAND_BACK_MAX_MS, PAUSE_HAND_BACK_MIN_MS, untilPauseEndsMs } from './backoff.js';

describe('exponential backoff', () => {
  const options = { initialMs: 500, maxMs: 30_000 };

  it('doubles after each consecutive failure up to its cap', () => {
    const noJitter = () => 0;
    expect([1, 2, 3, 4, 5, 6, 7, 8].map((n) => backoffDelayMs(n, options, noJitter))).toEqual([500, 1000, 2000, 4000, 8000, 16000, 30000, 30000]);
    expect(backoffDelayMs(1000, options, noJitter)).toBe(30_000);
  });

  it('takes at most a fifth off at random so runners do not retry in step', () => {
    expect(backoffDelayMs(3, options, () => 0.999)).toBe(1600);
    expect(backoffDelayMs(3, options, () => 0.5)).toBe(1800);
  });

  it('waits nothing before the first failure, and starts over after a success', () => {
    expect(backoffDelayMs(0, options)).toBe(0);
    const backoff = new Backoff({ initialMs: 100, maxMs: 1000 });
    backoff.fail();
    backoff.fail();
    expect(backoff.consecutiveFailures).toBe(2);
    expect(backoff.fail()).toBeGreaterThanOrEqual(320);
    backoff.succeed();
    expect(backoff.consecutiveFailures).toBe(0);
    expect(backoff.fail()).toBeLessThanOrEqual(100);
  });
});

describe('an offer refused for its job\'s pause', () => {
  const now = Date.parse('2026-11-30T06:00:00.000Z');

  it('goes back for what the job service says is left of the pause, at least a second and at most a minute, whatever this clock reads', () => {
    const end = '2026-11-30T06:00:08.000Z';
    // This clock five minutes behind the job service's, or ahead of it: the job service's reckoning holds.
    for (const skew of [-300_000, 0, 300_000]) expect(untilPauseEndsMs({ notBefore: end, afterMs: 8_000 }, now + skew)).toBe(8_000);
    expect(untilPauseEndsMs({ notBefore: end, afterMs: 200 }, now)).toBe(PAUSE_HAND_BACK_MIN_MS);
    expect(untilPauseEndsMs({ notBefore: end, afterMs: 300_000 }, now)).toBe(PAUSE_HAND_BACK_MAX_MS);
  });

  it('from a job service that does not say, goes back until the pause ends by this clock, at least a second and at most a minute', () => {
    const byEnd = (notBefore: string) => untilPauseEndsMs({ notBefore, afterMs: null }, now);
    expect(byEnd('2026-11-30T06:00:08.000Z')).toBe(8_000);
    expect(byEnd('2026-11-30T06:00:00.200Z')).toBe(PAUSE_HAND_BACK_MIN_MS);
    expect(byEnd('2026-11-30T05:59:58.000Z')).toBe(PAUSE_HAND_BACK_MIN_MS);
    expect(byEnd('2026-11-30T06:05:00.000Z')).toBe(PAUSE_HAND_BACK_MAX_MS);
    expect(byEnd('not a moment')).toBe(PAUSE_HAND_BACK_MIN_MS);
  });
});
