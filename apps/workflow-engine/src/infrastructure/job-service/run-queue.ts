import { ErrorCode, GantryError, enqueueJob, getJob, type JobView, type ReplyOf } from '@gantry/contracts';
import type { CommandClient } from '@gantry/messaging';
import { z } from 'zod';

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

const silent = (error: unknown): error is GantryError =>
  error instanceof GantryError && (error.code === ErrorCode.TIMEOUT || error.code === ErrorCode.UNAVAILABLE);

/**
 * The job service as the engine's run queue. A request the job service does not answer is sent
 * again under the same idempotency key (so it lands once) with growing pauses, for the patience;
 * a refusal is answered at once as the GantryError it is.
 */
export class RunQueue {
  constructor(
    private readonly commands: CommandClient,
    private readonly settings: { patienceMs: number; timeoutMs: number },
  ) {}

  async enqueue(request: EnqueueRequest, correlationId?: string): Promise<EnqueueReply> {
    return this.patiently(() => this.commands.request(enqueueJob, request, { timeoutMs: this.settings.timeoutMs, correlationId }));
  }

  async job(jobId: string): Promise<JobView> {
    return this.patiently(() => this.commands.request(getJob, { jobId }, { timeoutMs: this.settings.timeoutMs }));
  }

  private async patiently<T>(send: () => Promise<T>): Promise<T> {
    const deadline = Date.now() + this.settings.patienceMs;
    for (let pause = 100; ; pause = Math.min(pause * 2, 2000)) {
      try {
        return await send();
      } catch (error) {
        if (!silent(error)) throw error;
        if (Date.now() + pause > deadline) throw new RunQueueUnavailable(error);
        await new Promise((r) => setTimeout(r, pause));
      }
    }
  }
}
