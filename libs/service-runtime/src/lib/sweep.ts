/** What a sweep logs with: pino's `(fields, message)` (a `PinoLogger` or a pino logger). */
export interface SweepLog {
  warn(fields: Record<string, unknown>, message: string): void;
}

/** How ticks are scheduled; the default is an unref'ed `setInterval` (tests drive ticks by hand). */
export type TickSchedule = (tick: () => void, everyMs: number) => { cancel(): void };

const intervalSchedule: TickSchedule = (tick, everyMs) => {
  const timer = setInterval(tick, everyMs);
  timer.unref();
  return { cancel: () => clearInterval(timer) };
};

export interface SweepOptions {
  /** Names the sweep in its log lines. */
  name: string;
  everyMs: number;
  /** One pass. A pass that throws is logged; the next tick runs again. */
  run: () => Promise<unknown>;
  log: SweepLog;
  schedule?: TickSchedule;
}

/**
 * A periodic pass of a service (lease expiry, retention pruning, re-reads): at most one pass at a
 * time (a tick while one runs is skipped), a failed pass logged and retried at the next tick, and a
 * stop that waits for the pass in flight — so a service's shutdown can close its pool after it.
 * Written here rather than with @nestjs/schedule's @Interval, which neither skips overlapping runs
 * nor waits for one in flight at shutdown. See docs/operations.md (periodic sweeps).
 */
export class Sweep {
  private ticks: { cancel(): void } | null = null;
  private running: Promise<void> | null = null;

  constructor(private readonly options: SweepOptions) {}

  /** Starts ticking (a second start changes nothing); the first pass one interval from now, or at once with `now`. */
  start(options: { now?: boolean } = {}): void {
    if (this.ticks) return;
    if (options.now) this.running ??= this.pass();
    this.ticks = (this.options.schedule ?? intervalSchedule)(() => {
      this.running ??= this.pass();
    }, this.options.everyMs);
  }

  /** A pass now, or the one already running. Never rejects: a failure is logged. */
  runNow(): Promise<void> {
    this.running ??= this.pass();
    return this.running;
  }

  private pass(): Promise<void> {
    return Promise.resolve()
      .then(() => this.options.run())
      .then(
        () => undefined,
        (error: unknown) => this.options.log.warn({ sweep: this.options.name, error: error instanceof Error ? error.message : String(error) }, 'sweep failed; the next tick retries'),
      )
      .finally(() => {
        this.running = null;
      });
  }

  /** No further ticks; resolves once the pass in flight (if any) is over. */
  async stop(): Promise<void> {
    this.ticks?.cancel();
    this.ticks = null;
    await this.running;
  }
}
