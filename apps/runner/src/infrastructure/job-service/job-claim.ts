import { claimJob, ErrorCode, isGantryError, type ReplyOf, type RequestOf } from '@gantry/contracts';
import { isTransient, nobodyServed, type CommandClient } from '@gantry/messaging';
import { AnsweredTry } from '../answered-try.js';

/** A claim's answer, and when its lease runs out by this runner's clock (docs/jobs.md, "A runner's clock"). */
export interface ClaimAnswered {
  reply: ReplyOf<typeof claimJob>;
  /** Epoch ms on this runner's clock; never after the job service's own expiry. */
  leaseRunsOutAt: number;
}

export interface ClaimOptions {
  /** One try's bound; after three of them without any try reaching a job service, the claim is given up. */
  timeoutMs: number;
  correlationId?: string;
  /** The runner's stop deadline: a try in flight is given up at once. */
  abandon?: AbortSignal;
  /** Gives up the asking (a shutdown): the last error is thrown. */
  stopped(): boolean;
  /** The pause between tries (one that a shutdown cuts short). */
  sleep(ms: number): Promise<void>;
  /** Told once, when a claim that may have been written has gone unanswered for three tries' time. */
  onLongUnanswered?(error: unknown): void;
}

/**
 * The claim of an offered job, asked again under its key while it gets no answer: the job service
 * answers a repeat with the job as it is now (docs/jobs.md, "Claims"). Tries that reached no job
 * service at all (UNAVAILABLE) wrote nothing, and after three command timeouts the claim is given
 * up. Once a try went unanswered by a job service that got it (TIMEOUT), the claim may have been
 * written: given up, the offer would go to another runner, which is refused the job, and the job
 * would sit claimed by this runner, running nowhere, until its lease expired, an attempt spent. So
 * it is asked until it is answered; only `stopped` ends it.
 */
export async function claimUnderKey(commands: CommandClient, request: RequestOf<typeof claimJob> & { leaseDurationMs: number }, options: ClaimOptions): Promise<ClaimAnswered> {
  const { timeoutMs, correlationId, abandon } = options;
  const giveUpAt = Date.now() + 3 * timeoutMs;
  // A job service that does not say what is left of the lease: it runs at least what was asked from the
  // claim's first try, moved on by the time no job service ran (the one that answered resumed it).
  let askedAt = Date.now();
  const answered = new AnsweredTry();
  let mayBeWritten = false;
  let warned = false;
  let unservedSince: number | null = null;
  for (let tries = 1; ; tries++) {
    const tryStart = Date.now();
    if (unservedSince !== null) askedAt += tryStart - unservedSince;
    unservedSince = null;
    try {
      const reply = await commands.request(claimJob, request, { timeoutMs, correlationId, abandon, onTryStarted: answered.started });
      return { reply, leaseRunsOutAt: answered.endOf(reply.claimed ? reply.leaseExpiresInMs : undefined, askedAt + request.leaseDurationMs) };
    } catch (error) {
      if (!isTransient(error)) throw error;
      if (nobodyServed(error)) unservedSince = tryStart;
      if (isGantryError(error) && error.code === ErrorCode.TIMEOUT) mayBeWritten = true;
      if (options.stopped() || (!mayBeWritten && Date.now() >= giveUpAt)) throw error;
      if (mayBeWritten && !warned && Date.now() >= giveUpAt) {
        warned = true;
        options.onLongUnanswered?.(error);
      }
      await options.sleep(Math.min(2000, 250 * 2 ** Math.min(tries - 1, 10)));
    }
  }
}
