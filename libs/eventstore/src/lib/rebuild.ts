import { withTransaction } from './database.js';
import type { EventStore } from './event-store.js';
import { project, type Projection } from './projection.js';

/**
 * Drops the projections' rows and replays the whole log into them, in one transaction. Appends
 * wait for it (SHARE lock on events), so the rebuilt tables are exactly what the live ones would
 * be. Events go to each projection a batch at a time (see Projection.applyMany): a state projection
 * reads and writes once per batch rather than once per event.
 */
export async function rebuildProjections(store: EventStore, projections: readonly Projection[], batchSize = 5000): Promise<number> {
  return withTransaction(store.pool, async (sql) => {
    await sql.query('LOCK TABLE events IN SHARE MODE');
    for (const projection of projections) {
      if (projection.tables.length > 0) await sql.query(`TRUNCATE ${projection.tables.join(', ')}`);
      await sql.query(`DELETE FROM projection_positions WHERE projection = $1`, [projection.name]);
    }
    let after = 0;
    let replayed = 0;
    for (;;) {
      const batch = await store.readAll(after, batchSize, sql);
      if (batch.length === 0) return replayed;
      for (const projection of projections) await project(sql, projection, batch);
      replayed += batch.length;
      after = batch[batch.length - 1]!.position;
    }
  });
}
