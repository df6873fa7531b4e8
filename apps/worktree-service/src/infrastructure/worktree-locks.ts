import { Inject, Injectable, type OnApplicationShutdown } from '@nestjs/common';
import type pg from 'pg';
import { createPool } from '@gantry/eventstore';
import { SERVICE_CONFIG, type ServiceConfig } from '@gantry/service-runtime';

/**
 * The locks that keep the replicas of the service apart (docs/worktrees.md, "Replicas"): PostgreSQL
 * session advisory locks, each held on a connection of a pool of its own for the length of the work
 * — waiting for one takes no connection from the service's commands — and gone with the session of a
 * process that dies.
 * - `onClone`: git runs on one shared clone. Named by the clone's absolute path, not the schema:
 *   whatever process of this database works on that directory takes turns with the others.
 * - `onKey`: the effects of one worktree key (one at a time per key, across replicas). Named by the
 *   schema and the key. Held across the effect's git runs, so on a pool apart from the clone locks':
 *   an effect waiting for a clone's lock never holds the connection that lock needs.
 * - `whileStarting`: one replica of the schema at a time decides, at its start, whether the leases
 *   held are resumed (WorktreeRecovery.resumeHeldLeases).
 */
@Injectable()
export class WorktreeLocks implements OnApplicationShutdown {
  private readonly clones: pg.Pool;
  private readonly keys: pg.Pool;

  constructor(@Inject(SERVICE_CONFIG) private readonly config: ServiceConfig) {
    const pool = (max: number, purpose: string) => createPool({ url: config.databaseUrl, schema: config.schema, max, applicationName: `gantry-${config.schema}-${purpose}` });
    // The runs of one clone hold one at a time, so a few serve many clones; past `max`, effects of more keys wait their turn.
    this.clones = pool(4, 'clone-locks');
    this.keys = pool(16, 'key-locks');
  }

  onClone<T>(clonePath: string, work: () => Promise<T>): Promise<T> {
    return during(this.clones, `gantry.worktree.clone:${clonePath}`, work);
  }

  onKey<T>(worktreeKey: string, work: () => Promise<T>): Promise<T> {
    return during(this.keys, `gantry.worktree.effects:${this.config.schema}:${worktreeKey}`, work);
  }

  whileStarting<T>(work: () => Promise<T>): Promise<T> {
    return during(this.keys, `gantry.worktree.start:${this.config.schema}`, work);
  }

  async onApplicationShutdown(): Promise<void> {
    await Promise.all([this.clones.end(), this.keys.end()]);
  }
}

async function during<T>(pool: pg.Pool, name: string, work: () => Promise<T>): Promise<T> {
  const client = await pool.connect();
  let broken: Error | undefined;
  try {
    await client.query(`SELECT pg_advisory_lock(hashtextextended($1, 0))`, [name]);
    try {
      return await work();
    } finally {
      await client.query(`SELECT pg_advisory_unlock(hashtextextended($1, 0))`, [name]).catch((error: Error) => {
        // Not unlocked: the connection is closed rather than handed to another run still holding the lock.
        broken = error;
      });
    }
  } finally {
    client.release(broken);
  }
}
