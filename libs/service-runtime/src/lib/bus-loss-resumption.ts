import type { Bus } from '@gantry/messaging';

/**
 * What a service that judges leases by its own clock owes its holders after it lost its bus: while it
 * was cut off from NATS, the holders' renewals found nobody serving and did not count that time, so
 * once the bus is back every held lease is resumed — runs as long again from then — before the service
 * expires a lease or judges one for a command. NATS gives the service its subscriptions back as it
 * reconnects, so a holder's request asked again through the outage can arrive before the service's
 * next sweep: judged first, it would find the lease run out during the outage and refuse it, and the
 * holder would stop its agent for a lease it never lost (docs/jobs.md, "A job service outage";
 * docs/worktrees.md, "When a lease ends").
 *
 * One resumption per loss seen (`Bus.connectionLosses`, however short the loss), at most one at a time,
 * shared by whoever waits for it. Nothing to wait for, the usual case, costs no round trip; nor does a
 * caller while the bus is still down (a command over HTTP): the resumption waits for the bus.
 */
export class BusLossResumption {
  /** The bus's losses the leases were last resumed for (or that there were at start). */
  private resumedFor: number;
  private running: Promise<void> | undefined;

  constructor(
    private readonly bus: Bus,
    private readonly resume: () => Promise<void>,
  ) {
    this.resumedFor = bus.connectionLosses;
  }

  /** Whether a loss of the bus has not been resumed for yet. */
  get pending(): boolean {
    return this.bus.connectionLosses !== this.resumedFor;
  }

  /** Resolves once no loss of the bus waits for its resumption (running it if one does and the bus is back). */
  settle(): Promise<void> {
    if (!this.pending || !this.bus.connected) return Promise.resolve();
    this.running ??= (async () => {
      try {
        const losses = this.bus.connectionLosses;
        await this.resume();
        this.resumedFor = losses;
      } finally {
        this.running = undefined;
      }
    })();
    return this.running;
  }
}
