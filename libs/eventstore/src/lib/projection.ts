import type pg from 'pg';
import type { StoredEvent } from './types.js';

/**
 * A read model derived from the log. `apply` is called at most once per event and per stream in
 * version order (the projection_positions table guards both), inside the transaction given to it.
 */
export interface Projection {
  name: string;
  /** Tables owned by this projection; a rebuild truncates them. */
  tables: string[];
  /** Event types it cares about; others only advance its position. Omit for all. */
  types?: string[];
  apply(sql: pg.PoolClient, event: StoredEvent): Promise<void>;
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
