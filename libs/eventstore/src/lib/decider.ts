import type pg from 'pg';
import type { EventStore, UnitOfWork } from './event-store.js';
import type { DecisionSpec } from './one-message.js';
import type { StreamWork } from './unit-of-work.js';
import { RememberedFold } from './remembered-fold.js';
import type { ExecuteResult, StoredEvent } from './types.js';

export interface DomainEvent {
  type: string;
  data: unknown;
}

/** Emmett's shape: the aggregate's rules as plain functions; refusals are thrown GantryErrors. */
export interface Decider<Command, State, Event extends DomainEvent> {
  initialState: State;
  decide(command: Command, state: State): Event[];
  evolve(state: State, event: Event): State;
}

export function fold<State, Event extends DomainEvent>(
  decider: Pick<Decider<unknown, State, Event>, 'initialState' | 'evolve'>,
  events: Array<Pick<StoredEvent, 'type' | 'data'>>,
): State {
  return events.reduce((state, e) => decider.evolve(state, { type: e.type, data: e.data } as Event), decider.initialState);
}

/**
 * A stream's events (in order from its first) folded as decideWithin folds them: from where the last
 * fold of the stream by this decider ended (RememberedFold), so a load before a decision, or a load
 * for a query, costs the events since rather than the whole stream. The state returned must not be
 * changed.
 */
export function foldStream<State, Event extends DomainEvent>(decider: Pick<Decider<unknown, State, Event>, 'initialState' | 'evolve'>, events: readonly StoredEvent[]): State {
  return rememberedFold(decider).fold(events);
}

export interface Decision<State, Event extends DomainEvent> {
  /** State before the command. */
  before: State;
  /** State after the new events. */
  after: State;
  decided: Event[];
  appended: StoredEvent[];
  /** Stream version after the append. */
  version: number;
}

/** Loads the stream, decides, and appends at the version it loaded (the append is the compare-and-set). */
export async function decideWithin<Command, State, Event extends DomainEvent>(
  uow: StreamWork,
  decider: Decider<Command, State, Event>,
  streamId: string,
  command: Command,
): Promise<Decision<State, Event>> {
  const history = await uow.readStream(streamId);
  // From where the last fold of this stream ended (RememberedFold). `after` is not kept for the next
  // command: it folds the events appended now as they are stored (their data through JSON, secrets
  // scrubbed), as a fold of the stream read back would.
  const before = rememberedFold(decider).fold(history);
  const decided = decider.decide(command, before);
  const appended = await uow.append(streamId, history.length, decided);
  const after = decided.reduce((s, e) => decider.evolve(s, e), before);
  return { before, after, decided, appended, version: history.length + decided.length };
}

/** Each decider's folds, kept as long as the decider is (see RememberedFold). */
const folds = new WeakMap<object, object>();

function rememberedFold<State, Event extends DomainEvent>(decider: Pick<Decider<unknown, State, Event>, 'initialState' | 'evolve'>): RememberedFold<State> {
  let remembered = folds.get(decider) as RememberedFold<State> | undefined;
  if (!remembered) {
    remembered = new RememberedFold<State>((state, e) => decider.evolve(state, { type: e.type, data: e.data } as Event), decider.initialState);
    folds.set(decider, remembered);
  }
  return remembered;
}

/**
 * One decider command as one idempotent, retried-on-conflict transaction — or, given `within` (a
 * durable consumer's open transaction), as a savepoint inside that one (EventStore.executeWithin).
 */
export async function handleWithDecider<Command, State, Event extends DomainEvent, Result>(
  store: EventStore,
  options: DecisionSpec<Command, State, Event, Result> & { within?: pg.PoolClient },
): Promise<ExecuteResult<Result>> {
  if (!options.within) return store.decide(options);
  const execute = { metadata: options.metadata, idempotency: options.idempotency, streams: [options.streamId] };
  const handler = async (uow: UnitOfWork) => options.reply(await decideWithin(uow, options.decider, options.streamId, options.command));
  return store.executeWithin(options.within, execute, handler);
}
