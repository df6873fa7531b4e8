import { Inject, Injectable, type OnApplicationShutdown } from '@nestjs/common';
import pg from 'pg';
import { createPool } from '@gantry/eventstore';
import { failHereIfAsked, SERVICE_CONFIG, type ServiceConfig } from '@gantry/service-runtime';
import { PR_SERVICE_CONFIG, type PrServiceConfig } from '../pr-service-config.js';

/**
 * What a run learns as it takes the PR's lock. `shownBackRow`: the PR has a `pull_request_shown_back` row. Every run of
 * the PR, on every replica, writes that row only under the lock, so the run keeps this true for itself as it inserts
 * and deletes the row: a read showing the PR where it is deletes a row only when there is one (the pruning job may
 * delete it meanwhile, which at most leaves a DELETE that finds nothing).
 */
export interface UnderLock {
  shownBackRow: boolean;
  /**
   * Set once the lock's connection is lost (its backend terminated, the connection reset: node-postgres reports it on the
   * checked-out client as 'error' and 'end'). The lock ended with its session, and another replica may be working on the
   * PR: the run changes nothing more on GitHub and records nothing more of its own. A session ended on the server before
   * its connection says so is told by `held`.
   */
  readonly lost: Error | null;
  /**
   * An SQL condition, true while the run's lock session still holds the PR's lock (`heldCondition`), for a statement on
   * another connection: the run's own writes on the service's pool are made only under the lock — in the same statement,
   * or in the same transaction after its append. Literals only: it may ride in one message with other statements.
   */
  readonly held: string;
}

/**
 * True while the session `pid`, started at `startedAt` (`extract(epoch FROM backend_start)` as text: a pid alone may be a
 * later session's once the first ended), holds the advisory lock of `key` in this database. PostgreSQL shows a bigint
 * advisory key as its high half in `classid` and its low half in `objid`, with `objsubid` 1. `pg_locks` is the lock
 * table as it is at that moment, not as the statement's snapshot saw it. Both pools connect as the service's role, and
 * PostgreSQL shows a role its own sessions' start.
 */
export function heldCondition(session: { key: string; pid: number; startedAt: string }): string {
  const key = pg.escapeLiteral(session.key);
  const pid = Number(session.pid);
  return `(EXISTS (SELECT 1 FROM pg_locks l
             WHERE l.locktype = 'advisory' AND l.granted AND l.pid = ${pid} AND l.objsubid = 1
               AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
               AND l.classid::bigint = (hashtextextended(${key}, 0) >> 32) & 4294967295
               AND l.objid::bigint = hashtextextended(${key}, 0) & 4294967295)
           AND (SELECT extract(epoch FROM backend_start) FROM pg_stat_get_activity(${pid})) = ${pg.escapeLiteral(session.startedAt)}::numeric)`;
}

/**
 * One run at a time per pull request, across replicas (docs/pr-service.md, "Effects on GitHub"): a PostgreSQL session
 * advisory lock, held for the whole run — GitHub's answers included, which may take minutes — on a connection of a
 * pool of its own, sized to GANTRY_PR_RECONCILE_CONCURRENCY (one connection per run that can be under way), never on
 * the service's pool: there, the runs waiting on a slow GitHub would hold all but a few of its connections, and the
 * webhook endpoint and the consumers would wait for those few.
 *
 * Why a session lock on a pool apart rather than a lease row with a fencing token: what the lock keeps apart is
 * calls to GitHub, which carry no fencing token — a lease that ran out under a slow run would let a second replica
 * enable or merge beside the first, and renewing it would need a heartbeat beside every run. A session lock ends
 * with its session (a process that dies, a connection lost: the server ends it within the keepalive), and costs
 * PostgreSQL GANTRY_PR_RECONCILE_CONCURRENCY more connections per replica (docs/operations.md, "Connections").
 */
@Injectable()
export class PullRequestLocks implements OnApplicationShutdown {
  private readonly pool: pg.Pool;

  constructor(@Inject(SERVICE_CONFIG) config: ServiceConfig, @Inject(PR_SERVICE_CONFIG) prs: PrServiceConfig) {
    this.pool = createPool({
      url: config.databaseUrl,
      schema: config.schema,
      max: prs.reconcileConcurrency,
      applicationName: `pr-service:${config.schema}:pr-locks`,
      timeouts: config.databaseTimeouts,
    });
  }

  /**
   * Runs `work` holding the PR's lock, or answers `'busy'` at once when another session holds it. A lock whose connection
   * is lost while `work` runs is marked `lost` for it (the work ends before its next change on GitHub or record); the connection is
   * dropped from the pool. A query on the lock's connection that failed — the unlock above all — leaves its session in a
   * state not known: it may still hold the lock, and back in the pool it would keep it for as long as the pool keeps the
   * connection, every replica skipping the PR. Such a connection is closed (its session ends, and the lock with it),
   * never reused; an unlock that fails leaves the work's own outcome as it was (`onUnlockFailed` hears of it).
   */
  async whileHeld(pullRequestId: string, work: (underLock: UnderLock) => Promise<void>, onUnlockFailed: (error: unknown) => void): Promise<'ran' | 'busy'> {
    const lock = await this.pool.connect();
    let unknownSession: Error | undefined;
    // Held by no session until the lock is taken.
    const underLock = { shownBackRow: false, lost: null as Error | null, held: 'false' };
    const onLost = (error?: unknown) => {
      underLock.lost ??= error instanceof Error ? error : new Error('the connection of the pull request\'s lock ended');
    };
    lock.on('error', onLost);
    lock.on('end', onLost);
    const onLock = async <R>(run: () => Promise<R>, faultPoint?: string): Promise<R> => {
      try {
        if (faultPoint) failHereIfAsked(faultPoint);
        return await run();
      } catch (error) {
        unknownSession = error instanceof Error ? error : new Error(String(error));
        throw error;
      }
    };
    try {
      // Two statements in one round trip (the simple protocol, hence the literal): the second takes its snapshot after
      // the first took the lock, so it sees the row of every run before — as one statement it could miss a row written
      // by a run that unlocked between the statement's snapshot and its lock. The first also names the session that holds
      // the lock, which the run's writes on the service's pool check (UnderLock.held).
      const id = lock.escapeLiteral(pullRequestId);
      const [taken, shown] = await onLock(
        () =>
          lock.query(
            `SELECT pg_try_advisory_lock(hashtextextended(${id}, 0)) AS locked, pg_backend_pid() AS pid,
                    (SELECT extract(epoch FROM backend_start) FROM pg_stat_get_activity(pg_backend_pid()))::text AS started_at;
             SELECT EXISTS (SELECT 1 FROM pull_request_shown_back WHERE pull_request_id = ${id}) AS shown_back`,
          ) as unknown as Promise<[pg.QueryResult<{ locked: boolean; pid: number; started_at: string }>, pg.QueryResult<{ shown_back: boolean }>]>,
      );
      if (!taken.rows[0]?.locked) return 'busy';
      underLock.held = heldCondition({ key: pullRequestId, pid: taken.rows[0].pid, startedAt: taken.rows[0].started_at });
      underLock.shownBackRow = shown.rows[0]?.shown_back === true;
      try {
        await work(underLock);
      } finally {
        // A lost connection took the lock with its session: there is nothing to unlock.
        if (!underLock.lost) {
          await onLock(() => lock.query(`SELECT pg_advisory_unlock(hashtextextended($1, 0))`, [pullRequestId]), 'pr-service:advisory-unlock').catch(onUnlockFailed);
        }
      }
      return 'ran';
    } finally {
      lock.off('error', onLost);
      lock.off('end', onLost);
      lock.release(unknownSession ?? underLock.lost ?? undefined);
    }
  }

  async onApplicationShutdown(): Promise<void> {
    await this.pool.end();
  }
}
