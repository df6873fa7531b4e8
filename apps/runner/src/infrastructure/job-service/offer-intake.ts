import { AckPolicy, DeliverPolicy, type Consumer, type JsMsg } from '@nats-io/jetstream';
import { dispatchStreamName, dispatchSubject, invalidCommand, JobOfferSchema, type JobKind, type JobOffer } from '@gantry/contracts';
import { isNotFound, type Bus } from '@gantry/messaging';
import { observeSettlement } from '@gantry/service-runtime';

/** The shared durable consumer of one job kind: every runner of the kind pulls from it, so each offer reaches one runner. */
export function dispatchConsumerName(kind: JobKind): string {
  return `runner-${kind}`;
}

/** One offer taken from the dispatch stream, held until the runner has handled it. */
export interface HeldOffer {
  kind: JobKind;
  /** Null when the message was not a valid offer (it has been terminated already). */
  offer: JobOffer | null;
  deliveryCount: number;
  /** Handled: claimed and run, or the claim was lost. The work-queue stream then forgets it. */
  ack(): void;
  /** Not handled (e.g. the job service did not answer): offered again after the delay. */
  nak(delayMs: number): void;
  /** Still being handled: keeps the offer from being redelivered while the job runs. */
  working(): void;
}

export interface DispatchIntakeOptions {
  bus: Bus;
  /** How long an unacknowledged offer stays with this runner before it is offered again. */
  ackWaitMs: number;
  streamReplicas?: number;
  /** Where a terminated message is told of; the runner's scrubbing logger. */
  log: IntakeLog;
}

export interface IntakeLog {
  warn(message: string, fields?: Record<string, unknown>): void;
}

/**
 * The runner's side of `<root>.dispatch.<kind>`: the dispatch stream (a work queue; created here too
 * so a runner that starts first has something to wait on) and one shared durable pull consumer per
 * kind, created idempotently by whichever runner comes first.
 */
export class DispatchIntake {
  private readonly consumers = new Map<JobKind, Consumer>();

  constructor(private readonly options: DispatchIntakeOptions) {}

  async ensure(kinds: readonly JobKind[]): Promise<void> {
    const { bus } = this.options;
    await bus.ensureDispatchStream({ replicas: this.options.streamReplicas ?? 1 });
    const stream = dispatchStreamName(bus.naming);
    for (const kind of kinds) {
      const name = dispatchConsumerName(kind);
      try {
        await bus.jsm.consumers.info(stream, name);
        continue;
      } catch (error) {
        if (!isNotFound(error)) throw error;
      }
      try {
        await bus.jsm.consumers.add(stream, {
          durable_name: name,
          ack_policy: AckPolicy.Explicit,
          deliver_policy: DeliverPolicy.All,
          filter_subject: dispatchSubject(bus.naming, kind),
          ack_wait: this.options.ackWaitMs * 1_000_000,
          max_deliver: -1,
        });
      } catch (error) {
        // Another runner created it between our look and our add.
        if (!/already (in use|exists)/i.test(String(error))) throw error;
      }
    }
  }

  /** Waits up to `expiresMs` for one offer of `kind`; null when none came. */
  async next(kind: JobKind, expiresMs: number): Promise<HeldOffer | null> {
    const { bus } = this.options;
    let consumer = this.consumers.get(kind);
    if (!consumer) {
      consumer = await bus.js.consumers.get(dispatchStreamName(bus.naming), dispatchConsumerName(kind));
      this.consumers.set(kind, consumer);
    }
    try {
      const msg = await consumer.next({ expires: Math.max(1000, expiresMs) });
      return msg ? held(kind, msg, this.options.log) : null;
    } catch (error) {
      // Looked up again next time: the consumer may have been deleted and re-created.
      this.consumers.delete(kind);
      throw error;
    }
  }
}

function held(kind: JobKind, msg: JsMsg, log: IntakeLog): HeldOffer {
  const read = readOffer(kind, msg);
  const offer = 'offer' in read ? read.offer : null;
  if ('problem' in read) {
    // A plain +TERM: a NATS 2.9 server takes `+TERM <reason>` for no acknowledgement at all, and the
    // message would come back after every ack wait, for ever (the consumer delivers without limit).
    msg.term();
    observeSettlement(dispatchConsumerName(kind), 'term');
    // Where it is and what is wrong with it, never what it says: a payload may carry anything.
    log.warn('invalid job offer terminated', {
      kind,
      subject: msg.subject,
      streamSequence: msg.seq,
      deliveryCount: msg.info.deliveryCount,
      problem: read.problem,
    });
  }
  return {
    kind,
    offer,
    deliveryCount: msg.info.deliveryCount,
    ack: () => msg.ack(),
    nak: (delayMs) => msg.nak(delayMs),
    working: () => msg.working(),
  };
}

/** The offer a message holds, or what keeps it from being one of `kind` (in the schema's words, without the values). */
function readOffer(kind: JobKind, msg: JsMsg): { offer: JobOffer } | { problem: string } {
  let payload: unknown;
  try {
    payload = msg.json();
  } catch {
    // The parser's message quotes the payload.
    return { problem: 'the payload is not JSON' };
  }
  const parsed = JobOfferSchema.safeParse(payload);
  if (!parsed.success) return { problem: invalidCommand(parsed.error, 'job offer').message };
  if (parsed.data.kind !== kind) return { problem: `an offer of ${parsed.data.kind} on the ${kind} subject` };
  return { offer: parsed.data };
}
