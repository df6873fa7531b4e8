/**
 * Exponential backoff after consecutive errors: `initialMs · 2^(failures-1)`, capped at `maxMs`,
 * with up to 20 % taken off at random so that runners that failed together do not retry together.
 */
export function backoffDelayMs(failures: number, options: { initialMs: number; maxMs: number }, random: () => number = Math.random): number {
  if (failures <= 0) return 0;
  const exponential = Math.min(options.maxMs, options.initialMs * 2 ** Math.min(failures - 1, 30));
  return Math.max(1, Math.round(exponential * (1 - 0.2 * random())));
}

/** Counts consecutive failures of one loop; a success starts over. */
export class Backoff {
  private failures = 0;

  constructor(private readonly options: { initialMs: number; maxMs: number }) {}

  get consecutiveFailures(): number {
    return this.failures;
  }

  /** Records a failure and returns how long to wait before the next try. */
  fail(): number {
    this.failures += 1;
    return backoffDelayMs(this.failures, this.options);
  }

  succeed(): void {
    this.failures = 0;
  }
}

/** Bounds on how long an offer refused for its job's pause is handed back for (docs/jobs.md, "Attempts"). */
export const PAUSE_HAND_BACK_MIN_MS = 1_000;
export const PAUSE_HAND_BACK_MAX_MS = 60_000;

/**
 * How long an offer whose claim was refused for its job's pause goes back for: what is left of the pause
 * as the job service reckoned it from its own clock (`afterMs`), at least a second — a job service
 * replica whose clock is behind refuses it again, and the offer must not come back in a tight loop
 * meanwhile — and at most a minute, the longest pause. Not the pause's end (`notBefore`) against this
 * runner's clock: one a minute behind waited the whole minute however little was left, one ahead had the
 * offer back every second for the whole pause. Only from a job service that does not say is the end read
 * against this clock (`now`).
 */
export function untilPauseEndsMs(pause: { notBefore: string; afterMs: number | null }, now: number): number {
  const left = pause.afterMs ?? Date.parse(pause.notBefore) - now;
  if (Number.isNaN(left)) return PAUSE_HAND_BACK_MIN_MS;
  return Math.min(PAUSE_HAND_BACK_MAX_MS, Math.max(PAUSE_HAND_BACK_MIN_MS, left));
}
