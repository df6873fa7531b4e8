import type pg from 'pg';
import { copyIn, type CopyValue } from './copy.js';
import type { SqlWriter } from './deferred-writes.js';
import { RememberedFold } from './remembered-fold.js';
import type { StoredEvent } from './types.js';

/**
 * A read model derived from the log. Inline projections are applied in the transaction that
 * appends (once per event, in stream order: the append's compare-and-set makes it so); a rebuild
 * replays the log into them in one transaction. `applyToProjection` is the exactly-once apply for
 * a projection fed from elsewhere (its positions in projection_positions).
 */
export interface Projection {
  name: string;
  /** Tables owned by this projection; a rebuild truncates them. */
  tables: string[];
  /** Event types it cares about; it never sees the others. Omit for all. */
  types?: string[];
  /**
   * The event fields it reads besides position, streamId, streamVersion, type and data; omit when
   * it may read any. A rebuild reads no more of the log than its projections name, and an event it
   * hands over throws on a field it did not read.
   */
  fields?: ReadonlyArray<'eventId' | 'schemaVersion' | 'metadata' | 'occurredAt'>;
  apply(sql: pg.PoolClient, event: StoredEvent): Promise<void>;
  /**
   * Optional, for projections that can do better than one event at a time: apply these events (in
   * log order, any streams). `before(streamId)` returns the stream's events before them when the
   * caller already read them in this transaction (a command that decided on its stream), so the
   * projection need not read its own row back.
   */
  applyMany?(sql: pg.PoolClient, events: StoredEvent[], before?: (streamId: string) => StoredEvent[] | undefined, writer?: SqlWriter): Promise<void>;
  /**
   * Optional, for a rebuild that can do better than a batch at a time (see rebuildProjections):
   * takes the whole log, in order, into its freshly emptied tables.
   */
  replay?(sql: pg.PoolClient, batchSize: number): ProjectionReplay;
}

/** A projection being rebuilt: every event of the log it takes, a batch at a time, then `finish`. */
export interface ProjectionReplay {
  apply(events: StoredEvent[]): Promise<void>;
  /** Writes whatever it still holds. */
  finish(): Promise<void>;
}

/** Whether the projection wants this event at all. */
export function concerns(projection: Projection, event: Pick<StoredEvent, 'type'>): boolean {
  return !projection.types || projection.types.includes(event.type);
}

/**
 * Applies events of one or many streams to a projection, in order, the best way it offers.
 * `writer`: where a projection that only writes (a state projection's save) may send its writes.
 */
export async function project(
  sql: pg.PoolClient,
  projection: Projection,
  events: StoredEvent[],
  before?: (streamId: string) => StoredEvent[] | undefined,
  writer?: SqlWriter,
): Promise<void> {
  const wanted = events.filter((e) => concerns(projection, e));
  if (wanted.length === 0) return;
  if (projection.applyMany) return projection.applyMany(sql, wanted, before, writer);
  for (const event of wanted) await projection.apply(sql, event);
}

/** What a state projection is made of (see stateProjection). */
export interface StateProjectionSpec<State> {
  name: string;
  tables: string[];
  types?: string[];
  fields?: Projection['fields'];
  initialState: State;
  evolve(state: State, event: StoredEvent): State;
  /** The stored states of these streams (those without a row are left out). */
  load(sql: pg.PoolClient, streamIds: string[]): Promise<Map<string, State>>;
  /**
   * Writes the new states; `first` is the stream's first event when this write creates its row.
   * Inside a command the write waits for the commit and goes with it (DeferredWrites): its
   * parameters must be scalars or JSON (see inlineStatement).
   */
  save(sql: SqlWriter, rows: Array<{ streamId: string; state: State; first: StoredEvent | null }>): Promise<void>;
  /**
   * For a rebuild: the row of `table` that `save` would create for this state (null when it
   * writes none), by column name, the same columns for every row. A rebuild with it folds the
   * streams in memory and writes each stream's row once, with COPY, rather than reading and
   * writing its rows every batch. A json/jsonb column takes an object or array (see CopyValue).
   */
  copy?: { table: string; row(state: State, first: StoredEvent): Record<string, CopyValue> | null };
}

/**
 * A projection that keeps one row per stream holding the stream's folded state (plus the columns
 * queries filter on). It applies many events with one read of the rows it lacks and one write:
 * a command that just read its stream reads nothing. A rebuild folds in memory and writes each row
 * once when the spec says how (`copy`), else it reads and writes once per batch.
 */
export function stateProjection<State>(spec: StateProjectionSpec<State>): Projection {
  const types = spec.types ? new Set(spec.types) : null;
  // A command's stream is folded from where the last command's fold of it ended (see RememberedFold).
  const folds = new RememberedFold(spec.evolve, spec.initialState);
  const applyMany = async (sql: pg.PoolClient, events: StoredEvent[], before?: (streamId: string) => StoredEvent[] | undefined, writer?: SqlWriter) => {
    const wanted = types ? events.filter((e) => types.has(e.type)) : events;
    /** Per stream: its state, its first new event, whether it was folded from the command's events (`history`) and the last of them, and its last new event. */
    const streams = new Map<string, { state: State | undefined; first: StoredEvent; history: boolean; folded: StoredEvent | undefined; newest?: StoredEvent }>();
    for (const event of wanted) {
      if (streams.has(event.streamId)) continue;
      const history = before?.(event.streamId);
      const taken = history && types ? history.filter((e) => types.has(e.type)) : history;
      streams.set(event.streamId, { state: taken ? folds.fold(taken) : undefined, first: event, history: taken !== undefined, folded: taken?.[taken.length - 1] });
    }
    const created = new Set<string>();
    const unknown: string[] = [];
    for (const [id, s] of streams) {
      if (s.state === undefined) unknown.push(id);
      else if (before?.(id)?.length === 0) created.add(id);
    }
    if (unknown.length > 0) {
      const stored = await spec.load(sql, unknown);
      for (const id of unknown) {
        const row = stored.get(id);
        streams.get(id)!.state = row ?? spec.initialState;
        if (row === undefined) created.add(id);
      }
    }
    for (const event of wanted) {
      const stream = streams.get(event.streamId)!;
      stream.state = spec.evolve(stream.state as State, event);
      stream.newest = event;
    }
    // The state at the new events, for the command after (as the stream it decides on will end with them).
    for (const stream of streams.values()) if (stream.history) folds.remember(stream.newest!, stream.state as State, stream.folded);
    await spec.save(
      writer ?? sql,
      [...streams.entries()].map(([streamId, s]) => ({ streamId, state: s.state as State, first: created.has(streamId) ? s.first : null })),
    );
  };
  return {
    name: spec.name,
    tables: spec.tables,
    types: spec.types,
    fields: spec.fields,
    apply: (sql, event) => applyMany(sql, [event]),
    applyMany,
    replay: spec.copy ? (sql, batchSize) => replayInMemory(sql, spec, spec.copy!, batchSize) : undefined,
  };
}

/** How many batches' worth of streams a state projection's rebuild holds in memory at most. */
const REPLAY_HELD_BATCHES = 5;

/**
 * A state projection's rebuild: the states are folded in memory, in order of last change (by batch); when more
 * than REPLAY_HELD_BATCHES batches' worth of streams are held, the least recently changed half is
 * written (while the next batches are folded), and the rest at the end. A stream whose events are close
 * together in the log (most are) is written once, by COPY into the emptied table; one that comes
 * back after its row was written is read back and saved again as a command would.
 */
function replayInMemory<State>(
  sql: pg.PoolClient,
  spec: StateProjectionSpec<State>,
  copy: NonNullable<StateProjectionSpec<State>['copy']>,
  batchSize: number,
): ProjectionReplay {
  const types = spec.types ? new Set(spec.types) : null;
  /** Streams whose state is held here, least recently changed first; `first` is set while the stream has no row yet. */
  const held = new Map<string, { state: State; first: StoredEvent | null; batch: number }>();
  let batches = 0;
  /** Streams with a row in the table. */
  const written = new Set<string>();
  let writing: Promise<void> = Promise.resolve();

  const write = async (count: number) => {
    const created: Array<Record<string, CopyValue>> = [];
    const changed: Array<{ streamId: string; state: State; first: StoredEvent | null }> = [];
    for (const [streamId, { state, first }] of held) {
      if (count-- === 0) break;
      held.delete(streamId);
      if (first === null) {
        changed.push({ streamId, state, first: null });
        continue;
      }
      const row = copy.row(state, first);
      if (row === null) continue; // no row: like `save`, nothing is written (and nothing is known about it)
      created.push(row);
      written.add(streamId);
    }
    if (created.length > 0) await copyIn(sql, copy.table, Object.keys(created[0]!), created);
    if (changed.length > 0) await spec.save(sql, changed);
  };

  return {
    async apply(events) {
      const wanted = types ? events.filter((e) => types.has(e.type)) : events;
      let unknown: Set<string> | undefined;
      for (const event of wanted) {
        if (!held.has(event.streamId) && written.has(event.streamId)) (unknown ??= new Set()).add(event.streamId);
      }
      const stored = unknown ? await spec.load(sql, [...unknown]) : undefined;
      batches++;
      for (const event of wanted) {
        let stream = held.get(event.streamId);
        if (stream === undefined) {
          const row = stored?.get(event.streamId);
          stream = row === undefined ? { state: spec.initialState, first: event, batch: batches } : { state: row, first: null, batch: batches };
          held.set(event.streamId, stream);
        } else if (stream.batch !== batches) {
          // To the end: the map is in order of last change (by batch).
          stream.batch = batches;
          held.delete(event.streamId);
          held.set(event.streamId, stream);
        }
        stream.state = spec.evolve(stream.state, event);
      }
      if (held.size > REPLAY_HELD_BATCHES * batchSize) {
        // One write at a time, and it goes on while the next batches are folded (the connection
        // runs its statements in order: a read of rows issued after it sees them).
        await writing;
        writing = write(Math.ceil(held.size / 2));
        writing.catch(() => undefined); // awaited by the next write or finish
      }
    },
    async finish() {
      await writing;
      await write(held.size);
    },
  };
}

export type ApplyOutcome = 'applied' | 'duplicate' | 'gap';

/**
 * Applies one event to a projection exactly once. A version at or below the stored one is a
 * duplicate; a version beyond the next means an earlier event has not arrived yet (a gap), and the
 * caller should retry later rather than apply out of order. Writers of one stream at once take
 * turns on its row in projection_positions, its first event included.
 */
export async function applyToProjection(sql: pg.PoolClient, projection: Projection, event: StoredEvent): Promise<ApplyOutcome> {
  const position = () =>
    sql.query<{ stream_version: number }>(`SELECT stream_version FROM projection_positions WHERE projection = $1 AND stream_id = $2 FOR UPDATE`, [
      projection.name,
      event.streamId,
    ]);
  let current = await position();
  if (current.rows.length === 0) {
    // A stream's first: no row to lock, so two writers would both find nothing applied. The row is
    // claimed (version 0: nothing applied yet) and locked again; a writer that claimed it first and
    // has not committed makes this insert wait for its end, and the lock then reads what it applied.
    await sql.query(`INSERT INTO projection_positions (projection, stream_id, stream_version, position) VALUES ($1, $2, 0, 0) ON CONFLICT DO NOTHING`, [
      projection.name,
      event.streamId,
    ]);
    current = await position();
  }
  const applied = current.rows[0]?.stream_version ?? 0;
  if (event.streamVersion <= applied) return 'duplicate';
  if (event.streamVersion > applied + 1) return 'gap';
  if (!projection.types || projection.types.includes(event.type)) await projection.apply(sql, event);
  await sql.query(
    `INSERT INTO projection_positions (projection, stream_id, stream_version, position) VALUES ($1, $2, $3, $4)
     ON CONFLICT (projection, stream_id) DO UPDATE SET stream_version = EXCLUDED.stream_version, position = EXCLUDED.position`,
    [projection.name, event.streamId, event.streamVersion, event.position],
  );
  return 'applied';
}
