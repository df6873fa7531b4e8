import { DeliverPolicy, type ConsumerMessages } from '@nats-io/jetstream';
import { eventFilter, JobCancelled, type EventEnvelope } from '@gantry/contracts';
import type { Bus } from '@gantry/messaging';

export interface JobCancellation {
  jobId: string;
  /** The claim the cancel revoked; null when the job was not claimed. */
  revokedLeaseToken: number | null;
}

export interface CancellationLog {
  warn(message: string, fields?: Record<string, unknown>): void;
}

/**
 * The runner's ear on the job service's `JobCancelled` events: an ordered (ephemeral) consumer of the
 * jobs stream from the moment it starts, so a cancel reaches the runner of the job at once instead of
 * at its next lease renewal. Nothing durable is needed: a cancel missed while the runner was not
 * listening shows up as a refused renewal, and a runner that starts has no running job to stop yet.
 * The ordered consumer re-creates itself at the right sequence after a reconnect.
 */
export class CancellationWatch {
  private messages: ConsumerMessages | null = null;
  private running = false;
  private listening = false;
  private loop: Promise<void> | null = null;

  constructor(
    private readonly bus: Bus,
    private readonly onCancelled: (cancellation: JobCancellation) => void,
    private readonly log: CancellationLog,
  ) {}

  /** True while the consumer is attached (for /ready). */
  get ready(): boolean {
    return this.listening;
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    this.loop = this.run();
  }

  async stop(): Promise<void> {
    this.running = false;
    await this.messages?.close().catch(() => undefined);
    await this.loop?.catch(() => undefined);
  }

  private async run(): Promise<void> {
    /**
     * The stream sequence to attach at: the stream's next when the watch first attached, then the one
     * after the last message heard, so nothing in between is missed after an interruption. A sequence,
     * not a moment: the runner's clock need not agree with the NATS server's (docs/jobs.md, "A runner's clock").
     */
    let resumeAt: number | null = null;
    while (this.running) {
      try {
        const stream = await this.bus.ensureForeignEventStream('jobs');
        const next = (await this.bus.jsm.streams.info(stream)).state.last_seq + 1;
        // A stream made again since numbers from its start: the watch attaches at its next message then.
        resumeAt = resumeAt === null || resumeAt > next ? next : resumeAt;
        const consumer = await this.bus.js.consumers.get(stream, {
          // one subject as a string: a list needs NATS 2.10
          filter_subjects: eventFilter(this.bus.naming, 'jobs', JobCancelled.type),
          deliver_policy: DeliverPolicy.StartSequence,
          opt_start_seq: resumeAt,
        });
        const messages = await consumer.consume();
        this.messages = messages;
        this.listening = true;
        for await (const msg of messages) {
          resumeAt = msg.seq + 1;
          const cancellation = parse(msg.json<EventEnvelope>());
          if (cancellation) this.onCancelled(cancellation);
          if (!this.running) break;
        }
      } catch (error) {
        if (this.running) this.log.warn('listening for cancelled jobs was interrupted; attaching again', { error: String(error) });
      } finally {
        this.listening = false;
        await this.messages?.close().catch(() => undefined);
        this.messages = null;
      }
      if (this.running) await new Promise((resolve) => setTimeout(resolve, 500));
    }
  }
}

function parse(envelope: EventEnvelope): JobCancellation | null {
  const data = JobCancelled.data.safeParse(envelope?.data);
  return data.success ? { jobId: data.data.jobId, revokedLeaseToken: data.data.revokedLeaseToken } : null;
}
