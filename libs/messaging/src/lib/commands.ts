import { randomUUID } from 'node:crypto';
import { headers as natsHeaders, type Msg, type Subscription } from '@nats-io/transport-node';
import {
  commandQueueGroup,
  commandSubject,
  ErrorCode,
  GantryError,
  commandReplySchema,
  invalidCommand,
  parseRequest,
  type CommandContract,
  type Context,
  type ErrorPayload,
  type ReplyOf,
  type RequestOf,
} from '@gantry/contracts';
import type { z } from 'zod';
import type { Bus } from './bus.js';

export const CORRELATION_HEADER = 'Gantry-Correlation-Id';

export interface CommandContext {
  correlationId: string;
  /** The subject the request came in on, or `http` for the HTTP route. */
  via: string;
}

export type CommandHandlerFn<C extends CommandContract> = (request: RequestOf<C>, context: CommandContext) => Promise<ReplyOf<C>>;

export type CommandReply = { ok: true; result: unknown } | { ok: false; error: ErrorPayload };

export interface CommandLogger {
  error(message: string, fields: Record<string, unknown>): void;
  warn?(message: string, fields: Record<string, unknown>): void;
}

interface Registration {
  contract: CommandContract;
  handler: CommandHandlerFn<CommandContract>;
}

const textDecoder = new TextDecoder();

/**
 * Answers a context's commands over NATS request/reply (`<root>.<context>.cmd.<name>`, one queue
 * group so any replica may answer). Every request is parsed with its zod contract; every answer is
 * `{ ok: true, result }` or `{ ok: false, error: { code, message, issues? } }`.
 */
export class CommandServer {
  private readonly registrations = new Map<string, Registration>();
  private subscriptions: Subscription[] = [];
  private readonly inFlight = new Set<Promise<void>>();

  constructor(
    private readonly bus: Bus,
    readonly context: Context,
    private readonly logger: CommandLogger,
    private readonly maxConcurrent = Number(process.env.GANTRY_COMMAND_CONCURRENCY ?? 256),
  ) {}

  register<C extends CommandContract>(contract: C, handler: CommandHandlerFn<C>): void {
    if (contract.context !== this.context) {
      throw new Error(`command ${contract.context}.${contract.name} does not belong to the ${this.context} service`);
    }
    if (this.registrations.has(contract.name)) {
      throw new Error(`two handlers for command ${this.context}.${contract.name}`);
    }
    this.registrations.set(contract.name, { contract, handler: handler as CommandHandlerFn<CommandContract> });
  }

  get commandNames(): string[] {
    return [...this.registrations.keys()];
  }

  start(): void {
    const queue = commandQueueGroup(this.bus.naming, this.context);
    for (const { contract } of this.registrations.values()) {
      const subject = commandSubject(this.bus.naming, this.context, contract.name);
      const subscription = this.bus.nc.subscribe(subject, { queue });
      this.subscriptions.push(subscription);
      void this.serve(subscription, contract.name);
    }
  }

  private async serve(subscription: Subscription, name: string): Promise<void> {
    for await (const msg of subscription) {
      while (this.inFlight.size >= this.maxConcurrent) await Promise.race(this.inFlight);
      const work = this.answer(msg, name).finally(() => this.inFlight.delete(work));
      this.inFlight.add(work);
    }
  }

  private async answer(msg: Msg, name: string): Promise<void> {
    const correlationId = msg.headers?.get(CORRELATION_HEADER) || randomUUID();
    const reply = await this.dispatch(name, msg.data, { correlationId, via: msg.subject });
    if (msg.reply) msg.respond(JSON.stringify(reply));
  }

  /** Runs one command from raw bytes or an already-decoded value; used by NATS and by HTTP. */
  async dispatch(name: string, raw: Uint8Array | unknown, context: CommandContext): Promise<CommandReply> {
    const registration = this.registrations.get(name);
    if (!registration) {
      return { ok: false, error: { code: ErrorCode.NOT_FOUND, message: `no command ${this.context}.${name}` } };
    }
    try {
      let input: unknown = raw;
      if (raw instanceof Uint8Array) {
        try {
          input = JSON.parse(textDecoder.decode(raw));
        } catch {
          throw new GantryError(ErrorCode.INVALID_COMMAND, `invalid ${this.context}.${name} request: the body is not valid JSON`, undefined, [
            { path: [], message: 'malformed JSON', code: 'invalid_json' },
          ]);
        }
      }
      const request = parseRequest(registration.contract, input);
      const result = await registration.handler(request, context);
      const checked = registration.contract.reply.safeParse(result);
      if (!checked.success) {
        this.logger.error('command reply does not match its contract', {
          command: `${this.context}.${name}`,
          correlationId: context.correlationId,
          issues: checked.error.issues,
        });
        return { ok: false, error: { code: ErrorCode.INTERNAL, message: `internal error in ${this.context}.${name}` } };
      }
      return { ok: true, result: checked.data };
    } catch (error) {
      if (error instanceof GantryError) return { ok: false, error: error.toPayload() };
      this.logger.error('command failed', {
        command: `${this.context}.${name}`,
        correlationId: context.correlationId,
        error: error instanceof Error ? { name: error.name, message: error.message, stack: error.stack } : String(error),
      });
      return {
        ok: false,
        error: { code: ErrorCode.INTERNAL, message: `internal error in ${this.context}.${name}`, details: { correlationId: context.correlationId } },
      };
    }
  }

  /** Stops taking requests and waits for the ones being answered. */
  async stop(): Promise<void> {
    await Promise.all(this.subscriptions.map((s) => s.drain().catch(() => undefined)));
    this.subscriptions = [];
    await Promise.allSettled([...this.inFlight]);
  }
}

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
  /** Pause between tries: doubles from `initialMs` up to `maxMs`. Default 250 ms → 2 s. */
  retryBackoff?: { initialMs: number; maxMs: number };
  /** Stops retrying (the last error is thrown). */
  signal?: AbortSignal;
}

/** The errors after which a request may have gone unanswered: the same request may be sent again. */
export function isTransient(error: unknown): boolean {
  return error instanceof GantryError && (error.code === ErrorCode.TIMEOUT || error.code === ErrorCode.UNAVAILABLE);
}

/** Sends commands to any context; the request is parsed before sending and the reply after. */
export class CommandClient {
  constructor(private readonly bus: Bus) {}

  /**
   * One command, answered or refused. With `retryUntil`, a request that got no answer is sent again
   * under the same key with a growing pause, each try bounded by `timeoutMs` and by the deadline.
   */
  async request<C extends CommandContract>(contract: C, payload: z.input<C['request']>, options: RequestOptions = {}): Promise<ReplyOf<C>> {
    if (options.retryUntil === undefined) return this.once(contract, payload, options);
    const deadline = typeof options.retryUntil === 'function' ? options.retryUntil : () => options.retryUntil as number;
    const backoff = options.retryBackoff ?? { initialMs: 250, maxMs: 2000 };
    const timeoutMs = options.timeoutMs ?? 10_000;
    for (let tries = 1; ; tries++) {
      const left = deadline() - Date.now();
      try {
        return await this.once(contract, payload, { ...options, timeoutMs: Math.max(100, Math.min(timeoutMs, left)) });
      } catch (error) {
        if (!isTransient(error) || options.signal?.aborted) throw error;
        const pause = Math.min(backoff.maxMs, backoff.initialMs * 2 ** Math.min(tries - 1, 20));
        if (Date.now() + pause >= deadline()) throw error;
        await sleep(pause, options.signal);
      }
    }
  }

  private async once<C extends CommandContract>(contract: C, payload: z.input<C['request']>, options: RequestOptions): Promise<ReplyOf<C>> {
    const parsed = contract.request.safeParse(payload);
    if (!parsed.success) throw invalidCommand(parsed.error, `${contract.context}.${contract.name} request`);
    const subject = commandSubject(this.bus.naming, contract.context, contract.name);
    const headers = natsHeaders();
    headers.set(CORRELATION_HEADER, options.correlationId ?? randomUUID());
    let msg: Msg;
    try {
      msg = await this.bus.nc.request(subject, JSON.stringify(payload), { timeout: options.timeoutMs ?? 10_000, headers });
    } catch (error) {
      const text = String((error as Error)?.message ?? error);
      if (/no responders/i.test(text) || (error as { code?: string }).code === '503') {
        throw new GantryError(ErrorCode.UNAVAILABLE, `no ${contract.context} service is answering ${contract.name}`);
      }
      if (/timeout/i.test(text)) {
        throw new GantryError(ErrorCode.TIMEOUT, `${contract.context}.${contract.name} got no reply in time`);
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
    if (!reply.data.ok) throw GantryError.fromPayload(reply.data.error);
    return reply.data.result as ReplyOf<C>;
  }
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
  });
}
