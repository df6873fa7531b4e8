/** The longest pause of the engine's repeating scans: a service or stream away for long is tried every 5 minutes. */
export const LONGEST_SCAN_PAUSE_MS = 5 * 60_000;

/** The pauses of a RepeatingScan: the first, and the longest it grows to (doubling each time). */
export interface ScanPauses {
  firstMs: number;
  maxMs: number;
}

/**
 * Runs a scan after a pause while there is work left for it: asked for once or many times, it runs
 * once; while the scan leaves work behind it runs again, each pause twice the last up to `maxMs`, each
 * given or taken a quarter at random so that replicas do not all come back at the same moment; a scan
 * that leaves nothing starts the pauses over. Its timer does not hold the process open, and `stop`
 * leaves none behind: nothing is scanned after it, and a scan under way has ended when it resolves.
 */
export class RepeatingScan {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  private nextPauseMs: number | null = null;
  private stopped = false;

  constructor(
    private readonly scan: () => Promise<void>,
    private readonly workLeft: () => boolean,
    private readonly pauses: ScanPauses,
    private readonly onScheduled: (delayMs: number) => void = () => undefined,
  ) {}

  /** A scan is wanted: one is timed unless one is waiting or under way (that one covers it). */
  request(): void {
    if (this.stopped || this.timer || this.running) return;
    const pauseMs = this.nextPauseMs ?? this.pauses.firstMs;
    this.nextPauseMs = Math.min(pauseMs * 2, Math.max(this.pauses.maxMs, pauseMs));
    const delayMs = Math.round(pauseMs * (0.75 + Math.random() / 2));
    this.onScheduled(delayMs);
    this.timer = setTimeout(() => {
      this.timer = null;
      this.running = this.scan()
        .catch(() => undefined)
        .finally(() => {
          this.running = null;
          if (this.workLeft()) this.request();
          else this.nextPauseMs = null;
        });
    }, delayMs);
    this.timer.unref();
  }

  /** Whether a scan is waiting for its time. */
  get waiting(): boolean {
    return this.timer !== null;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await this.running;
  }
}
