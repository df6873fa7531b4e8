import { z } from 'zod';
import { isContext, type Context } from './subjects.js';
import { invalidCommand, GantryError, ErrorCode } from './errors.js';
import type { EventEnvelope } from './envelope.js';

export interface Examples<T> {
  /** Inputs the schema must accept. */
  valid: T[];
  /** Inputs the schema must refuse. */
  invalid: unknown[];
}

export interface CommandContract<Req extends z.ZodType = z.ZodType, Res extends z.ZodType = z.ZodType> {
  kind: 'command';
  context: Context;
  name: string;
  request: Req;
  reply: Res;
  examples: Examples<z.input<Req>>;
  /**
   * What the command is about, for a caller that sends the commands about one thing to the replica
   * that answered the last of them (docs/architecture.md, "Replicas"): the key its request names, and
   * the key its reply makes known (a claim's job). Commands about nothing in particular have none.
   */
  affinity?: CommandAffinity<z.output<Req>, z.output<Res>>;
}

export interface CommandAffinity<Request, Reply> {
  request?: (request: Request) => string | undefined;
  reply?: (reply: Reply) => string | undefined;
}

export interface EventContract<Data extends z.ZodType = z.ZodType, Type extends string = string> {
  kind: 'event';
  context: Context;
  type: Type;
  schemaVersion: number;
  data: Data;
  examples: Examples<z.input<Data>>;
}

export type RequestOf<C> = C extends CommandContract<infer Req, z.ZodType> ? z.output<Req> : never;
export type ReplyOf<C> = C extends CommandContract<z.ZodType, infer Res> ? z.output<Res> : never;
export type DataOf<C> = C extends EventContract<infer D> ? z.output<D> : never;
/** An event of contract C as a decider emits it: the contract's type and exactly its data. */
export type EventOf<C> = C extends EventContract<infer D, infer T> ? { type: T; data: z.output<D> } : never;
/** The events of a list of contracts (an aggregate's), as one union discriminated by `type`. */
export type EventsOf<Cs extends readonly EventContract[]> = EventOf<Cs[number]>;
/** The types of a list of event contracts, in its order. */
export function eventTypesOf<const Cs extends readonly EventContract[]>(contracts: Cs): readonly EventsOf<Cs>['type'][] {
  return contracts.map((contract) => contract.type as EventsOf<Cs>['type']);
}

const commands = new Map<string, CommandContract>();
const events = new Map<string, EventContract>();

const commandKey = (context: string, name: string) => `${context}.${name}`;
const eventKey = (context: string, type: string, version: number) => `${context}.${type}@${version}`;

/** The name of one event schema version, as used by the compatibility snapshot: `context.Type@version`. */
export function eventContractKey(contract: Pick<EventContract, 'context' | 'type' | 'schemaVersion'>): string {
  return eventKey(contract.context, contract.type, contract.schemaVersion);
}

/** The name of one command: `context.name`. */
export function commandContractKey(contract: Pick<CommandContract, 'context' | 'name'>): string {
  return commandKey(contract.context, contract.name);
}

export function defineCommand<Req extends z.ZodType, Res extends z.ZodType>(
  spec: Omit<CommandContract<Req, Res>, 'kind'>,
): CommandContract<Req, Res> {
  const key = commandKey(spec.context, spec.name);
  if (!isContext(spec.context)) throw new Error(`command ${key}: unknown context ${spec.context}`);
  if (commands.has(key)) throw new Error(`command ${key} is defined twice`);
  if (!/^[a-z][a-z0-9_]*$/.test(spec.name)) throw new Error(`command name ${spec.name} must be snake_case`);
  const contract = { kind: 'command' as const, ...spec };
  commands.set(key, contract as unknown as CommandContract);
  return contract;
}

export function defineEvent<Data extends z.ZodType, const Type extends string>(spec: Omit<EventContract<Data, Type>, 'kind'>): EventContract<Data, Type> {
  const key = eventKey(spec.context, spec.type, spec.schemaVersion);
  if (!isContext(spec.context)) throw new Error(`event ${key}: unknown context ${spec.context}`);
  if (!Number.isInteger(spec.schemaVersion) || spec.schemaVersion < 1) {
    throw new Error(`event ${key}: schemaVersion must be a whole number ≥ 1`);
  }
  if (events.has(key)) throw new Error(`event ${key} is defined twice`);
  if (!/^[A-Z][A-Za-z0-9]*$/.test(spec.type)) throw new Error(`event type ${spec.type} must be PascalCase`);
  const contract = { kind: 'event' as const, ...spec };
  events.set(key, contract as unknown as EventContract);
  return contract;
}

export const contractRegistry = {
  commands: (): CommandContract[] => [...commands.values()],
  events: (): EventContract[] => [...events.values()],
  command: (context: Context, name: string): CommandContract | undefined => commands.get(commandKey(context, name)),
  event: (context: Context, type: string, schemaVersion: number): EventContract | undefined =>
    events.get(eventKey(context, type, schemaVersion)),
};

/** Parse a command request; a refusal is an INVALID_COMMAND error listing the zod issues. */
export function parseRequest<C extends CommandContract>(contract: C, input: unknown): RequestOf<C> {
  const parsed = contract.request.safeParse(input);
  if (!parsed.success) throw invalidCommand(parsed.error, `${contract.context}.${contract.name} request`);
  return parsed.data as RequestOf<C>;
}

/** Parse the data of an event envelope against its registered contract. */
export function parseEventData(context: Context, envelope: EventEnvelope): unknown {
  const contract = contractRegistry.event(context, envelope.type, envelope.schemaVersion);
  if (!contract) {
    throw new GantryError(
      ErrorCode.INVALID_COMMAND,
      `unknown event ${context}.${envelope.type}@${envelope.schemaVersion}`,
      { context, type: envelope.type, schemaVersion: envelope.schemaVersion },
    );
  }
  const parsed = contract.data.safeParse(envelope.data);
  if (!parsed.success) throw invalidCommand(parsed.error, `${context}.${envelope.type} event`);
  return parsed.data;
}
