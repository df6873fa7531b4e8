import { EventPattern, MessagePattern, Ctx, Payload } from '@nestjs/microservices';
import { ROUTE_ARGS_METADATA } from '@nestjs/common/constants.js';
import type pg from 'pg';
import type { CommandContract, Context, EventEnvelope } from '@gantry/contracts';
import type { PayloadFields } from '@gantry/messaging';

/** Marks what the transport serves; the transport refuses handlers without it. */
export type GantryHandler =
  | { kind: 'command'; contract: CommandContract }
  | { kind: 'consumer'; consumer: DurableConsumerOptions };

export interface DurableConsumerOptions {
  /** Durable consumer name; also the inbox scope. Unique per consuming service and purpose. */
  name: string;
  /** Whose events: the stream of this context. */
  source: Context;
  /** One event type, or all of the context's events. (NATS 2.9 takes one filter subject per consumer.) */
  type?: string;
  /**
   * The durable consumer it reads, shared with the service's other consumers of the same source that
   * name it (`SharedDurable`): the source's events are delivered once for all of them. By default it
   * reads a durable of its own, named `name`. Not with `type`.
   */
  durable?: string;
  /**
   * The durable of an older consumer whose work this one, added later, took a part of: created, it
   * starts past what that durable had acknowledged (EventConsumerOptions.startsAfter).
   */
  startsAfter?: string;
  /**
   * The event types the method acts on, when it reads every type of its source: the others are
   * acknowledged without a transaction. Omit for all.
   */
  types?: readonly string[];
  /**
   * The events of a batch the method would do nothing for, asked once per batch (their ids): they
   * are acknowledged without a transaction. Only for facts that never change once true
   * (EventConsumerOptions.unaffected).
   */
  unaffected?: (events: readonly EventEnvelope[], pool: pg.Pool) => Promise<ReadonlySet<string>>;
  /**
   * Events the method has nothing left to do for, told from the payload before it is validated: they
   * are acknowledged like ignored types (EventConsumerOptions.passOver).
   */
  passOver?: (payload: PayloadFields) => boolean;
  /** After this many deliveries a failing message is dead-lettered and terminated (default 10). */
  maxDeliver?: number;
  ackWaitMs?: number;
  backoffMs?: (delivery: number) => number;
  /** Validate `data` against the registered event contract (default true). */
  validate?: boolean;
}

export const commandPattern = (contract: Pick<CommandContract, 'context' | 'name'>) => `command:${contract.context}.${contract.name}`;
export const consumerPattern = (name: string) => `consumer:${name}`;

/**
 * Without parameter decorators Nest hands a microservice handler only its payload; a handler
 * written as `(request, context)` gets both when none are declared.
 */
function payloadAndContextByDefault(target: object, method: string | symbol): void {
  if (Reflect.getMetadata(ROUTE_ARGS_METADATA, target.constructor, method)) return;
  Payload()(target, method, 0);
  Ctx()(target, method, 1);
}

/**
 * Marks a controller method as the handler of one command contract, served on
 * `<root>.<context>.cmd.<name>` (a queue group: any replica answers) and on `POST /commands/<name>`.
 * The request is parsed with the contract before the handler runs and the reply checked after; a
 * thrown GantryError is the refusal. The method receives `(request, context: CommandCallContext)`.
 * The class must be a controller (`@Controller()`, listed in the module's `controllers`).
 */
export function CommandHandler(contract: CommandContract): MethodDecorator {
  const gantry: GantryHandler = { kind: 'command', contract };
  return (target, method, descriptor) => {
    payloadAndContextByDefault(target, method);
    MessagePattern(commandPattern(contract), { gantry })(target, method, descriptor);
  };
}

/**
 * Marks a controller method as the handler of a durable JetStream consumer of `source`'s events.
 * It runs in a PostgreSQL transaction with the inbox insert (`context.sql`), and the event is
 * acknowledged after that commits; throw `RetryLater` to have it redelivered later. The method
 * receives `(event: EventEnvelope, context: ConsumerContext)`. The class must be a controller.
 */
export function DurableConsumer(options: DurableConsumerOptions): MethodDecorator {
  const gantry: GantryHandler = { kind: 'consumer', consumer: options };
  return (target, method, descriptor) => {
    payloadAndContextByDefault(target, method);
    (EventPattern(consumerPattern(options.name), { gantry }) as MethodDecorator)(target, method, descriptor);
  };
}

/** The transport's marker on a handler method, or undefined (used to find handlers outside controllers). */
export function gantryHandlerOf(extras: Record<string, unknown> | undefined): GantryHandler | undefined {
  return extras?.gantry as GantryHandler | undefined;
}
