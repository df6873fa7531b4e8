import { isGantryError, type ErrorCode } from '@gantry/contracts';

/** The Emmett decider shape, structurally: what a specification needs of an aggregate. */
export interface DeciderLike<Command, State, Event> {
  initialState: State;
  decide(command: Command, state: State): Event[];
  evolve(state: State, event: Event): State;
}

export interface Then<State, Event> {
  /** The command emits exactly these events, in this order. */
  then(expected: Event[]): State;
  /** The command is refused with this code (and a message matching `message`, if given), emitting nothing. */
  thenThrows(code: ErrorCode, message?: RegExp | string): void;
}

/**
 * `specFor(decider)` gives `given(events).when(command).then(events)` / `.thenThrows(code)`,
 * the form every decider specification here is written in. `then` returns the state after the
 * new events, for the rare spec that must look at it. `validate` sees every event of the history
 * and every decided one (e.g. parse it with its contract, so the domain never emits what the wire refuses).
 */
export function specFor<Command, State, Event>(
  decider: DeciderLike<Command, State, Event>,
  options: { validate?: (event: Event) => void } = {},
) {
  return function given(history: Event[]) {
    history.forEach((e) => options.validate?.(e));
    const state = history.reduce((s, e) => decider.evolve(s, e), decider.initialState);
    return {
      when(command: Command): Then<State, Event> {
        return {
          then(expected: Event[]): State {
            const decided = decider.decide(command, state);
            expect(decided).toEqual(expected);
            decided.forEach((e) => options.validate?.(e));
            return decided.reduce((s, e) => decider.evolve(s, e), state);
          },
          thenThrows(code: ErrorCode, message?: RegExp | string): void {
            let thrown: unknown;
            let decided: Event[] | undefined;
            try {
              decided = decider.decide(command, state);
            } catch (error) {
              thrown = error;
            }
            if (thrown === undefined) {
              throw new Error(`expected a refusal with ${code}, but the command emitted ${JSON.stringify(decided?.map((e) => (e as { type?: string }).type))}`);
            }
            if (!isGantryError(thrown)) throw thrown;
            expect(thrown.code).toBe(code);
            if (message !== undefined) expect(thrown.message).toMatch(message);
          },
        };
      },
    };
  };
}
