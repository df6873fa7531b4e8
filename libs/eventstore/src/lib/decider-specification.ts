import { isGantryError, type ErrorCode, type GantryError } from '@gantry/contracts';
import type { Decider, DomainEvent } from './decider.js';

export interface DeciderThen<State, Event> {
  /** The command emits exactly these events, in this order; returns the state after them. */
  then(expected: Event[]): State;
  /** The command is accepted and emits nothing. */
  thenNothingHappened(): void;
  /** The command is refused with this code (and a message matching `message`, if given), emitting nothing. */
  thenThrows(code: ErrorCode, message?: RegExp | string): GantryError;
}

export interface DeciderSpecificationOptions<Event> {
  /** Sees every event of the history and every decided one (e.g. parse it with its contract, so the domain never emits what the wire refuses). */
  validate?: (event: Event) => void;
}

/**
 * Specifications of a decider in Emmett's given / when / then form, for tests (it uses Jest's expect):
 *
 *   const given = DeciderSpecification.for(jobDecider);
 *   given([enqueued]).when(claim).then([claimed]);
 *   given([]).when(claim).thenThrows(ErrorCode.NOT_FOUND, /no job/);
 *   given([claimed]).when(sameClaimAgain).thenNothingHappened();
 */
export const DeciderSpecification = {
  for<Command, State, Event extends DomainEvent>(decider: Decider<Command, State, Event>, options: DeciderSpecificationOptions<Event> = {}) {
    return function given(history: Event[]) {
      history.forEach((event) => options.validate?.(event));
      // Every state frozen before it is handed on: an evolve or a decide that changes the state it is
      // given fails here (a command's fold starts from a state an earlier command reached: docs/DEVELOPING.md).
      const evolve = (s: State, e: Event) => frozen(decider.evolve(s, e));
      const state = history.reduce(evolve, frozen(decider.initialState));
      return {
        when(command: Command): DeciderThen<State, Event> {
          return {
            then(expected: Event[]): State {
              const decided = decider.decide(command, state);
              expect(decided).toEqual(expected);
              decided.forEach((event) => options.validate?.(event));
              return decided.reduce(evolve, state);
            },
            thenNothingHappened(): void {
              expect(decider.decide(command, state)).toEqual([]);
            },
            thenThrows(code: ErrorCode, message?: RegExp | string): GantryError {
              let decided: Event[] | undefined;
              try {
                decided = decider.decide(command, state);
              } catch (error) {
                if (!isGantryError(error)) throw error;
                expect(error.code).toBe(code);
                if (message !== undefined) expect(error.message).toMatch(message);
                return error;
              }
              throw new Error(`expected a refusal with ${code}, but the command emitted ${JSON.stringify(decided.map((e) => e.type))}`);
            },
          };
        },
      };
    };
  },
};

/** `value` and everything it holds, frozen (in place). */
function frozen<T>(value: T): T {
  if (value === null || typeof value !== 'object' || Object.isFrozen(value)) return value;
  Object.freeze(value);
  for (const field of Object.values(value)) frozen(field);
  return value;
}
