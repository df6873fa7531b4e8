import { stat } from 'node:fs/promises';
import { ErrorCode, GantryError } from '@gantry/contracts';
import { serializedOnClone } from './clone-queue.js';
import { runGit } from '@gantry/git';
import { assertRepositoryUrl, clonePathFor, type GitWorkspace } from './workspace.js';

export interface SharedClone {
  clonePath: string;
  /** True when this call made the clone. */
  created: boolean;
}

async function exists(p: string): Promise<boolean> {
  try {
    await stat(p);
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw error;
  }
}

/**
 * The repository's shared bare clone under `<root>/repos/`, created if missing (init + origin, so a
 * crash half-way leaves something the next call completes) and fetched from the origin into
 * `refs/remotes/origin/*`. Local branches — where worktrees keep their unpushed commits — are never
 * written by the fetch.
 */
export async function ensureSharedClone(workspace: GitWorkspace, repositoryUrl: string): Promise<SharedClone> {
  assertRepositoryUrl(repositoryUrl);
  const clonePath = await clonePathFor(workspace, repositoryUrl);
  return serializedOnClone(clonePath, async () => {
    const timeoutMs = workspace.commandTimeoutMs;
    let created = false;
    if (!(await exists(clonePath))) {
      await runGit(['init', '--quiet', '--bare', '--', clonePath], { timeoutMs });
      created = true;
    } else {
      const bare = await runGit(['-C', clonePath, 'rev-parse', '--is-bare-repository'], { timeoutMs, okExitCodes: [128] });
      if (bare.exitCode !== 0 || bare.stdout.trim() !== 'true') {
        throw new GantryError(ErrorCode.PRECONDITION_FAILED, `${clonePath} exists but is not a bare git repository; refusing to touch it`, {
          clonePath,
        });
      }
    }
    const origin = await runGit(['-C', clonePath, 'config', '--get', 'remote.origin.url'], { timeoutMs, okExitCodes: [1] });
    if (origin.exitCode === 1) {
      await runGit(['-C', clonePath, 'remote', 'add', 'origin', '--', repositoryUrl], { timeoutMs });
    } else if (origin.stdout.trim() !== repositoryUrl) {
      throw new GantryError(ErrorCode.PRECONDITION_FAILED, `${clonePath} fetches from another origin than ${repositoryUrl}`, { clonePath });
    }
    await fetchOriginLocked(workspace, clonePath);
    return { clonePath, created };
  });
}

/** Fetch every branch (and the tags they reach) of the origin; prune branches gone there. */
async function fetchOriginLocked(workspace: GitWorkspace, clonePath: string): Promise<void> {
  await runGit(['-C', clonePath, 'fetch', '--quiet', '--prune', '--no-write-fetch-head', 'origin'], {
    timeoutMs: workspace.networkTimeoutMs,
  });
}
