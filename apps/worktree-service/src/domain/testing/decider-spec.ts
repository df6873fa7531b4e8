import { GantryError, type ErrorCode } from '@gantry/contracts';

/*
 * Decider specifications in the Emmett style:
 *   spec.given(events).when(command).then(events)
 *   spec.given(events).when(command).thenThrows('STALE_FENCE')
 * Used only by tests (it calls Jest's expect).
 */

export interface Decider<Command, Event, State> {
  decide(command: Command, state: State): Event[];
  evolve(state: State, event: Event): State;
  initialState: State;
}

export interface SpecWhen<Event, State> {
  /** The command emits exactly these events; returns the state after them. */
  then(expected: Event[]): State;
  /** The command emits nothing. */
  thenNothing(): void;
  /** The command is refused with a GantryError of this code (and, if given, a message matching). */
  thenThrows(code: ErrorCode, message?: RegExp): GantryError;
}

export function deciderSpec<Command, Event, State>(decider: Decider<Command, Event, State>) {
  return {
    given(history: Event[]) {
      const state = history.reduce(decider.evolve, decider.initialState);
      return {
        state,
        when(command: Command): SpecWhen<Event, State> {
          const run = () => decider.decide(command, state);
          return {
            then(expected) {
              const events = run();
              expect(events).toEqual(expected);
              return events.reduce(decider.evolve, state);
            },
            thenNothing() {
              expect(run()).toEqual([]);
            },
            thenThrows(code, message) {
              let caught: unknown;
              try {
                const events = run();
                caught = new Error(`expected ${code}, but the command emitted ${JSON.stringify(events)}`);
              } catch (error) {
                caught = error;
              }
              expect(caught).toBeInstanceOf(GantryError);
              const error = caught as GantryError;
              expect(error.code).toBe(code);
              if (message) expect(error.message).toMatch(message);
              return error;
            },
          };
        },
      };
    },
  };
}
