/**
 * Runs `work(key)` for keys as they are asked for: at most one run per key at a time, at most
 * `concurrency` runs at once, and a key asked for again while it runs runs once more afterwards
 * (the ask carried news the running one may have missed) — however often it was asked meanwhile.
 * Written here because the queue libraries at hand (p-limit, Bottleneck) limit concurrency but do
 * not fold repeated asks for one key into one follow-up run.
 */
export class KeyedRuns {
  private readonly running = new Set<string>();
  private readonly again = new Set<string>();
  private readonly waiting: string[] = [];
  private readonly queued = new Set<string>();
  /** A key's pending ask for later: its timer and when it is due. */
  private readonly timers = new Map<string, { timer: NodeJS.Timeout; dueAt: number }>();
  private active = 0;
  private stopped = false;
  private idleWaiters: (() => void)[] = [];

  constructor(
    private readonly concurrency: number,
    private readonly work: (key: string) => Promise<void>,
    private readonly onError: (key: string, error: unknown) => void,
  ) {}

  /** Ask for a run of `key`, now or after `delayMs` (a later ask for sooner wins). */
  ask(key: string, delayMs = 0): void {
    if (this.stopped) return;
    if (delayMs > 0) {
      const dueAt = Date.now() + delayMs;
      const pending = this.timers.get(key);
      if (pending && pending.dueAt <= dueAt) return;
      // Sooner than the ask pending (a read a second after a 409, under a failed run's wait of a minute): it replaces it.
      if (pending) clearTimeout(pending.timer);
      const timer = setTimeout(() => {
        this.timers.delete(key);
        this.ask(key);
      }, delayMs);
      timer.unref();
      this.timers.set(key, { timer, dueAt });
      return;
    }
    if (this.running.has(key)) {
      this.again.add(key);
      return;
    }
    if (this.queued.has(key)) return;
    this.queued.add(key);
    this.waiting.push(key);
    this.pump();
  }

  private pump(): void {
    while (!this.stopped && this.active < this.concurrency && this.waiting.length > 0) {
      const key = this.waiting.shift()!;
      this.queued.delete(key);
      this.running.add(key);
      this.active++;
      void this.work(key)
        .catch((error: unknown) => this.onError(key, error))
        .finally(() => {
          this.running.delete(key);
          this.active--;
          if (this.again.delete(key)) this.ask(key);
          this.pump();
          if (this.active === 0 && this.waiting.length === 0) for (const resolve of this.idleWaiters.splice(0)) resolve();
        });
    }
  }

  /** Stops taking asks, drops what waits, and resolves once the runs under way have finished. */
  async stop(): Promise<void> {
    this.stopped = true;
    for (const { timer } of this.timers.values()) clearTimeout(timer);
    this.timers.clear();
    this.waiting.length = 0;
    this.queued.clear();
    if (this.active > 0) await new Promise<void>((resolve) => this.idleWaiters.push(resolve));
  }
}
