import { withTransaction } from './database.js';
import type { EventStore } from './event-store.js';
import { project, type Projection } from './projection.js';

/**
 * Drops the projections' rows and replays the whole log into them, in one transaction. Appends
 * wait for it (SHARE lock on events), so the rebuilt tables are exactly what the live ones would
 * be. Events go to each projection a batch at a time (see Projection.applyMany): a state projection
 * reads and writes once per batch rather than once per event.
 */
export async function rebuildProjections(store: EventStore, projections: readonly Projection[], batchSize = 10_000): Promise<number> {
  return withTransaction(store.pool, async (sql) => {
    await sql.query('LOCK TABLE events IN SHARE MODE');
    const tables = projections.flatMap((p) => p.tables);
    for (const projection of projections) {
      if (projection.tables.length > 0) await sql.query(`TRUNCATE ${projection.tables.join(', ')}`);
      await sql.query(`DELETE FROM projection_positions WHERE projection = $1`, [projection.name]);
    }
    // Secondary indexes are built once at the end rather than kept up row by row (the primary
    // keys stay: the projections upsert on them). Same transaction: nobody sees the tables without them.
    const { rows: indexes } = await sql.query<{ name: string; definition: string }>(
      `SELECT i.indexname AS name, i.indexdef AS definition FROM pg_indexes i
        WHERE i.schemaname = current_schema() AND i.tablename = ANY($1)
          AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conname = i.indexname AND c.connamespace = current_schema()::regnamespace)`,
      [tables],
    );
    for (const index of indexes) await sql.query(`DROP INDEX ${index.name}`);
    let after = 0;
    let replayed = 0;
    for (;;) {
      const batch = await store.readAll(after, batchSize, sql);
      if (batch.length === 0) break;
      for (const projection of projections) await project(sql, projection, batch);
      replayed += batch.length;
      after = batch[batch.length - 1]!.position;
    }
    for (const index of indexes) await sql.query(index.definition);
    return replayed;
  });
}
