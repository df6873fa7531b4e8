import { setTimeout as sleep } from 'node:timers/promises';
import { enqueueJob, ErrorCode, GantryError, getJob, type JobView, type ReplyOf } from '@gantry/contracts';
import { isTransient, type CommandClient } from '@gantry/messaging';
import type { z } from 'zod';

/** What the engine asks the job service to queue (the enqueue_job request). */
export type EnqueueRequest = z.input<typeof enqueueJob.request>;
export type EnqueueReply = ReplyOf<typeof enqueueJob>;

/**
 * The job service did not take the request within the patience — no answer, or only "nothing
 * written, send again" (VERSION_CONFLICT): not a failure of the run, an outage (AC-L3).
 */
export class RunQueueUnavailable extends Error {
  constructor(readonly silence: GantryError) {
    super(`the job service did not take the request: ${silence.code}: ${silence.message}`);
    this.name = 'RunQueueUnavailable';
  }
}

/** A test-only answer in place of the job service's to one try of an enqueue (null: the job service answers). */
export type ForcedAnswer = (request: EnqueueRequest) => GantryError | null;

/**
 * The job service as the engine's run queue. A request it does not answer, or answers
 * VERSION_CONFLICT (its streams stayed busy: nothing written, the same request may be sent again),
 * is sent again under the same idempotency key (so it lands once) for the patience (AC-L3); a
 * refusal is answered at once as the GantryError it is.
 */
export class RunQueue {
  constructor(
    private readonly commands: CommandClient,
    private readonly settings: { patienceMs: number; timeoutMs: number },
    private readonly forced: ForcedAnswer = () => null,
  ) {}

  async enqueue(request: EnqueueRequest, correlationId?: string): Promise<EnqueueReply> {
    const until = Date.now() + this.settings.patienceMs;
    for (let pause = 250; ; pause = Math.min(pause * 2, 2000)) {
      try {
        const forced = this.forced(request);
        if (forced) throw forced;
        return await this.commands.request(enqueueJob, request, this.options(correlationId, until));
      } catch (error) {
        if (isTransient(error)) throw new RunQueueUnavailable(error as GantryError);
        if (!(error instanceof GantryError) || error.code !== ErrorCode.VERSION_CONFLICT) throw error;
        if (Date.now() + pause >= until) throw new RunQueueUnavailable(error);
        await sleep(pause);
      }
    }
  }

  /**
   * A job as the job service has it, for a command's answer (record_review_decision): a job service
   * that does not answer within the patience is answered as the GantryError it is (UNAVAILABLE,
   * TIMEOUT), which the caller may send again under its key, not as an INTERNAL refusal. Not
   * `patient`: asked once (a consumer that hands its event back rather than hold its transaction open).
   */
  job(jobId: string, { patient = true }: { patient?: boolean } = {}): Promise<JobView> {
    return this.commands.request(getJob, { jobId }, { ...this.options(), ...(patient ? {} : { retryUntil: undefined }) });
  }

  private options(correlationId?: string, until = Date.now() + this.settings.patienceMs) {
    return { timeoutMs: this.settings.timeoutMs, correlationId, retryUntil: until };
  }
}
