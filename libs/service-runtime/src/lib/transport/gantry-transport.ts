import { randomUUID } from 'node:crypto';
import { Server, type CustomTransportStrategy, type MessageHandler } from '@nestjs/microservices';
import { headers as natsHeaders, type Msg, type MsgHdrs, type Subscription } from '@nats-io/transport-node';
import { lastValueFrom } from 'rxjs';
import type pg from 'pg';
import { isDatabaseUnreachable, storableValue } from '@gantry/eventstore';
import {
  commandQueueGroup,
  commandSubject,
  replicaCommandSubject,
  servedCommandsSubject,
  ErrorCode,
  GantryError,
  parseRequest,
  refusalOfReservedKey,
  scrubSecrets,
  scrubStrings,
  type CommandContract,
  type Context,
  type EventEnvelope,
  type ErrorPayload,
  type SecretScrubber,
  type ServedCommandsReply,
  type ValidationIssue,
} from '@gantry/contracts';
import { CORRELATION_HEADER, EventConsumer, REPLICA_HEADER, SharedDurable, withinDrainBound, type BeforeCommit, type Bus, type CommandContext, type CommandReply, type ConsumerLogger } from '@gantry/messaging';
import { observeCommand, observeOutageHandBack, observeSettlement, UNKNOWN_COMMAND } from '../metrics.js';
import { CommandCallContext, ConsumerContext } from './contexts.js';
import { commandPattern, consumerPattern, gantryHandlerOf, type DurableConsumerOptions } from './decorators.js';
import { requestText } from './request-text.js';

export interface GantryTransportOptions {
  bus: Bus;
  /** The consuming service's pool: inbox, dead letters and the consumer handlers' writes share its transactions. */
  pool: pg.Pool;
  /** The bounded context whose commands this service answers. */
  context: Context;
  logger: ConsumerLogger;
  /**
   * Masks secrets in the consumers' dead letters and in the refusals commands answer (a refusal may
   * pass on GitHub's or git's message): the service's scrubber, which its event store uses too.
   */
  scrub?: SecretScrubber;
  /** Commands a replica answers at once; further requests wait in NATS. */
  maxConcurrentCommands: number;
  /** Runs one command or event inside its logging context: `bindings` on every line logged meanwhile. */
  withinLogContext?: <T>(bindings: Record<string, unknown>, work: () => Promise<T>) => Promise<T>;
}

interface CommandRoute {
  contract: CommandContract;
  handler: MessageHandler;
}

/**
 * The NestJS transport of a Gantry service: NATS request/reply for the context's commands (one queue
 * group per context, so any replica answers) and durable JetStream pull consumers for events. Nest
 * registers every `@CommandHandler` / `@DurableConsumer` controller method here (wrapped in its
 * guards, pipes, interceptors and exception filters); a second handler for one command or a second
 * consumer of one name fails the start. `POST /commands/<name>` goes through `dispatch`, the same
 * path as a request over NATS.
 */
export class GantryTransport extends Server implements CustomTransportStrategy {
  // Consumer handlers' failures are ours to settle (nak, dead letter), not Nest's to log.
  override readonly propagatesEventHandlerErrors = true;
  private readonly commands = new Map<string, CommandRoute>();
  private readonly durable: EventConsumer[] = [];
  /** The durables several consumers share, by name. */
  private readonly sharedDurables = new Map<string, SharedDurable>();
  private subscriptions: Subscription[] = [];
  private serving: Promise<void>[] = [];
  private readonly inFlight = new Set<Promise<void>>();
  private listening = false;
  private closing: Promise<void> | null = null;
  /** Work to run as the service begins to serve (beforeServing), in the order it was asked for. */
  private readonly whenServing: Array<() => Promise<void>> = [];
  /**
   * This replica's token: its replies carry it, and it listens on its own subject for each command
   * (replicaCommandSubject), where a caller sends the commands about a thing this replica answered
   * for last (docs/architecture.md, "Replicas").
   */
  readonly replica = randomUUID().replaceAll('-', '').slice(0, 16);
  private readonly replyHeaders: MsgHdrs = natsHeaders();

  constructor(private readonly options: GantryTransportOptions) {
    super();
  }

  get context(): Context {
    return this.options.context;
  }

  get commandNames(): string[] {
    return [...this.commands.keys()];
  }

  /** The service's durable consumers (for readiness and retention). */
  get consumers(): readonly EventConsumer[] {
    return this.durable;
  }

  /**
   * Runs `work` as the service begins to serve: after every start-up hook of its modules (Nest runs
   * `onApplicationBootstrap` before the transport starts), right before its commands are taken; a
   * failure of it fails the start. For work whose time counts from the moment callers can reach the
   * service rather than from an earlier point of a start that may be slow — leases that no holder
   * could renew until now are resumed here (docs/jobs.md, "A job service outage") — and that must be
   * done before the first command is answered. Asked for during the start (`onApplicationBootstrap`).
   */
  beforeServing(work: () => Promise<void>): void {
    if (this.listening) throw new Error('beforeServing is asked for during the start, before the service serves');
    this.whenServing.push(work);
  }

  override addHandler(pattern: unknown, callback: MessageHandler, isEventHandler = false, extras: Record<string, unknown> = {}): void {
    const marker = gantryHandlerOf(extras);
    if (!marker) {
      throw new Error(`the handler of ${JSON.stringify(pattern)} is not a @CommandHandler or @DurableConsumer; this transport serves nothing else`);
    }
    if (marker.kind === 'command') {
      const { contract } = marker;
      if (contract.context !== this.options.context) {
        throw new Error(`command ${contract.context}.${contract.name} does not belong to the ${this.options.context} service`);
      }
      if (this.commands.has(contract.name)) throw new Error(`two handlers for command ${contract.context}.${contract.name}`);
      this.commands.set(contract.name, { contract, handler: callback });
      super.addHandler(commandPattern(contract), callback, isEventHandler, extras);
      return;
    }
    const { consumer } = marker;
    if (this.durable.some((c) => c.name === consumer.name) || this.sharedDurables.has(consumer.name)) {
      throw new Error(`two handlers for durable consumer ${consumer.name}: each would get only some of the events`);
    }
    if (consumer.durable !== undefined && this.durable.some((c) => c.name === consumer.durable)) {
      throw new Error(`consumer ${consumer.name} shares durable ${consumer.durable}, which is another consumer's own`);
    }
    this.durable.push(this.consumerFor(consumer, callback));
    super.addHandler(consumerPattern(consumer.name), callback, isEventHandler, extras);
  }

  async listen(callback: (error?: unknown) => void): Promise<void> {
    try {
      for (const work of this.whenServing.splice(0)) await work();
      const { bus } = this.options;
      const queue = commandQueueGroup(bus.naming, this.options.context);
      this.replyHeaders.set(REPLICA_HEADER, this.replica);
      for (const { contract } of this.commands.values()) {
        const subscriptions = [bus.nc.subscribe(commandSubject(bus.naming, this.options.context, contract.name), { queue })];
        if (contract.affinity) subscriptions.push(bus.nc.subscribe(replicaCommandSubject(bus.naming, this.options.context, contract.name, this.replica)));
        for (const subscription of subscriptions) {
          this.subscriptions.push(subscription);
          this.serving.push(this.serve(subscription, contract.name));
        }
      }
      // After the commands' subscriptions (NATS takes a connection's subscriptions in order): a
      // caller told that nobody listens on a command's subject asks here whether the service runs
      // without that command. Answered even by a service with no commands: then it serves none.
      const served = JSON.stringify({ commands: this.commandNames } satisfies ServedCommandsReply);
      this.subscriptions.push(
        bus.nc.subscribe(servedCommandsSubject(bus.naming, this.options.context), {
          queue,
          callback: (_error, msg) => {
            try {
              msg.respond(served);
            } catch (error) {
              this.options.logger.warn('could not say which commands this service serves', { error: String(error) });
            }
          },
        }),
      );
      // A consumer may start before the service that owns its source stream: create that stream
      // with defaults (its owner sets its limits).
      for (const source of new Set(this.durable.map((c) => c.source))) {
        if (source !== this.options.context) await bus.ensureForeignEventStream(source);
      }
      for (const consumer of this.durable) consumer.start();
      this.listening = true;
      callback();
    } catch (error) {
      callback(error);
    }
  }

  /** Stops taking requests, answers the ones in flight, stops the consumers. Safe to call twice. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      // A subscription whose drain NATS does not confirm (it stopped answering) is let go: its
      // callers get no answer either way, and send again to a replica that runs.
      await Promise.all(
        this.subscriptions.map(async (s) => {
          if (!(await withinDrainBound(s.drain()))) s.unsubscribe();
        }),
      );
      await Promise.all(this.serving);
      await Promise.allSettled([...this.inFlight]);
      await Promise.all(this.durable.map((c) => c.stop()));
      this.subscriptions = [];
      this.serving = [];
      this.listening = false;
    })();
    return this.closing;
  }

  get isListening(): boolean {
    return this.listening;
  }

  on(): never {
    throw new Error('the Gantry transport has no events to listen to');
  }

  unwrap<T>(): T {
    return this.options.bus as T;
  }

  private async serve(subscription: Subscription, name: string): Promise<void> {
    try {
      for await (const msg of subscription) {
        while (this.inFlight.size >= this.options.maxConcurrentCommands) await Promise.race(this.inFlight);
        // answer() turns a handler's failure into a reply; what escapes it must not end this loop.
        const work: Promise<void> = this.answer(msg, name)
          .catch((error: unknown) => this.options.logger.error('command not answered', { command: `${this.options.context}.${name}`, error: String(error) }))
          .finally(() => this.inFlight.delete(work));
        this.inFlight.add(work);
      }
    } catch (error) {
      this.options.logger.error('command subscription ended', { command: `${this.options.context}.${name}`, error: String(error) });
    }
  }

  private async answer(msg: Msg, name: string): Promise<void> {
    const correlationId = msg.headers?.get(CORRELATION_HEADER) || randomUUID();
    const reply = await this.dispatch(name, msg.data, { correlationId, via: msg.subject });
    if (!msg.reply) return;
    const qualified = `${this.options.context}.${name}`;
    const limit = (this.options.bus.nc.info?.max_payload ?? DEFAULT_MAX_PAYLOAD) - REPLY_HEADROOM;
    const fitted = fitReply(reply, limit, qualified);
    if (fitted.cut) {
      this.options.logger.warn(reply.ok ? 'a command succeeded, but its answer is too large for the bus: answered REPLY_TOO_LARGE' : 'a refusal is too large for the bus: its issues were cut', {
        command: qualified,
        correlationId,
        bytes: fitted.cut.bytes,
        limit,
        ...(reply.ok ? {} : { code: reply.error.code, issues: reply.error.issues?.length ?? 0 }),
      });
    }
    try {
      msg.respond(fitted.body, { headers: this.replyHeaders });
    } catch (error) {
      // The caller times out and may send the same request again under its key.
      this.options.logger.warn('could not send a reply', { command: `${this.options.context}.${name}`, correlationId, error: String(error) });
    }
  }

  /**
   * A command from HTTP (`POST /commands/<name>`), answered through `respond`, which settles once the
   * answer is written. It counts as in flight until then, so that close() waits for it before the
   * HTTP server drops its connections; once close() began, it is refused UNAVAILABLE (503), run nowhere,
   * for the caller to send again to a replica that runs (docs/operations.md, "Stopping").
   */
  async answerOverHttp(name: string, body: unknown, call: CommandContext, respond: (reply: CommandReply) => Promise<void>): Promise<void> {
    if (this.closing) {
      await respond({ ok: false, error: { code: ErrorCode.UNAVAILABLE, message: `${this.options.context}.${name}: the service is stopping; send it again` } });
      return;
    }
    const work: Promise<void> = this.dispatch(name, body, call)
      .then(respond)
      .finally(() => this.inFlight.delete(work));
    this.inFlight.add(work);
    await work;
  }

  /**
   * Runs one command from raw bytes (NATS) or an already-decoded value (HTTP); its time and outcome
   * go to the `gantry_command_duration_seconds` metric.
   */
  async dispatch(name: string, raw: Uint8Array | unknown, call: CommandContext): Promise<CommandReply> {
    const started = performance.now();
    const route = this.commands.get(name);
    const reply = await this.run(route, name, raw, call);
    observeCommand(route ? `${this.options.context}.${name}` : UNKNOWN_COMMAND, reply.ok ? 'ok' : reply.error.code, (performance.now() - started) / 1000);
    return reply;
  }

  private async run(route: CommandRoute | undefined, name: string, raw: Uint8Array | unknown, call: CommandContext): Promise<CommandReply> {
    const qualified = `${this.options.context}.${name}`;
    if (!route) return { ok: false, error: { code: ErrorCode.NOT_FOUND, message: `no command ${qualified}` } };
    const decoded = refuseUnsafeShape(decodeRequest(raw, qualified), qualified);
    return this.within({ correlationId: call.correlationId, command: qualified, ...jobIdOf(decoded) }, async () => {
      try {
        if (decoded instanceof GantryError) throw decoded;
        // The handler gets the request's text as PostgreSQL keeps it (a NUL or a lone surrogate as
        // U+FFFD, once its schema has seen and perhaps refused them): an id with one would otherwise
        // fail the handler's queries, and a string with one its writes, as INTERNAL.
        const request = storableValue(parseRequest(route.contract, decoded));
        const result = await this.invoke(route.handler, request, new CommandCallContext([call]));
        const checked = route.contract.reply.safeParse(result);
        if (!checked.success) {
          this.options.logger.error('command reply does not match its contract', { command: qualified, correlationId: call.correlationId, issues: checked.error.issues });
          return { ok: false, error: { code: ErrorCode.INTERNAL, message: `internal error in ${qualified}` } };
        }
        return { ok: true, result: checked.data };
      } catch (error) {
        // As a stored refusal is answered (receipts are scrubbed): its texts may quote what git or GitHub said.
        if (error instanceof GantryError) return { ok: false, error: scrubStrings(error.toPayload(), this.options.scrub ?? scrubSecrets) };
        if (isDatabaseUnreachable(error)) {
          // Not the command's fault: the caller sends it again under its key once the database is back.
          this.options.logger.warn('command failed: the database is not reachable', { command: qualified, correlationId: call.correlationId, error: String(error) });
          return { ok: false, error: { code: ErrorCode.UNAVAILABLE, message: `${qualified}: the service's database is not reachable; send it again` } };
        }
        this.options.logger.error('command failed', {
          command: qualified,
          correlationId: call.correlationId,
          error: error instanceof Error ? { name: error.name, message: error.message, stack: error.stack } : String(error),
        });
        return { ok: false, error: { code: ErrorCode.INTERNAL, message: `internal error in ${qualified}`, details: { correlationId: call.correlationId } } };
      }
    });
  }

  private consumerFor({ durable, ...options }: DurableConsumerOptions, handler: MessageHandler): EventConsumer {
    return new EventConsumer({
      ...options,
      via: durable === undefined ? undefined : this.sharedDurable(durable, options),
      bus: this.options.bus,
      pool: this.options.pool,
      logger: this.options.logger,
      scrub: this.options.scrub,
      handle: async (event: EventEnvelope, sql: pg.PoolClient, beforeCommit: BeforeCommit, batch: readonly EventEnvelope[]) => {
        await this.invoke(handler, event, new ConsumerContext([{ sql, consumer: options.name, event, beforeCommit, batch }]));
      },
      onSettled: (settlement) => observeSettlement(options.name, settlement),
      onOutage: (outOfReach) => observeOutageHandBack(options.name, outOfReach),
      withinEvent: (event, work) =>
        this.within({ correlationId: event.correlationId, consumer: options.name, eventType: event.type, eventId: event.eventId, ...jobIdOf(event.data) }, work),
    });
  }

  private sharedDurable(name: string, member: DurableConsumerOptions): SharedDurable {
    if (member.type !== undefined) throw new Error(`consumer ${member.name} reads only ${member.type}: it cannot share durable ${name}, which reads every type`);
    let shared = this.sharedDurables.get(name);
    if (!shared) {
      shared = new SharedDurable({ name, bus: this.options.bus, source: member.source, logger: this.options.logger });
      this.sharedDurables.set(name, shared);
    }
    return shared;
  }

  /** Calls a handler as Nest wrapped it; its result may be a value, a promise or an observable. */
  private async invoke(handler: MessageHandler, data: unknown, context: CommandCallContext | ConsumerContext): Promise<unknown> {
    return lastValueFrom(this.transformToObservable(await handler(data, context)), { defaultValue: undefined });
  }

  private within<T>(bindings: Record<string, unknown>, work: () => Promise<T>): Promise<T> {
    return this.options.withinLogContext ? this.options.withinLogContext(bindings, work) : work();
  }
}

/** NATS's default max_payload (1 MiB), for a connection that has not heard the server's own yet. */
const DEFAULT_MAX_PAYLOAD = 1024 * 1024;
/** Room kept under max_payload for the reply's headers (the replica's token), which NATS counts in. */
const REPLY_HEADROOM = 1024;
/** A refusal's message and each of its issues' texts are cut to this many characters when the whole is too large. */
const CUT_MESSAGE = 2000;
const CUT_ISSUE_TEXT = 300;
/** A refusal's details are kept when too large only if their JSON is at most this many bytes. */
const CUT_DETAILS_BYTES = 16 * 1024;

const byteLength = (text: string) => Buffer.byteLength(text);
const clip = (text: string, max: number) => (text.length > max ? `${text.slice(0, max - 3)}...` : text);

/**
 * The answer as NATS will carry it, at most `limit` bytes (docs/architecture.md, "Answers too large
 * for the bus"): as it is when it fits; a refusal with its texts shortened and as many of its issues
 * as fit, then one saying how many more there are; a result — the command succeeded — replaced by
 * REPLY_TOO_LARGE, which says so and how to read it. `cut` tells what did not fit, for the log.
 */
export function fitReply(reply: CommandReply, limit: number, qualified: string): { body: string; cut?: { bytes: number } } {
  const body = JSON.stringify(reply);
  const bytes = byteLength(body);
  if (bytes <= limit) return { body };
  if (reply.ok) {
    const error: ErrorPayload = {
      code: ErrorCode.REPLY_TOO_LARGE,
      message:
        `${qualified} succeeded, but its answer (${bytes} bytes) is larger than the bus carries (${limit}); it is not done again by sending ` +
        `the same request, and POST /commands/${qualified.split('.')[1]} on the service's HTTP port answers it in full (a command with an ` +
        `idempotency key answers its stored result there without running again); a query may ask for a smaller page`,
      details: { succeeded: true, bytes, limit },
    };
    return { body: JSON.stringify({ ok: false, error }), cut: { bytes } };
  }
  const { code, message, issues = [], details } = reply.error;
  const keptDetails = details !== undefined && byteLength(JSON.stringify(details)) <= CUT_DETAILS_BYTES ? { details } : {};
  const short = issues.map((i) => ({ ...i, message: clip(i.message, CUT_ISSUE_TEXT), path: i.path.map((p) => (typeof p === 'string' ? clip(p, CUT_ISSUE_TEXT) : p)) }));
  const more = (n: number): ValidationIssue => ({ path: [], message: `and ${n} more issues`, code: 'too_many_issues' });
  // The frame with no issue and the longest "and N more", then each issue (and its comma) while they fit.
  const frame = byteLength(JSON.stringify({ ok: false, error: { code, message: clip(message, CUT_MESSAGE), issues: [more(issues.length)], ...keptDetails } }));
  let used = frame;
  let kept = 0;
  while (kept < short.length) {
    const size = byteLength(JSON.stringify(short[kept])) + 1;
    if (used + size > limit) break;
    used += size;
    kept++;
  }
  const cutIssues = kept < short.length ? [...short.slice(0, kept), more(short.length - kept)] : short;
  const error: ErrorPayload = { code, message: clip(message, CUT_MESSAGE), ...(cutIssues.length > 0 ? { issues: cutIssues } : {}), ...keptDetails };
  return { body: JSON.stringify({ ok: false, error }), cut: { bytes } };
}

/** The job a request or an event is about, when it names one (for the logs). */
function jobIdOf(value: unknown): { jobId?: string } {
  const jobId = value !== null && typeof value === 'object' ? (value as { jobId?: unknown }).jobId : undefined;
  return typeof jobId === 'string' ? { jobId } : {};
}

/** The request as a value, or the refusal of a body that is not UTF-8 JSON text (returned, so it is answered inside the command's log context). */
function decodeRequest(raw: unknown, qualified: string): unknown {
  if (!(raw instanceof Uint8Array)) return raw;
  const read = requestText(raw);
  if ('issue' in read) return new GantryError(ErrorCode.INVALID_COMMAND, `invalid ${qualified} request: ${read.issue.message}`, undefined, [read.issue]);
  try {
    return JSON.parse(read.text);
  } catch {
    return new GantryError(ErrorCode.INVALID_COMMAND, `invalid ${qualified} request: the body is not valid JSON`, undefined, [
      { path: [], message: 'malformed JSON', code: 'invalid_json' },
    ]);
  }
}

/**
 * How deep a request may nest (objects and arrays): far beyond any command's shape, and shallow
 * enough for what walks a request recursively — the idempotency hash, the storable copy, JSON and
 * PostgreSQL — which a free-form field (a job's payload) nested thousands deep would overflow into
 * an INTERNAL error (docs/architecture.md, "Commands").
 */
export const MAX_REQUEST_DEPTH = 100;

/**
 * The value, or (returned, like decodeRequest's) the refusal of one nested deeper than
 * MAX_REQUEST_DEPTH or holding a `__proto__` key (docs/architecture.md, "Commands"); walked without recursion.
 */
function refuseUnsafeShape(value: unknown, qualified: string): unknown {
  if (value instanceof GantryError) return value;
  const pending: [unknown, number][] = [[value, 0]];
  while (pending.length > 0) {
    const [item, depth] = pending.pop()!;
    if (item === null || typeof item !== 'object') continue;
    if (depth >= MAX_REQUEST_DEPTH) {
      return new GantryError(ErrorCode.INVALID_COMMAND, `invalid ${qualified} request: nested deeper than ${MAX_REQUEST_DEPTH} levels`, undefined, [
        { path: [], message: `nested deeper than ${MAX_REQUEST_DEPTH} levels`, code: 'too_deep' },
      ]);
    }
    // A `__proto__` key would be dropped by the request's schema: refused, with its path (a second
    // walk, only for a request that has one).
    if (Object.hasOwn(item, '__proto__')) return refusalOfReservedKey(value, `${qualified} request`) ?? value;
    for (const child of Object.values(item)) pending.push([child, depth + 1]);
  }
  return value;
}
