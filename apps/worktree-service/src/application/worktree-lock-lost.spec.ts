import { execFileSync } from 'node:child_process';
import { closeSync, constants, existsSync, linkSync, openSync, readdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import path from 'node:path';
import type { INestApplication } from '@nestjs/common';
import type pg from 'pg';
import { deriveWorktreeKey, listWorktreeLeases, releaseWorktree, type WorktreeLeaseGrant } from '@gantry/contracts';
import { createPool } from '@gantry/eventstore';
import { eventually, processesWith, startCuttableProxy, testDatabaseUrl } from '@gantry/testing';
import { plainGit as git } from '@gantry/git/testing';
import { clonePathFor } from '../infrastructure/git/workspace.js';
import { GIT_WORKSPACE } from '../infrastructure/workspace.provider.js';
import { WorktreeLocks } from '../infrastructure/worktree-locks.js';
import { acquireForClaimedJob, createWorld, startInProcess, type TestWorld } from './testing/world.js';

/*
 * A lease's create whose lock is lost while its git runs (docs/worktrees.md, "Replicas"): the
 * PostgreSQL backend holding the key's lock, or the clone's, is terminated while the create's fetch
 * of the shared clone is under way.
 */

describe('a worktree effect whose key lock is lost while its git runs (real git, PostgreSQL and NATS)', () => {
  let world: TestWorld;
  let app: INestApplication;
  let n = 0;

  beforeAll(async () => {
    world = await createWorld('wt-locklost');
    app = await startInProcess(world);
  });
  afterAll(async () => {
    await app?.close();
    await world?.close();
  });

  const acquire = (branch: string) => acquireForClaimedJob(world, branch, 120_000);

  // The key's lock, held by the effect; or the clone's, taken inside it for the fetch while the key's stays held.
  it.each(['key-locks', 'clone-locks'])('%s: stops the git, records neither a failure nor an outcome of that run, and the retry under the lock grants the lease', async (purpose) => {
    const warm = await acquire(`feature/warm-${purpose}`);
    await world.client.request(releaseWorktree, { leaseId: warm.leaseId, token: warm.token, idempotencyKey: `release:${++n}` });
    const clonePath = await clonePathFor(app.get(GIT_WORKSPACE), world.git.origin);
    const pushed = world.git.pushCommit('main', { [`${purpose}.txt`]: 'pushed before the lease\n' });
    // The clone's refs only in packed-refs, and a pipe nobody writes in its place: the create's fetch
    // blocks opening it, as long as a slow origin would keep it.
    git(clonePath, 'pack-refs', '--all');
    const packedRefs = path.join(clonePath, 'packed-refs');
    renameSync(packedRefs, `${packedRefs}.saved`);
    execFileSync('mkfifo', [packedRefs]);
    let restored = false;
    const restore = () => {
      if (restored) return;
      restored = true;
      // Put the refs back first (later git reads them), then let a git blocked on the old pipe go on (it reads it empty).
      linkSync(packedRefs, `${packedRefs}.pipe`);
      renameSync(`${packedRefs}.saved`, packedRefs);
      try {
        closeSync(openSync(`${packedRefs}.pipe`, constants.O_WRONLY | constants.O_NONBLOCK));
      } catch {
        // nobody blocked on it
      }
      rmSync(`${packedRefs}.pipe`);
    };
    try {
      const branch = `feature/lost-${purpose}`;
      const worktreeKey = deriveWorktreeKey(world.git.origin, branch);
      const granting = acquire(branch).then(
        (grant) => ({ grant }),
        (error: unknown) => ({ error }),
      );
      const [fetch] = await eventually(() => {
        const found = processesWith('fetch', world.git.origin);
        return found.length > 0 && found;
      }, { what: "the create's fetch blocked on packed-refs", timeoutMs: 60_000 });
      const holder = await eventually(
        async () =>
          (
            await world.db.query<{ pid: number }>(
              `SELECT a.pid FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid
                WHERE a.application_name = $1 AND l.locktype = 'advisory' AND l.granted`,
              [`gantry-${world.name}-${purpose}`],
            )
          ).rows[0]?.pid,
        { what: `the ${purpose} connection holding its lock` },
      );
      await world.db.query(`SELECT pg_terminate_backend($1)`, [holder]);

      // Nothing else could end it: the pipe is never written while it is there.
      await eventually(() => !processesWith('fetch', world.git.origin).includes(fetch!), { what: 'the blocked git fetch stopped', timeoutMs: 30_000 });
      expect(existsSync(`${packedRefs}.saved`)).toBe(true);
      // The effect failed and is run again (its next fetch blocks in turn): nothing of the lost run was recorded.
      await eventually(() => processesWith('fetch', world.git.origin).some((pid) => pid !== fetch), { what: 'the effect run again', timeoutMs: 30_000 });
      const types = async () =>
        (await world.db.query<{ type: string }>(`SELECT type FROM events WHERE starts_with(stream_id, $1) ORDER BY position`, [`worktree-${worktreeKey}`])).rows.map((r) => r.type);
      expect(await types()).not.toContain('WorktreeSyncFailed');
      expect(await types()).not.toContain('WorktreeCreated');
      expect((await world.client.request(listWorktreeLeases, { worktreeKey })).leases.map((l) => l.status)).toEqual(['creating_or_reusing']);

      restore();
      const outcome = await granting;
      expect(outcome).toEqual({ grant: expect.objectContaining({ baseSha: pushed }) });
      const grant = (outcome as { grant: WorktreeLeaseGrant }).grant;
      expect(git(grant.path, 'rev-parse', 'HEAD')).toBe(pushed);
      expect(await types()).not.toContain('WorktreeSyncFailed');
      expect((await types()).filter((type) => type === 'WorktreeCreated')).toHaveLength(1);
    } finally {
      restore();
    }
  }, 180_000);

  // PostgreSQL restarting or cut away just as an effect asks for a clone's lock: the connection for it cannot be made.
  it("a clone lock whose connection cannot be made (the database unreachable): the effect records no sync_failed, and its retry grants the lease once the database is back", async () => {
    const proxy = await startCuttableProxy(testDatabaseUrl);
    // The clone locks' pool of the running service, as WorktreeLocks makes it, reaching PostgreSQL through the proxy.
    const clones = createPool({ url: proxy.url, schema: world.name, max: 4, applicationName: `gantry-${world.name}-clone-locks` });
    let asked = 0;
    const connect = clones.connect.bind(clones) as () => Promise<pg.PoolClient>;
    (clones as unknown as { connect: () => Promise<pg.PoolClient> }).connect = () => {
      asked++;
      return connect();
    };
    const locks = app.get(WorktreeLocks) as unknown as { clones: pg.Pool };
    const original = locks.clones;
    locks.clones = clones;
    try {
      proxy.cut();
      const branch = 'feature/clone-lock-unreachable';
      const worktreeKey = deriveWorktreeKey(world.git.origin, branch);
      const granting = acquire(branch).then(
        (grant) => ({ grant }),
        (error: unknown) => ({ error }),
      );
      const types = async () =>
        (await world.db.query<{ type: string }>(`SELECT type FROM events WHERE starts_with(stream_id, $1) ORDER BY position`, [`worktree-${worktreeKey}`])).rows.map((r) => r.type);
      // Asked for, refused, and asked for again by the effect's retry — or, refused, recorded as the lease's failure.
      await eventually(async () => asked >= 2 || (await types()).includes('WorktreeSyncFailed'), { what: 'the clone lock asked for again, or the lease failed', timeoutMs: 60_000 });
      expect(await types()).not.toContain('WorktreeSyncFailed');
      expect((await world.client.request(listWorktreeLeases, { worktreeKey })).leases.map((l) => l.status)).toEqual(['creating_or_reusing']);

      proxy.restore();
      const outcome = await granting;
      expect(outcome).toEqual({ grant: expect.objectContaining({ worktreeKey }) });
      expect(await types()).not.toContain('WorktreeSyncFailed');
    } finally {
      locks.clones = original;
      await clones.end();
      await proxy.close();
    }
  }, 180_000);
});
