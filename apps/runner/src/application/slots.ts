/** The runner's free places for jobs: an offer is only taken after a slot was reserved for it. */
export class Slots {
  private free: number;
  private readonly waiting: (() => void)[] = [];

  constructor(readonly capacity: number) {
    this.free = capacity;
  }

  get inUse(): number {
    return this.capacity - this.free;
  }

  /** Resolves once a slot is reserved for the caller. */
  acquire(): Promise<void> {
    if (this.free > 0) {
      this.free -= 1;
      return Promise.resolve();
    }
    return new Promise((resolve) => this.waiting.push(resolve));
  }

  release(): void {
    const next = this.waiting.shift();
    if (next) next();
    else this.free = Math.min(this.capacity, this.free + 1);
  }
}
