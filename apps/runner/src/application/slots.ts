/**
 * The runner's places for jobs. An intake loop waits until a place is free before it asks for an
 * offer, and takes the place only when an offer came: loops of several kinds can wait side by side
 * without holding places they are not using.
 */
export class Slots {
  private used = 0;
  private readonly waiting = new Set<() => void>();

  constructor(readonly capacity: number) {}

  get inUse(): number {
    return this.used;
  }

  get free(): number {
    return this.capacity - this.used;
  }

  /** Resolves as soon as at least one place is free (reserving nothing). */
  whenFree(): Promise<void> {
    if (this.free > 0) return Promise.resolve();
    return new Promise((resolve) => this.waiting.add(resolve));
  }

  /** Takes a place if one is free. */
  tryAcquire(): boolean {
    if (this.free <= 0) return false;
    this.used += 1;
    return true;
  }

  release(): void {
    if (this.used === 0) return;
    this.used -= 1;
    const waiters = [...this.waiting];
    this.waiting.clear();
    for (const wake of waiters) wake();
  }

  /** Wakes every waiter without freeing anything (the runner is stopping). */
  wakeAll(): void {
    const waiters = [...this.waiting];
    this.waiting.clear();
    for (const wake of waiters) wake();
  }
}
