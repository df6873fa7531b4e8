import { withTransaction } from './database.js';
import type { EventStore } from './event-store.js';
import { applyToProjection, type Projection } from './projection.js';

/**
 * Drops a projection's rows and replays the whole log into it, in one transaction. Appends wait
 * for it (SHARE lock on events), so the rebuilt tables are exactly what the live ones would be.
 */
export async function rebuildProjections(store: EventStore, projections: readonly Projection[], batchSize = 2000): Promise<number> {
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
      for (const event of batch) {
        for (const projection of projections) {
          const outcome = await applyToProjection(sql, projection, event);
          if (outcome !== 'applied') throw new Error(`rebuild of ${projection.name} saw ${outcome} at ${event.streamId}@${event.streamVersion}`);
        }
        replayed++;
      }
      after = batch[batch.length - 1]!.position;
    }
  });
}
