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
