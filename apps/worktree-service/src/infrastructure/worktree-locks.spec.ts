import { execFileSync } from 'node:child_process';
import { closeSync, constants, existsSync, openSync, readdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import { ErrorCode, GantryError } from '@gantry/contracts';
import { outOfReachOf } from '@gantry/messaging';
import { createGitFixture, plainGit as git, type GitFixture } from '@gantry/git/testing';
import type { ServiceConfig } from '@gantry/service-runtime';
import { eventually, processesWith, startCuttableProxy, testDatabaseUrl, uniqueName } from '@gantry/testing';
import { ensureSharedClone, openGitWorkspace } from './git/index.js';
import { isLockOrDatabaseOutage, LockConnectionLost, LockUnavailable, WorktreeLocks } from './worktree-locks.js';

/*
 * The replicas' locks when the connection holding one is lost while its work runs (docs/worktrees.md,
 * "Replicas"): two WorktreeLocks on one schema stand for two replicas, and the lock-holding backend
 * is terminated as PostgreSQL does at a restart.
 */

describe('worktree locks whose connection is lost while their work runs (real PostgreSQL and git)', () => {
  const schema = uniqueName('wt-locklost');
  const config = { databaseUrl: testDatabaseUrl, schema } as ServiceConfig;
  const admin = new pg.Pool({ connectionString: testDatabaseUrl, max: 2 });
  const replicas = [new WorktreeLocks(config), new WorktreeLocks(config)] as const;
  let fx: GitFixture;

  beforeAll(() => {
    fx = createGitFixture();
  });
  afterAll(async () => {
    await Promise.all(replicas.map((replica) => replica.onApplicationShutdown()));
    await admin.end();
    fx?.cleanup();
  });

  /** The backend of a lock pool (`key-locks`, `clone-locks`) that holds an advisory lock now (or, `granted` false, waits for one). */
  const lockHolder = (purpose: string, granted = true): Promise<number> =>
    eventually(
      async () =>
        (
          await admin.query<{ pid: number }>(
            `SELECT a.pid FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid
              WHERE a.application_name = $1 AND l.locktype = 'advisory' AND l.granted = $2`,
            [`gantry-${schema}-${purpose}`, granted],
          )
        ).rows[0]?.pid,
      { what: `a ${purpose} connection ${granted ? 'holding' : 'waiting for'} its lock`, timeoutMs: 30_000 },
    );

  it('tells the work at once and fails it LockConnectionLost even though it returned; the lock is free to another replica meanwhile', async () => {
    const order: string[] = [];
    let secondStarted!: () => void;
    // Without the signal, the work would go on until the other replica ran (or a minute passed).
    const otherReplicaRan = new Promise<void>((resolve) => {
      secondStarted = resolve;
      setTimeout(resolve, 60_000).unref();
    });
    const first = replicas[0]
      .onKey('key-1', async (signal) => {
        order.push('first:start');
        await Promise.race([new Promise((resolve) => signal?.addEventListener('abort', resolve)), otherReplicaRan]);
        order.push('first:end');
        return 'first done';
      })
      .then(
        (value) => ({ value }),
        (error: unknown) => ({ error }),
      );
    const pid = await lockHolder('key-locks');
    await admin.query(`SELECT pg_terminate_backend($1)`, [pid]);
    const second = await replicas[1].onKey('key-1', async () => {
      order.push('second:start');
      secondStarted();
      return 'second done';
    });

    expect(second).toBe('second done');
    // PostgreSQL frees the lock the moment the backend ends (docs/worktrees.md, "A lock whose connection
    // is lost"): the other replica may start before or after the first work hears of it; either way the
    // first work is told and ends, and its outcome is a failure.
    const outcome = await first;
    expect(order[0]).toBe('first:start');
    expect([...order].sort()).toEqual(['first:end', 'first:start', 'second:start']);
    expect(outcome).toEqual({ error: expect.any(LockConnectionLost) });
    const error = (outcome as { error: LockConnectionLost }).error;
    expect(error.code).toBe(ErrorCode.UNAVAILABLE);
    expect(error.message).toMatch(/key-1/);
    // What a durable consumer hands back rather than counts (docs/architecture.md, "Durable consumers").
    expect(outOfReachOf(error)).toBe('database');
    // The replica whose connection was lost takes the lock again on a fresh one.
    expect(await replicas[0].onKey('key-1', async () => 'again')).toBe('again');
  }, 120_000);

  it('fails a caller whose connection is lost while it waits for the lock LockConnectionLost, and leaves the holder alone', async () => {
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const holder = replicas[0].onKey('key-2', async () => {
      await held;
      return 'held';
    });
    try {
      await lockHolder('key-locks');
      const waiting = replicas[1].onKey('key-2', async () => 'ran').then(
        (value) => ({ value }),
        (error: unknown) => ({ error }),
      );
      const waiter = await lockHolder('key-locks', false);
      await admin.query(`SELECT pg_terminate_backend($1)`, [waiter]);
      const outcome = await waiting;
      expect(outcome).toEqual({ error: expect.any(LockConnectionLost) });
      expect((outcome as { error: LockConnectionLost }).error.code).toBe(ErrorCode.UNAVAILABLE);
    } finally {
      release();
    }
    expect(await holder).toBe('held');
  }, 60_000);

  it('fails a lock whose connection cannot be made (the database unreachable) LockUnavailable, retryable, without running the work', async () => {
    const proxy = await startCuttableProxy(testDatabaseUrl);
    const cutAway = new WorktreeLocks({ databaseUrl: proxy.url, schema } as ServiceConfig);
    try {
      proxy.cut();
      let ran = 0;
      const outcomes = await Promise.all(
        [cutAway.onClone('/clone-1', async () => ran++), cutAway.onKey('key-3', async () => ran++), cutAway.whileStarting(async () => ran++)].map((p) =>
          p.then(
            (value) => ({ value }),
            (error: unknown) => ({ error }),
          ),
        ),
      );
      expect(ran).toBe(0);
      for (const outcome of outcomes) {
        expect(outcome).toEqual({ error: expect.any(LockUnavailable) });
        const error = (outcome as { error: LockUnavailable }).error;
        expect(error.code).toBe(ErrorCode.UNAVAILABLE);
        expect(isLockOrDatabaseOutage(error)).toBe(true);
        expect(outOfReachOf(error)).toBe('database');
      }
      // Once the database is back, the same locks are taken.
      proxy.restore();
      expect(await cutAway.onClone('/clone-1', async () => 'ran')).toBe('ran');
    } finally {
      await cutAway.onApplicationShutdown();
      await proxy.close();
    }
  }, 60_000);

  it('a lock lost to a database that goes away while its work runs fails LockConnectionLost, which says the database was out of reach; a failure of the work under the lock does not', async () => {
    const proxy = await startCuttableProxy(testDatabaseUrl);
    const cutAway = new WorktreeLocks({ databaseUrl: proxy.url, schema } as ServiceConfig);
    try {
      const held = cutAway
        .onKey('key-4', (signal) => new Promise((resolve) => signal.addEventListener('abort', resolve)))
        .then(
          (value) => ({ value }),
          (error: unknown) => ({ error }),
        );
      await lockHolder('key-locks');
      proxy.cut();
      const outcome = await held;
      expect(outcome).toEqual({ error: expect.any(LockConnectionLost) });
      expect(outOfReachOf((outcome as { error: LockConnectionLost }).error)).toBe('database');
      proxy.restore();
      // The work's own failures under the lock, even one coded UNAVAILABLE (git not installed), are no outage.
      for (const failure of [new Error('the worktree is corrupt'), new GantryError(ErrorCode.UNAVAILABLE, 'git is not installed on this host')]) {
        const met = await cutAway.onKey('key-4', () => Promise.reject(failure)).catch((error: unknown) => error);
        expect(met).toBe(failure);
        expect(outOfReachOf(met)).toBeNull();
      }
    } finally {
      await cutAway.onApplicationShutdown();
      await proxy.close();
    }
  }, 60_000);

  it('stops the git fetch of a shared clone when the clone lock is lost; the pass fails LockConnectionLost and another replica\'s pass then fetches', async () => {
    const root = path.join(fx.dir, 'worktree-root');
    const [mine, theirs] = await Promise.all(
      replicas.map((locks) => openGitWorkspace(root, { acrossProcesses: (clonePath, work) => locks.onClone(clonePath, work) })),
    );
    const { clonePath } = await ensureSharedClone(mine!, fx.origin);
    const pushed = fx.pushCommit('main', { 'after.txt': 'pushed while the clone was fetched\n' });
    // The clone's refs only in packed-refs, and a pipe nobody writes in its place: git's fetch of the
    // clone blocks opening it, as long as a slow origin would keep it.
    git(clonePath, 'pack-refs', '--all');
    const packedRefs = path.join(clonePath, 'packed-refs');
    renameSync(packedRefs, `${packedRefs}.saved`);
    execFileSync('mkfifo', [packedRefs]);
    try {
      const pass = ensureSharedClone(mine!, fx.origin).then(
        () => null,
        (error: unknown) => error,
      );
      const [fetch] = await eventually(() => {
        const found = processesWith('fetch', fx.origin);
        return found.length > 0 && found;
      }, { what: 'the clone\'s fetch blocked on packed-refs', timeoutMs: 30_000 });
      await admin.query(`SELECT pg_terminate_backend($1)`, [await lockHolder('clone-locks')]);

      // Nothing else could end it: the pipe is never written while it is there.
      await eventually(() => !processesWith('fetch', fx.origin).includes(fetch!), { what: 'the blocked git fetch stopped', timeoutMs: 30_000 });
      expect(existsSync(packedRefs)).toBe(true);
      const error = await pass;
      expect(error).toBeInstanceOf(LockConnectionLost);
      expect((error as LockConnectionLost).code).toBe(ErrorCode.UNAVAILABLE);
    } finally {
      unblock(packedRefs);
      rmSync(packedRefs, { force: true });
      renameSync(`${packedRefs}.saved`, packedRefs);
    }
    // (Asked only now: plain git, run synchronously, would block on the pipe like the fetch.)
    expect(git(clonePath, 'rev-parse', 'refs/remotes/origin/main')).not.toBe(pushed);
    await ensureSharedClone(theirs!, fx.origin);
    expect(git(clonePath, 'rev-parse', 'refs/remotes/origin/main')).toBe(pushed);
  }, 120_000);
});

/** Lets a git still blocked opening the pipe go on (it then reads it empty); nothing when none is. */
function unblock(fifo: string): void {
  try {
    closeSync(openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK));
  } catch {
    // no reader: nothing is blocked on it
  }
}
