import { randomUUID } from 'node:crypto';
import { headers as natsHeaders, type Msg } from '@nats-io/transport-node';
import { LRUCache } from 'lru-cache';
import {
  commandSubject,
  isSubjectToken,
  replicaCommandSubject,
  servedCommandsSubject,
  ServedCommandsReplySchema,
  ErrorCode,
  GantryError,
  commandReplySchema,
  invalidCommand,
  scrubbingReplacer,
  scrubSecrets,
  type CommandContract,
  type Context,
  type ErrorPayload,
  type ReplyOf,
  type SecretScrubber,
} from '@gantry/contracts';
import type { z } from 'zod';
import type { Bus } from './bus.js';

export const CORRELATION_HEADER = 'Gantry-Correlation-Id';
/** On a command's reply: the token of the replica that answered (see CommandClient, "affinity"). */
export const REPLICA_HEADER = 'Gantry-Replica';

const textDecoder = new TextDecoder();

/** What a command handler knows about the call (the transport in @gantry/service-runtime serves commands). */
export interface CommandContext {
  correlationId: string;
  /** The subject the request came in on, or `http` for the HTTP route. */
  via: string;
}

/** What a command's caller gets back: the result, or the refusal with its code. */
export type CommandReply = { ok: true; result: unknown } | { ok: false; error: ErrorPayload };

export interface RequestOptions {
  /** How long one try waits for its reply. */
  timeoutMs?: number;
  correlationId?: string;
  /**
   * Send the same request again — the same payload, so the same idempotency key — after a TIMEOUT or
   * UNAVAILABLE, until this moment (epoch ms, or a function read before every try, e.g. a lease's
   * current expiry). A refusal is never repeated. Without it the request is tried once. Only for
   * commands that carry an idempotency key: a repeat must be recognised as the same intent.
   */
  retryUntil?: number | (() => number);
  /**
   * With `retryUntil`: the time NATS said nobody serves the subject (no responders) does not count
   * against the deadline, however long it lasts. For a deadline that only runs while the service runs
   * — a claim's lease, which a job service resumes at its start (docs/jobs.md, "A job service
   * outage"). Everything else counts: a TIMEOUT (a service that got the request may be judging), an
   * UNAVAILABLE a service answered itself (it runs), and a connection to NATS that is lost — from
   * this side a NATS that is down looks like this process cut off from it while the services run.
   */
  outagesStopTheClock?: boolean;
  /**
   * With `outagesStopTheClock`: told each stretch of time nobody served, as it is added to the
   * deadline. A caller that reckons a lease from when it asked moves that moment on by it: the
   * service that answers resumed the lease at its start (docs/jobs.md, "A runner's clock").
   */
  onClockStopped?: (ms: number) => void;
  /**
   * Told the moment (this process's clock) each try is sent; the last one told before the answer is
   * the try that got it. A caller that counts a duration the service put in its answer (what is left
   * of a lease) counts it from then: the service answered after, whatever its own clock says.
   */
  onTryStarted?: (at: number) => void;
  /** Pause between tries: doubles from `initialMs` up to `maxMs`. Default `DEFAULT_RETRY_BACKOFF`. */
  retryBackoff?: { initialMs: number; maxMs: number };
  /** Stops retrying (the last error is thrown). */
  signal?: AbortSignal;
  /**
   * A deadline that nothing outlasts (a process's stop): when it aborts, the try in flight is given up
   * at once — TIMEOUT, as it may have been delivered — and none follows, whatever `retryUntil`, an
   * outage that stopped the clock, or a pause say. `signal` only stops the retries after the try.
   */
  abandon?: AbortSignal;
}

/** The pause between tries of a request with `retryUntil`, unless it names its own: 250 ms, doubling up to 2 s. */
export const DEFAULT_RETRY_BACKOFF: Readonly<{ initialMs: number; maxMs: number }> = Object.freeze({ initialMs: 250, maxMs: 2000 });

/** The errors after which a request may have gone unanswered: the same request may be sent again. */
export function isTransient(error: unknown): boolean {
  return error instanceof GantryError && (error.code === ErrorCode.TIMEOUT || error.code === ErrorCode.UNAVAILABLE);
}

/** Sends commands to any context; the request is parsed before sending and the reply after. */
export class CommandClient {
  private readonly replacer: (key: string, value: unknown) => unknown;
  /**
   * Affinity: for each thing commands are about (a job; the contract's `affinity` names it), the
   * replica that answered the last of them. The next one goes to that replica's own subject, where it
   * decides on its memory of the thing rather than reading it again; any replica may still answer it
   * correctly (docs/architecture.md, "Replicas"). A replica that does not answer there is forgotten
   * and the command goes to the queue group at once.
   */
  private readonly replicas = new LRUCache<string, string>({ max: REMEMBERED_REPLICAS });

  /**
   * `scrub` masks secrets in every string of a request before it leaves this process: what a
   * command carries may end up in an event, and only the sender knows its own secret values (a
   * runner's agent key). Default: credentials by their shape (docs/configuration.md, "Secrets in events").
   */
  constructor(
    private readonly bus: Bus,
    options: { scrub?: SecretScrubber } = {},
  ) {
    this.replacer = scrubbingReplacer(options.scrub ?? scrubSecrets);
  }

  /**
   * One command, answered or refused. With `retryUntil`, a request that got no answer is sent again
   * under the same key with a growing pause, each try bounded by `timeoutMs` and by the deadline.
   */
  async request<C extends CommandContract>(contract: C, payload: z.input<C['request']>, options: RequestOptions = {}): Promise<ReplyOf<C>> {
    try {
      return await this.tries(contract, payload, options);
    } catch (error) {
      if (isTransient(error)) outOfReachAnswers.add(error as GantryError);
      throw error;
    }
  }

  private async tries<C extends CommandContract>(contract: C, payload: z.input<C['request']>, options: RequestOptions): Promise<ReplyOf<C>> {
    if (options.retryUntil === undefined) {
      options.onTryStarted?.(Date.now());
      return this.once(contract, payload, options);
    }
    const { abandon } = options;
    const given = typeof options.retryUntil === 'function' ? options.retryUntil : () => options.retryUntil as number;
    let outage = 0;
    // When the last try found nobody serving: from then to the next try's start is all outage — the
    // pause and however late a busy process woke from it.
    let outageSince: number | null = null;
    const deadline = () => given() + outage;
    const backoff = options.retryBackoff ?? DEFAULT_RETRY_BACKOFF;
    const timeoutMs = options.timeoutMs ?? 10_000;
    for (let tries = 1; ; tries++) {
      const tryStart = Date.now();
      if (outageSince !== null) {
        outage += tryStart - outageSince;
        options.onClockStopped?.(tryStart - outageSince);
      }
      outageSince = null;
      const left = deadline() - tryStart;
      options.onTryStarted?.(tryStart);
      try {
        // After an outage the service has a whole try to answer: its deadline was resumed with it.
        return await this.once(contract, payload, { ...options, timeoutMs: outage > 0 ? timeoutMs : Math.max(100, Math.min(timeoutMs, left)) });
      } catch (error) {
        if (!isTransient(error) || options.signal?.aborted || abandon?.aborted) throw error;
        const pause = Math.min(backoff.maxMs, backoff.initialMs * 2 ** Math.min(tries - 1, 20));
        if (options.outagesStopTheClock && nobodyServed(error)) {
          // Only the time someone served before this try counts: it ends once that has used the deadline.
          if (tryStart >= deadline()) throw error;
          outageSince = tryStart;
        } else if (Date.now() + pause >= deadline()) throw error;
        await sleep(pause, options.signal, abandon);
        if (abandon?.aborted) throw error;
      }
    }
  }

  /** One try, given up when `abandon` aborts before its answer came. */
  private once<C extends CommandContract>(contract: C, payload: z.input<C['request']>, options: RequestOptions): Promise<ReplyOf<C>> {
    const { abandon } = options;
    if (!abandon) return this.tryOnce(contract, payload, options);
    const abandoned = () => new GantryError(ErrorCode.TIMEOUT, `${contract.context}.${contract.name} was given up at its deadline before an answer came`);
    if (abandon.aborted) return Promise.reject(abandoned());
    return new Promise((resolve, reject) => {
      const giveUp = () => reject(abandoned());
      abandon.addEventListener('abort', giveUp, { once: true });
      // A reply or an error after the deadline is dropped: the caller has moved on.
      this.tryOnce(contract, payload, options)
        .then(resolve, reject)
        .finally(() => abandon.removeEventListener('abort', giveUp));
    });
  }

  private async tryOnce<C extends CommandContract>(contract: C, payload: z.input<C['request']>, options: RequestOptions): Promise<ReplyOf<C>> {
    const parsed = contract.request.safeParse(payload);
    if (!parsed.success) throw invalidCommand(parsed.error, `${contract.context}.${contract.name} request`);
    const about = contract.affinity?.request?.(parsed.data);
    const replica = about === undefined ? undefined : this.replicas.get(about);
    const headers = natsHeaders();
    headers.set(CORRELATION_HEADER, options.correlationId ?? randomUUID());
    const data = JSON.stringify(payload, this.replacer);
    const timeout = options.timeoutMs ?? 10_000;
    let msg: Msg;
    try {
      try {
        const subject = replica ? replicaCommandSubject(this.bus.naming, contract.context, contract.name, replica) : commandSubject(this.bus.naming, contract.context, contract.name);
        msg = await this.bus.nc.request(subject, data, { timeout, headers });
      } catch (error) {
        if (!replica) throw error;
        // The replica is gone (or stopped listening): any other may answer; it did not get this one.
        // A replica that got it and did not answer in time is left to the caller's retry, as always.
        this.replicas.delete(about!);
        if (!isNoResponders(error)) throw error;
        msg = await this.bus.nc.request(commandSubject(this.bus.naming, contract.context, contract.name), data, { timeout, headers });
      }
    } catch (error) {
      const text = String((error as Error)?.message ?? error);
      if (isNoResponders(error)) {
        // Nobody listens on the command's subject: the service is not running, or it runs and does
        // not serve this command (a caller newer than the service, a name it never had). Only the
        // first may end by waiting; the second is refused, as sending it again would never help.
        const served = await this.servedCommands(contract.context, Math.min(timeout, SERVED_COMMANDS_TIMEOUT_MS));
        if (served !== null && !served.includes(contract.name)) {
          throw new GantryError(
            ErrorCode.INVALID_COMMAND,
            `${contract.context}.${contract.name}: the ${contract.context} service that runs does not serve this command (is it an older version than its caller?); sending it again will not help`,
            { command: `${contract.context}.${contract.name}`, served },
          );
        }
        const notServed = new GantryError(ErrorCode.UNAVAILABLE, `no ${contract.context} service is answering ${contract.name}`);
        unserved.add(notServed);
        throw notServed;
      }
      if (/timeout/i.test(text)) {
        throw new GantryError(ErrorCode.TIMEOUT, `${contract.context}.${contract.name} got no reply in time`);
      }
      // Refused by the client before anything was sent: the request itself is larger than NATS carries.
      if (/max_payload/i.test(text)) {
        throw new GantryError(ErrorCode.INVALID_COMMAND, `${contract.context}.${contract.name}: the request (${Buffer.byteLength(data)} bytes) is larger than NATS carries (${this.bus.nc.info?.max_payload ?? 'max_payload'}); nothing was sent`);
      }
      // The connection is closed or reconnecting: nothing reached a service, or its answer is lost.
      if (/closed|disconnect|reconnect/i.test(text)) {
        throw new GantryError(ErrorCode.UNAVAILABLE, `${contract.context}.${contract.name}: NATS is not reachable (${text})`);
      }
      throw error;
    }
    const reply = commandReplySchema(contract.reply).safeParse(JSON.parse(textDecoder.decode(msg.data)));
    if (!reply.success) {
      throw new GantryError(ErrorCode.INTERNAL, `malformed reply to ${contract.context}.${contract.name}`, undefined,
        reply.error.issues.map((i) => ({ path: i.path.map(String), message: i.message, code: i.code })));
    }
    // A token that is not one subject token (a responder that is not a Gantry replica) is not remembered.
    const answeredBy = msg.headers?.get(REPLICA_HEADER);
    if (answeredBy && isSubjectToken(answeredBy) && contract.affinity) {
      if (about !== undefined) this.replicas.set(about, answeredBy);
      const next = reply.data.ok ? contract.affinity.reply?.(reply.data.result) : undefined;
      if (next !== undefined) this.replicas.set(next, answeredBy);
    }
    if (!reply.data.ok) throw GantryError.fromPayload(reply.data.error);
    return reply.data.result as ReplyOf<C>;
  }

  /** The commands a replica of `context`'s service says it serves; null when none answers (or not in time). */
  private async servedCommands(context: Context, timeout: number): Promise<string[] | null> {
    try {
      const msg = await this.bus.nc.request(servedCommandsSubject(this.bus.naming, context), '', { timeout });
      const served = ServedCommandsReplySchema.safeParse(JSON.parse(textDecoder.decode(msg.data)));
      return served.success ? served.data.commands : null;
    } catch {
      return null;
    }
  }
}

/** How long a caller told that nobody serves a command waits for the service to say what it serves. */
const SERVED_COMMANDS_TIMEOUT_MS = 2000;

/**
 * The UNAVAILABLEs that NATS itself answered — nobody listens on the subject — as against those a
 * service answered or a connection that is lost: only these stop a lease's clock (`outagesStopTheClock`).
 */
const unserved = new WeakSet<GantryError>();

/** NATS answered at once that nobody listens on the subject. */
function isNoResponders(error: unknown): boolean {
  return /no responders/i.test(String((error as Error)?.message ?? error)) || (error as { code?: string }).code === '503';
}

/**
 * The TIMEOUTs and UNAVAILABLEs a request ended with: the service out of reach — nobody serving, no
 * answer in time, NATS away — or saying so itself (its database out of reach, or it is stopping), as
 * against the same codes an error of this process's own bears (a git that is not installed).
 */
const outOfReachAnswers = new WeakSet<GantryError>();

/** A request to another service ended with it out of reach (see outOfReachAnswers): asking again later may be answered. */
export function serviceOutOfReach(error: unknown): boolean {
  return error instanceof GantryError && outOfReachAnswers.has(error);
}

/** NATS answered this request's try that nobody serves its command: the service is not running. */
export function nobodyServed(error: unknown): boolean {
  return error instanceof GantryError && unserved.has(error);
}

/** Things whose replica a client remembers, at most (the most recent): a runner's jobs, a benchmark's. */
const REMEMBERED_REPLICAS = 10_000;

/** A pause that either signal cuts short. */
function sleep(ms: number, ...signals: (AbortSignal | undefined)[]): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      for (const signal of signals) signal?.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    for (const signal of signals) signal?.addEventListener('abort', done, { once: true });
  });
}
