/**
 * The stop of the process, as its first SIGTERM or SIGINT asked for it. `runService` listens for
 * them from its first step, before the application is made, so a signal that comes while the service
 * starts is taken as a stop request rather than killing the process with the work its start began
 * (docs/operations.md, "Stopping"). A part that must stop taking work at the signal itself, before the
 * application's close reaches it (the runner's intake), listens to `signal`; one whose stop is bounded
 * from the signal reads `requestedAt`. A service run in a test's process is never asked: its close
 * is its stop.
 */
export class ProcessStop {
  private readonly asked = new AbortController();
  private at: number | null = null;

  /** Aborts at the first stop request. */
  get signal(): AbortSignal {
    return this.asked.signal;
  }

  /** When the stop was asked for (epoch ms), or null. */
  get requestedAt(): number | null {
    return this.at;
  }

  /** Asks for the stop; false when it was asked for already. */
  request(at: number = Date.now()): boolean {
    if (this.at !== null) return false;
    this.at = at;
    this.asked.abort();
    return true;
  }
}

/** This process's stop: one per process, as its signals are. */
export const processStop = new ProcessStop();
