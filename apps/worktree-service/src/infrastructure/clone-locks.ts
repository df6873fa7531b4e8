import { Inject, Injectable, type OnApplicationShutdown } from '@nestjs/common';
import type pg from 'pg';
import { createPool } from '@gantry/eventstore';
import { SERVICE_CONFIG, type ServiceConfig } from '@gantry/service-runtime';

/** Connections for clone locks: the runs of one clone hold one at a time, so a few serve many clones. */
const CONNECTIONS = 4;

/**
 * The lock that keeps git runs on one shared clone apart between the processes that share the root
 * (docs/worktrees.md, "Replicas"): a PostgreSQL session advisory lock named by the clone's path,
 * held on a connection of its own pool for the length of the run — waiting for one does not take a
 * connection from the service's commands — and gone with the session if the process dies. The name
 * is the absolute path, not the schema: whatever process of this database works on that directory
 * takes turns with the others.
 */
@Injectable()
export class CloneLocks implements OnApplicationShutdown {
  private readonly pool: pg.Pool;

  constructor(@Inject(SERVICE_CONFIG) config: ServiceConfig) {
    this.pool = createPool({ url: config.databaseUrl, schema: config.schema, max: CONNECTIONS, applicationName: `gantry-${config.schema}-clone-locks` });
  }

  async during<T>(clonePath: string, work: () => Promise<T>): Promise<T> {
    const name = `gantry.worktree.clone:${clonePath}`;
    const client = await this.pool.connect();
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

  async onApplicationShutdown(): Promise<void> {
    await this.pool.end();
  }
}
