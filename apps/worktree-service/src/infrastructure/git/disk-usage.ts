import { lstat, readdir } from 'node:fs/promises';
import path from 'node:path';
import type { DiskUsage } from '@gantry/contracts';
import type { GitWorkspace } from './workspace.js';

/** Bytes a tree takes on disk (allocated blocks), not following symlinks, not leaving the tree. */
async function bytesOf(p: string): Promise<number> {
  let info;
  try {
    info = await lstat(p);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return 0;
    throw error;
  }
  const own = typeof info.blocks === 'number' && info.blocks > 0 ? info.blocks * 512 : info.size;
  if (!info.isDirectory()) return own;
  let total = own;
  for (const name of await readdir(p).catch(() => [] as string[])) total += await bytesOf(path.join(p, name));
  return total;
}

/** Disk use of the root, per shared clone and per worktree, measured at `now`. */
export async function measureDiskUsage(workspace: GitWorkspace, now: Date): Promise<DiskUsage> {
  const repositories: DiskUsage['repositories'] = [];
  for (const name of (await readdir(workspace.reposDir)).sort()) {
    repositories.push({ name, bytes: await bytesOf(path.join(workspace.reposDir, name)) });
  }
  const worktrees: DiskUsage['worktrees'] = [];
  for (const name of (await readdir(workspace.worktreesDir)).sort()) {
    worktrees.push({ worktreeKey: name, bytes: await bytesOf(path.join(workspace.worktreesDir, name)) });
  }
  return { root: workspace.root, totalBytes: await bytesOf(workspace.root), repositories, worktrees, measuredAt: now.toISOString() };
}
