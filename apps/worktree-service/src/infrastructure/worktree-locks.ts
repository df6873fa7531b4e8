import { Inject, Injectable, type OnApplicationShutdown } from '@nestjs/common';
import type pg from 'pg';
import { ErrorCode, GantryError } from '@gantry/contracts';
import { createPool, isDatabaseUnreachable } from '@gantry/eventstore';
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
 *   held are resumed (WorktreeRecovery.resumeAtStart, which does it again under the lock if the lock is lost).
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

  onClone<T>(clonePath: string, work: (signal: AbortSignal) => Promise<T>): Promise<T> {
    return during(this.clones, `gantry.worktree.clone:${clonePath}`, work);
  }

  onKey<T>(worktreeKey: string, work: (signal: AbortSignal) => Promise<T>): Promise<T> {
    return during(this.keys, `gantry.worktree.effects:${this.config.schema}:${worktreeKey}`, work);
  }

  whileStarting<T>(work: (signal: AbortSignal) => Promise<T>): Promise<T> {
    return during(this.keys, `gantry.worktree.start:${this.config.schema}`, work);
  }

  async onApplicationShutdown(): Promise<void> {
    await Promise.all([this.clones.end(), this.keys.end()]);
  }
}

/**
 * The lock's connection was lost before the work under it ended (PostgreSQL restarted, the backend
 * terminated, the network cut): the server released the lock at once, so another process may have
 * taken it. The work was told (its signal aborted) and stopped; run it again under the lock.
 * It carries what the connection heard as its `cause`: a durable consumer that meets it hands its
 * event back rather than count it as a failure (`outOfReachOf` follows causes; docs/worktrees.md,
 * "A lock whose connection is lost").
 */
export class LockConnectionLost extends GantryError {
  constructor(lock: string, cause: unknown) {
    const why = cause instanceof Error ? cause.message : 'the connection ended';
    super(ErrorCode.UNAVAILABLE, `the database connection holding the lock ${lock} was lost (${why}); the work under it was stopped and can be run again`, { lock });
    if (cause !== undefined) this.cause = cause;
  }
}

/**
 * The lock could not be asked for: no connection to the database could be had for it (PostgreSQL
 * restarting, the network cut, its connections all taken). Nothing ran under it; run it again once
 * the database is back — a failure of the database, not of the work, which a caller must not record
 * as the work's outcome.
 */
export class LockUnavailable extends GantryError {
  constructor(lock: string, cause: unknown) {
    const why = cause instanceof Error ? cause.message : 'no connection';
    super(ErrorCode.UNAVAILABLE, `the database could not be reached to take the lock ${lock} (${why}); nothing ran under it, and it can be run again`, { lock });
    // Its cause says what kept the connection from being made (an outage, for outOfReachOf, or not: a refused password).
    this.cause = cause;
  }
}

/** A lock's loss or an unreachable database, rather than a failure of the work run under the lock: retried, never recorded. */
export function isLockOrDatabaseOutage(error: unknown): boolean {
  return error instanceof LockConnectionLost || error instanceof LockUnavailable || isDatabaseUnreachable(error);
}

/**
 * Runs `work` holding the lock `name` on a connection of `pool`. The connection is watched while the
 * work runs: once it is lost the lock is no longer ours, so the work's signal aborts at once (its
 * git is stopped) and, once the work has ended, the call fails with LockConnectionLost whatever the
 * work did — its outcome was reached without the lock. A checked-out node-postgres client whose
 * backend goes away emits 'error'; without a listener that would end the whole process.
 */
async function during<T>(pool: pg.Pool, name: string, work: (signal: AbortSignal) => Promise<T>): Promise<T> {
  // Whatever kept the connection from being made, the work never ran: not its failure.
  const client = await pool.connect().catch((error: unknown) => {
    throw new LockUnavailable(name, error);
  });
  const lost = new AbortController();
  const onLost = (cause?: unknown) => {
    if (!lost.signal.aborted) lost.abort(new LockConnectionLost(name, cause));
  };
  const onEnd = () => onLost();
  client.on('error', onLost);
  client.on('end', onEnd);
  let broken: Error | undefined;
  try {
    await client.query(`SELECT pg_advisory_lock(hashtextextended($1, 0))`, [name]).catch((error: Error) => {
      // The wait for the lock can only end this way with its connection gone (the query's failure is
      // heard before the connection's end): retryable, like a loss while holding the lock — not a
      // failure of the work, which a caller would record as the work's outcome.
      broken = error;
      throw lost.signal.aborted ? lost.signal.reason : new LockConnectionLost(name, error);
    });
    let outcome: { value: T } | { error: unknown };
    try {
      outcome = { value: await work(lost.signal) };
    } catch (error) {
      outcome = { error };
    }
    // The lock's loss, not what it did to the work (git killed), is what the caller must hear.
    lost.signal.throwIfAborted();
    await client.query(`SELECT pg_advisory_unlock(hashtextextended($1, 0))`, [name]).catch((error: Error) => {
      // Not unlocked: the connection is closed rather than handed to another run still holding the lock.
      broken = error;
    });
    if ('error' in outcome) throw outcome.error;
    return outcome.value;
  } catch (error) {
    lost.signal.throwIfAborted();
    throw error;
  } finally {
    client.off('error', onLost);
    client.off('end', onEnd);
    client.release(lost.signal.aborted ? (lost.signal.reason as Error) : broken);
  }
}
