import { contractRegistry, isGantryError, type Context, type ErrorCode } from '@gantry/contracts';

/*
 * Emmett's DeciderSpecification for the deciders of every service:
 *   const spec = deciderSpec(decider, { validate });
 *   spec.given(events).when(command).then(events)
 *   spec.given(events).when(command).thenNothing()
 *   spec.given(events).when(command).thenThrows(ErrorCode.STALE_FENCE, /message/)
 * Test-only: it calls Jest's `expect`. Imported as `@gantry/testing/decider-spec`, so a domain
 * specification does not pull in the database and NATS helpers of the package index.
 */

export interface SpecifiedDecider<Command, State, Event> {
  initialState: State;
  decide(command: Command, state: State): Event[];
  evolve(state: State, event: Event): State;
}

export interface DeciderThen<State, Event> {
  /** The command emits exactly these events, in this order; returns the state after them. */
  then(expected: Event[]): State;
  /** The command emits nothing (an idempotent repeat, a no-op). */
  thenNothing(): void;
  /** The command is refused with this code (and a message matching, if given), emitting nothing. */
  thenThrows(code: ErrorCode, message?: RegExp | string): void;
}

export function deciderSpec<Command, State, Event>(
  decider: SpecifiedDecider<Command, State, Event>,
  options: { validate?: (event: Event) => void } = {},
) {
  return {
    given(history: Event[]) {
      history.forEach((e) => options.validate?.(e));
      const state = history.reduce((s, e) => decider.evolve(s, e), decider.initialState);
      return {
        state,
        when(command: Command): DeciderThen<State, Event> {
          const run = () => decider.decide(command, state);
          return {
            then(expected) {
              const decided = run();
              expect(decided).toEqual(expected);
              decided.forEach((e) => options.validate?.(e));
              return decided.reduce((s, e) => decider.evolve(s, e), state);
            },
            thenNothing() {
              expect(run()).toEqual([]);
            },
            thenThrows(code, message) {
              let thrown: unknown;
              let decided: Event[] | undefined;
              try {
                decided = run();
              } catch (error) {
                thrown = error;
              }
              if (thrown === undefined) throw new Error(`expected a refusal with ${code}, but the command emitted ${JSON.stringify(decided)}`);
              if (!isGantryError(thrown)) throw thrown;
              expect(thrown.code).toBe(code);
              if (message !== undefined) expect(thrown.message).toMatch(message);
            },
          };
        },
      };
    },
  };
}

/**
 * A `validate` option that parses each event with its registered contract (schema version 1), so a
 * specification fails on an event the wire would refuse.
 */
export function validatesAgainstContract(context: Context) {
  return (event: { type: string; data: unknown }): void => {
    const contract = contractRegistry.event(context, event.type, 1);
    if (!contract) throw new Error(`no contract for ${context}.${event.type}@1`);
    const parsed = contract.data.safeParse(event.data);
    if (!parsed.success) {
      throw new Error(`${event.type} does not satisfy its contract: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
    }
  };
}
