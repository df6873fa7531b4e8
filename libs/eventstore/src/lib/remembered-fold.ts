import type { StoredEvent } from './types.js';

/**
 * A fold that starts where the last fold of the same stream ended. Each command folds its stream's
 * events into the state it decides on, and a view the stream feeds folds them again for its row;
 * a stream's events are the same objects from one command of this process to the next (the event
 * store remembers the streams its commands wrote: docs/architecture.md, "Streams this process wrote,
 * not read at all"), and the state at an event never changes (an event is immutable and a stream
 * only ever grows at its end), so the state reached at a stream's last event is kept beside that
 * event and the next fold over the stream starts from it: one `evolve` per new event instead of one
 * per event of the stream, for every command.
 *
 * The states are held weakly, by their events: a stream forgotten takes its state with it, and a
 * fold that reads a stream anew (new objects) starts from its first event. A stream keeps its latest
 * state and the one that fold started from, until a fold meets the latest: a fold over a list whose
 * last events are objects of their own — read inside a transaction that has appended, which the
 * event store does not remember, or a write's events remembered before they commit — must not take
 * from the stream as remembered the state it goes on from, or its next fold starts from its first
 * event. `evolve` must return a new state rather than change the one it is given, and the states a
 * fold returns must not be changed by whoever gets them — as a decider's states are not.
 */
export class RememberedFold<State> {
  /** By event: the stream's state at it, and the event whose state it stands in for once a fold meets it in the stream. */
  private readonly states = new WeakMap<StoredEvent, { state: State; earlier?: StoredEvent }>();

  constructor(
    private readonly evolve: (state: State, event: StoredEvent) => State,
    private readonly initialState: State,
  ) {}

  /**
   * The state after `events`: a stream's events in order from its first, or always the same
   * selection of them (those of the types a view takes), never a stream's events in another order.
   */
  fold(events: readonly StoredEvent[]): State {
    let from = events.length;
    let state = this.initialState;
    for (; from > 0; from--) {
      const known = this.states.get(events[from - 1]!);
      if (known !== undefined) {
        state = known.state;
        // The event it was kept at is the stream's now: the state it stood in for goes.
        if (known.earlier !== undefined) {
          this.states.delete(known.earlier);
          known.earlier = undefined;
        }
        break;
      }
    }
    if (from === events.length) return state;
    for (let i = from; i < events.length; i++) state = this.evolve(state, events[i]!);
    this.states.set(events[events.length - 1]!, { state, earlier: from > 0 ? events[from - 1]! : undefined });
    return state;
  }

  /**
   * Keeps `state` as the stream's state at `event`, an event not yet the stream's (appended by a
   * command whose write has not committed): the state at `earlier`, the stream's last event before
   * it, stays until a fold meets `event` in the stream, so a command that decides again after its
   * write failed still starts from there.
   */
  remember(event: StoredEvent, state: State, earlier?: StoredEvent): void {
    this.states.set(event, { state, earlier });
  }
}
