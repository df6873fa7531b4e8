/**
 * The try that got an answer, for a lease's end by this runner's clock (docs/jobs.md, "A runner's
 * clock"): what the answer says is left of the lease, counted from when that try was sent — the
 * service answered after, so the end falls a little before its own, never after, even for an answer
 * stored for an earlier try whose reply was lost.
 */
export class AnsweredTry {
  private startedAt = Date.now();

  readonly started = (at: number): void => {
    this.startedAt = at;
  };

  /** `otherwise`: the end a service that does not say what is left (an older one) leaves to the caller. */
  endOf(expiresInMs: number | undefined, otherwise: number): number {
    return expiresInMs === undefined ? otherwise : this.startedAt + expiresInMs;
  }
}
