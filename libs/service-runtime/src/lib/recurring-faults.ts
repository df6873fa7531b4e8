import { countLeaseSweepFailure, standingLeaseSweepFaults } from './metrics.js';

/** After its first line, a fault met again is logged this long after its last line, then twice as long each time… */
export const FAULT_LOG_FIRST_REPEAT_MS = 60_000;
/** …up to this long: a fault that stays is logged at least once an hour. */
export const FAULT_LOG_MAX_REPEAT_MS = 3_600_000;

/** What a sweep knows of one thing it failed to handle, pass after pass. */
export interface StandingFault {
  /** When the sweep first failed on it (epoch ms). */
  since: number;
  /** Tries that failed, the last one included. */
  failedTries: number;
}

interface Standing extends StandingFault {
  nextLogAt: number;
  repeatMs: number;
}

/**
 * The things (leases, keys) a sweep's passes fail on again and again, as this replica has met them
 * (docs/operations.md, "Metrics" and "Periodic sweeps"). Every failed try is counted
 * (`gantry_lease_sweep_failures_total`); a thing failing is logged when first found and then at
 * growing intervals (FAULT_LOG_FIRST_REPEAT_MS doubling up to FAULT_LOG_MAX_REPEAT_MS) rather than at
 * every pass, and how many are failing now is a gauge (`gantry_lease_sweep_faulty_leases`). A thing the
 * sweep handles at last, or does not meet in a whole pass (it moved on, someone removed it), is forgotten.
 */
export class RecurringFaults {
  private readonly standing = new Map<string, Standing>();
  private metInPass = new Set<string>();

  constructor(private readonly sweep: 'job-lease' | 'worktree-lease') {}

  /** A pass begins: what it does not meet is forgotten at its end (`passEnded`). */
  passBegins(): void {
    this.metInPass = new Set();
  }

  /** The pass met `key` (failed or not, handled or left to another replica). */
  met(key: string): void {
    this.metInPass.add(key);
  }

  /** A try on `key` failed at `now` (epoch ms): whether to log it now, and its standing. */
  failed(key: string, now: number): { log: boolean } & StandingFault {
    countLeaseSweepFailure(this.sweep);
    this.met(key);
    let fault = this.standing.get(key);
    if (!fault) {
      fault = { since: now, failedTries: 0, nextLogAt: now, repeatMs: FAULT_LOG_FIRST_REPEAT_MS };
      this.standing.set(key, fault);
      standingLeaseSweepFaults(this.sweep, +1);
    }
    fault.failedTries++;
    const log = now >= fault.nextLogAt;
    if (log) {
      fault.nextLogAt = now + fault.repeatMs;
      fault.repeatMs = Math.min(2 * fault.repeatMs, FAULT_LOG_MAX_REPEAT_MS);
    }
    return { log, since: fault.since, failedTries: fault.failedTries };
  }

  /** `key` was handled: its standing when it had failed before (to say it is over), else undefined. */
  handled(key: string): StandingFault | undefined {
    this.met(key);
    return this.forget(key);
  }

  /** A whole pass ended: what it did not meet is no longer standing. */
  passEnded(): void {
    for (const key of [...this.standing.keys()]) if (!this.metInPass.has(key)) this.forget(key);
  }

  /** Forgets everything (the sweep stops): the gauge no longer counts this replica's. */
  clear(): void {
    for (const key of [...this.standing.keys()]) this.forget(key);
  }

  private forget(key: string): StandingFault | undefined {
    const fault = this.standing.get(key);
    if (!fault) return undefined;
    this.standing.delete(key);
    standingLeaseSweepFaults(this.sweep, -1);
    return { since: fault.since, failedTries: fault.failedTries };
  }
}
