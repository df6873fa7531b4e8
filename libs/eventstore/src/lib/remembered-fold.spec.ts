import { RememberedFold } from './remembered-fold.js';
import type { StoredEvent } from './types.js';

/** A stream's events as the event store hands them over (new objects each time they are read). */
function stream(id: string, amounts: number[], from = 1): StoredEvent[] {
  return amounts.map((amount, i) => ({
    position: 100 + from + i,
    eventId: `${id}-${from + i}`,
    streamId: id,
    streamVersion: from + i,
    type: amount >= 0 ? 'Deposited' : 'Withdrawn',
    schemaVersion: 1,
    data: { amount },
    metadata: { correlationId: 'c', causationId: null, idempotencyKey: null, actor: null },
    occurredAt: '2026-12-05T00:00:00.000Z',
  }));
}

type Account = { balance: number; history: number[] };

describe('RememberedFold', () => {
  let evolved: number;
  let folds: RememberedFold<Account>;
  const plain = (events: StoredEvent[]) => events.reduce<Account>((s, e) => evolveAccount(s, e), { balance: 0, history: [] });
  function evolveAccount(state: Account, event: StoredEvent): Account {
    const { amount } = event.data as { amount: number };
    return { balance: state.balance + amount, history: [...state.history, amount] };
  }

  beforeEach(() => {
    evolved = 0;
    folds = new RememberedFold<Account>(
      (state, event) => {
        evolved++;
        return evolveAccount(state, event);
      },
      { balance: 0, history: [] },
    );
  });

  it('folds a stream it has not seen from its first event', () => {
    const events = stream('a', [5, 7, -3]);
    expect(folds.fold(events)).toEqual(plain(events));
    expect(evolved).toBe(3);
  });

  it('folds the same stream grown by new events from where it ended: one evolve per new event, the same state as a whole fold', () => {
    const events = stream('a', [5, 7, -3]);
    folds.fold(events);
    evolved = 0;
    const grown = [...events, ...stream('a', [10, -1], 4)];
    expect(folds.fold(grown)).toEqual(plain(grown));
    expect(evolved).toBe(2);
    // Folded again as it is: nothing to evolve, the very state it reached.
    evolved = 0;
    expect(folds.fold(grown)).toBe(folds.fold(grown));
    expect(evolved).toBe(0);
  });

  it('keeps streams apart', () => {
    const a = stream('a', [1, 2]);
    const b = stream('b', [100]);
    folds.fold(a);
    folds.fold(b);
    evolved = 0;
    expect(folds.fold([...a, ...stream('a', [3], 3)]).balance).toBe(6);
    expect(folds.fold([...b, ...stream('b', [-50], 2)]).balance).toBe(50);
    expect(evolved).toBe(2);
  });

  it('folds a stream read anew (new objects, the same events) from its first event: nothing is trusted but the objects it folded', () => {
    folds.fold(stream('a', [5, 7, -3]));
    evolved = 0;
    const readAgain = stream('a', [5, 7, -3, 4]);
    expect(folds.fold(readAgain)).toEqual(plain(readAgain));
    expect(evolved).toBe(4);
  });

  it('keeps only the latest state of a stream once a fold met it: a fold that stops short of it starts from the first event', () => {
    const events = stream('a', [5, 7, -3, 4]);
    folds.fold(events.slice(0, 2));
    folds.fold(events);
    folds.fold(events);
    evolved = 0;
    expect(folds.fold(events.slice(0, 2))).toEqual(plain(events.slice(0, 2)));
    expect(evolved).toBe(2);
  });

  it('starts the next fold from a state it was told (remember) once that event is in the stream, and lets the one before go then', () => {
    const events = stream('a', [5, 7]);
    const state = folds.fold(events);
    const next = stream('a', [3], 3)[0]!;
    const after = evolveAccount(state, next);
    folds.remember(next, after, events[1]);
    evolved = 0;
    expect(folds.fold([...events, next])).toBe(after);
    expect(evolved).toBe(0);
    // The state at the earlier event is gone: a fold ending there starts over.
    expect(folds.fold(events)).toEqual(plain(events));
    expect(evolved).toBe(2);
  });

  it('keeps the state before an event it was told of that never joins the stream (a write that failed): the next fold starts there', () => {
    const events = stream('a', [5, 7]);
    const state = folds.fold(events);
    const lost = stream('a', [3], 3)[0]!;
    folds.remember(lost, evolveAccount(state, lost), events[1]);
    evolved = 0;
    // Another writer's event took version 3.
    const theirs = stream('a', [100], 3);
    expect(folds.fold([...events, ...theirs])).toEqual(plain([...events, ...theirs]));
    expect(evolved).toBe(1);
  });

  it('keeps the state a fold started from while no fold has met the state it reached: a fold over events read apart (in a transaction, not remembered) costs the stream as remembered nothing', () => {
    const remembered = stream('a', [5, 7]);
    folds.fold(remembered);
    // A transaction's read: the remembered objects, then its own objects for an event the memory lacks.
    folds.fold([...remembered, ...stream('a', [3], 3)]);
    evolved = 0;
    // The pool's read after the commit: the remembered objects, then new objects for the same event and a later one.
    const committed = [...remembered, ...stream('a', [3, 4], 3)];
    expect(folds.fold(committed)).toEqual(plain(committed));
    expect(evolved).toBe(2);
  });

  it('gives the initial state for a stream with no events', () => {
    expect(folds.fold([])).toEqual({ balance: 0, history: [] });
    expect(evolved).toBe(0);
  });
});
