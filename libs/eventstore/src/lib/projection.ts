import type pg from 'pg';
import type { SqlWriter } from './deferred-writes.js';
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
  apply(sql: pg.PoolClient, event: StoredEvent): Promise<void>;
  /**
   * Optional, for projections that can do better than one event at a time: apply these events (in
   * log order, any streams). `before(streamId)` returns the stream's events before them when the
   * caller already read them in this transaction (a command that decided on its stream), so the
   * projection need not read its own row back.
   */
  applyMany?(sql: pg.PoolClient, events: StoredEvent[], before?: (streamId: string) => StoredEvent[] | undefined, writer?: SqlWriter): Promise<void>;
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

/**
 * A projection that keeps one row per stream holding the stream's folded state (plus the columns
 * queries filter on). It applies many events with one read of the rows it lacks and one write:
 * a command that just read its stream reads nothing, a rebuild reads and writes once per batch.
 */
export function stateProjection<State>(spec: {
  name: string;
  tables: string[];
  types?: string[];
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
}): Projection {
  const applyMany = async (sql: pg.PoolClient, events: StoredEvent[], before?: (streamId: string) => StoredEvent[] | undefined, writer?: SqlWriter) => {
    const types = spec.types ? new Set(spec.types) : null;
    const wanted = types ? events.filter((e) => types.has(e.type)) : events;
    const streams = new Map<string, { state: State | undefined; first: StoredEvent }>();
    for (const event of wanted) {
      if (streams.has(event.streamId)) continue;
      const history = before?.(event.streamId);
      const state = history ? history.filter((e) => !types || types.has(e.type)).reduce(spec.evolve, spec.initialState) : undefined;
      streams.set(event.streamId, { state, first: event });
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
    }
    await spec.save(
      writer ?? sql,
      [...streams.entries()].map(([streamId, s]) => ({ streamId, state: s.state as State, first: created.has(streamId) ? s.first : null })),
    );
  };
  return {
    name: spec.name,
    tables: spec.tables,
    types: spec.types,
    apply: (sql, event) => applyMany(sql, [event]),
    applyMany,
  };
}

export type ApplyOutcome = 'applied' | 'duplicate' | 'gap';

/**
 * Applies one event to a projection exactly once. A version at or below the stored one is a
 * duplicate; a version beyond the next means an earlier event has not arrived yet (a gap), and the
 * caller should retry later rather than apply out of order.
 */
export async function applyToProjection(sql: pg.PoolClient, projection: Projection, event: StoredEvent): Promise<ApplyOutcome> {
  const current = await sql.query<{ stream_version: number }>(
    `SELECT stream_version FROM projection_positions WHERE projection = $1 AND stream_id = $2 FOR UPDATE`,
    [projection.name, event.streamId],
  );
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
