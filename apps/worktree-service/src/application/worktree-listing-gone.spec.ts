import { existsSync, rmSync } from 'node:fs';
import path from 'node:path';
import type { INestApplication } from '@nestjs/common';
import { deriveWorktreeKey, listWorktrees, type WorktreeView } from '@gantry/contracts';
import { readAllPages } from '@gantry/messaging';
import { plainGit as git } from '@gantry/git/testing';
import { acquireForClaimedJob, createWorld, startInProcess, type TestWorld } from './testing/world.js';

/*
 * list_worktrees runs a git status on each worktree of its page, after git's list of them: a
 * worktree evicted in between is gone by the time its status runs (docs/worktrees.md, "Queries").
 * Real git, PostgreSQL and NATS. A locked worktree whose directory is removed stands for that
 * moment: git still lists it, and not as prunable (a locked worktree is never pruned), so its status
 * is asked for and finds no directory — as a status run just after an eviction does.
 */
describe('list_worktrees when a worktree of the page is gone before its status (real git, PostgreSQL and NATS)', () => {
  let world: TestWorld;
  let app: INestApplication;

  beforeAll(async () => {
    world = await createWorld('wt-listgone');
    app = await startInProcess(world);
  });
  afterAll(async () => {
    await app?.close();
    await world?.close();
  });

  const acquire = (branch: string) => acquireForClaimedJob(world, branch);

  it('answers without the gone worktree, on every page, and lists the others once each', async () => {
    const grants = [];
    for (const branch of ['feature/gone-a', 'feature/gone-b', 'feature/gone-c', 'feature/gone-d']) grants.push(await acquire(branch));
    const goneKey = deriveWorktreeKey(world.git.origin, 'feature/gone-b');
    const gone = grants.find((g) => g.worktreeKey === goneKey)!;
    const clonePath = git(gone.path, 'rev-parse', '--path-format=absolute', '--git-common-dir');
    git(clonePath, 'worktree', 'lock', gone.path);
    rmSync(gone.path, { recursive: true, force: true });

    // Still listed by git, and not as prunable: its status is asked for.
    const listed = git(clonePath, 'worktree', 'list', '--porcelain');
    expect(listed).toContain(gone.path);
    expect(listed).not.toContain('prunable');

    const whole = await world.client.request(listWorktrees, { repositoryUrl: world.git.origin, limit: 100 });
    expect(whole.worktrees.map((w) => w.worktreeKey)).not.toContain(goneKey);
    expect(whole.worktrees).toHaveLength(3);
    expect(whole.nextCursor).toBeNull();

    const paged: WorktreeView[] = await readAllPages(
      (cursor) => world.client.request(listWorktrees, { repositoryUrl: world.git.origin, limit: 2, ...(cursor ? { cursor } : {}) }),
      (page) => page.worktrees,
    );
    const others = grants.filter((g) => g.worktreeKey !== goneKey).map((g) => g.worktreeKey).sort();
    expect(paged.map((w) => w.worktreeKey)).toEqual(others);
    expect(paged.every((w) => w.dirty === false)).toBe(true);
  }, 120_000);

  it('lists a worktree whose .git file an agent deleted as there, not prunable: the service repairs it before it prunes or uses it', async () => {
    const grant = await acquire('feature/gitlink-listed');
    rmSync(path.join(grant.path, '.git'));

    const { worktrees } = await world.client.request(listWorktrees, { repositoryUrl: world.git.origin, limit: 100 });
    // Its directory is there and its lease holds it; whether it is dirty git cannot say before the repair.
    expect(worktrees.find((w) => w.worktreeKey === grant.worktreeKey)).toMatchObject({ path: grant.path, heldBy: grant.leaseId, prunable: false, dirty: null });
    expect(existsSync(grant.path)).toBe(true);
  }, 120_000);
});
