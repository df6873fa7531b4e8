import { lstatSync, mkdirSync, readdirSync, readFileSync, readlinkSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { INestApplication } from '@nestjs/common';
import { acquireForClaimedJob, createWorld, startInProcess, type TestWorld } from './testing/world.js';

/*
 * The start's reconciliation moves what it finds under `worktrees/` that no clone knows to the
 * quarantine (docs/worktrees.md, "Restart and recovery"). A file there — a worktree an agent replaced
 * by one, anything put there by hand — or a symbolic link was refused as not a directory, and with it
 * every start of the service. They are moved aside too, kept; a link's target is not touched.
 */
describe('entries under worktrees/ that are not directories, at a start', () => {
  let world: TestWorld;
  let app: INestApplication | undefined;

  beforeAll(async () => {
    world = await createWorld('wt-stray');
  });
  afterAll(async () => {
    await app?.close();
    await world?.close();
  });

  it('are moved to the quarantine, kept, and the service starts and leases', async () => {
    const worktrees = path.join(world.root, 'worktrees');
    mkdirSync(worktrees, { recursive: true });
    writeFileSync(path.join(worktrees, 'stray-file'), 'put here by hand\n');
    const outside = path.join(world.git.dir, 'outside');
    mkdirSync(outside);
    writeFileSync(path.join(outside, 'precious.txt'), 'do not touch\n');
    symlinkSync(outside, path.join(worktrees, 'stray-link'));

    app = await startInProcess(world);

    expect(readdirSync(worktrees)).toEqual([]);
    const quarantine = path.join(world.root, 'quarantine');
    const moved = readdirSync(quarantine).sort();
    expect(moved).toHaveLength(2);
    expect(readFileSync(path.join(quarantine, moved.find((name) => name.startsWith('stray-file'))!), 'utf8')).toBe('put here by hand\n');
    const link = path.join(quarantine, moved.find((name) => name.startsWith('stray-link'))!);
    expect(lstatSync(link).isSymbolicLink()).toBe(true);
    expect(readlinkSync(link)).toBe(outside);
    expect(readdirSync(outside)).toEqual(['precious.txt']);
    expect(readFileSync(path.join(outside, 'precious.txt'), 'utf8')).toBe('do not touch\n');
    await acquireForClaimedJob(world, 'feature/after-stray-entries');
  });
});
