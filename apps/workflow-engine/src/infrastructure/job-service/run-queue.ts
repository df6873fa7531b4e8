import { enqueueJob, getJob, type GantryError, type JobView, type ReplyOf } from '@gantry/contracts';
import { isTransient, type CommandClient } from '@gantry/messaging';
import type { z } from 'zod';

/** What the engine asks the job service to queue (the enqueue_job request). */
export type EnqueueRequest = z.input<typeof enqueueJob.request>;
export type EnqueueReply = ReplyOf<typeof enqueueJob>;

/** The job service did not answer within the patience: not a failure of the run, an outage (AC-L3). */
export class RunQueueUnavailable extends Error {
  constructor(readonly silence: GantryError) {
    super(`the job service did not answer: ${silence.message}`);
    this.name = 'RunQueueUnavailable';
  }
}

/**
 * The job service as the engine's run queue. A request it does not answer is sent again under the
 * same idempotency key (so it lands once) for the patience (AC-L3); a refusal is answered at once
 * as the GantryError it is.
 */
export class RunQueue {
  constructor(
    private readonly commands: CommandClient,
    private readonly settings: { patienceMs: number; timeoutMs: number },
  ) {}

  enqueue(request: EnqueueRequest, correlationId?: string): Promise<EnqueueReply> {
    return this.patiently(() => this.commands.request(enqueueJob, request, this.options(correlationId)));
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

  private options(correlationId?: string) {
    return { timeoutMs: this.settings.timeoutMs, correlationId, retryUntil: Date.now() + this.settings.patienceMs };
  }

  private async patiently<T>(send: () => Promise<T>): Promise<T> {
    try {
      return await send();
    } catch (error) {
      if (isTransient(error)) throw new RunQueueUnavailable(error as GantryError);
      throw error;
    }
  }
}
