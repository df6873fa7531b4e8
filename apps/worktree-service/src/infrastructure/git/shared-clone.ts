import { readFile, readdir, rm, rmdir, stat, unlink } from 'node:fs/promises';
import path from 'node:path';
import { canonicalRepositoryUrl, ErrorCode, GantryError } from '@gantry/contracts';
import { serializedOnClone } from './clone-queue.js';
import { runGit } from '@gantry/git';
import { assertRepositoryUrl, clonePathFor, gitOnClone, gitStderr, type GitWorkspace } from './workspace.js';

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

const fetches = { count: 0 };

/** How many fetches of shared clones this process has run (for tests). */
export function sharedCloneFetchCount(): number {
  return fetches.count;
}

/**
 * When the latest whole pass over each clone that succeeded — its checks, then its fetch — began
 * (`performance.now()` of this process): the clone was found sound and the origin's state in it is
 * at least that recent. Passes over a clone run one at a time (serializedOnClone).
 */
const ensuredAt = new Map<string, number>();

/**
 * The repository's shared bare clone under `<root>/repos/`, created if missing (init + origin, so a
 * crash half-way leaves something the next call completes) and fetched from the origin into
 * `refs/remotes/origin/*`. Local branches — where worktrees keep their unpushed commits — are never
 * written by the fetch.
 *
 * The caller gets the clone as of a pass that began after it asked (or after `fetchedSince`, a
 * `performance.now()` reading it gives): one that began while it waited for the clone serves it, and
 * it neither checks nor fetches again. Leases of one repository asked for together share a fetch, and
 * a lease's sync the one its create made (docs/worktrees.md, "What a lease starts from").
 */
export async function ensureSharedClone(
  workspace: GitWorkspace,
  repositoryUrl: string,
  options: { fetchedSince?: number; of?: { worktreeKey: string; branch: string } } = {},
): Promise<SharedClone> {
  const fetchedSince = options.fetchedSince ?? performance.now();
  assertRepositoryUrl(repositoryUrl);
  const clonePath = await clonePathFor(workspace, repositoryUrl, options.of);
  return serializedOnClone(workspace, clonePath, async (workspace) => {
    const timeoutMs = workspace.commandTimeoutMs;
    let created = false;
    const exist = await exists(clonePath);
    if (exist && (ensuredAt.get(clonePath) ?? -Infinity) >= fetchedSince) return { clonePath, created };
    const began = performance.now();
    // Until this pass has succeeded, nobody is served by an earlier one (the clone may be made anew).
    ensuredAt.delete(clonePath);
    if (!exist) {
      await runGit(['init', '--quiet', '--bare', '--', clonePath], { timeoutMs, signal: workspace.signal });
      created = true;
    } else {
      const bare = () => gitOnClone(workspace, clonePath, ['rev-parse', '--is-bare-repository'], { okExitCodes: [128] });
      let answer = await bare();
      if ((answer.exitCode !== 0 || answer.stdout.trim() !== 'true') && (await initKilledHalfWay(clonePath))) {
        // Its lock is no git at work: runs on the clone take turns (serializedOnClone), and this one has not begun its own.
        await rm(path.join(clonePath, 'config.lock'), { force: true });
        await runGit(['init', '--quiet', '--bare', '--', clonePath], { timeoutMs, signal: workspace.signal });
        answer = await bare();
      }
      if (answer.exitCode !== 0 || answer.stdout.trim() !== 'true') {
        throw new GantryError(ErrorCode.PRECONDITION_FAILED, `${clonePath} exists but is not a bare git repository; refusing to touch it`, {
          clonePath,
        });
      }
    }
    const origin = await gitOnClone(workspace, clonePath, ['config', '--get', 'remote.origin.url'], { okExitCodes: [1] });
    if (origin.exitCode === 1) {
      await gitOnClone(workspace, clonePath, ['remote', 'add', 'origin', '--', repositoryUrl]);
    } else if (canonicalRepositoryUrl(origin.stdout.trim()) !== canonicalRepositoryUrl(repositoryUrl)) {
      // The clone's directory is named by the digest of the URL's canonical spelling, so only an agent
      // in a worktree set another repository here: set it back. Another spelling of the same
      // repository (the one that made the clone) is left as it is; the fetch names its own URL.
      await gitOnClone(workspace, clonePath, ['remote', 'set-url', 'origin', '--', repositoryUrl]);
      workspace.onForeignConfigRemoved?.(['remote.origin.url'], clonePath);
    }
    await fetchOriginLocked(workspace, clonePath, repositoryUrl);
    fetches.count++;
    ensuredAt.set(clonePath, began);
    return { clonePath, created };
  });
}

/** What `git init --bare` makes in a new repository's directory. */
const MADE_BY_INIT = new Set(['HEAD', 'branches', 'config', 'config.lock', 'description', 'hooks', 'info', 'objects', 'refs']);

/**
 * A clone's directory that git does not take for a repository and that holds only what `git init
 * --bare` makes, no object among it: an init killed half-way (the service's process group killed
 * during the first lease of a repository), which git init run again completes without losing
 * anything. Left as it was, every lease of the repository was refused for ever. A directory holding
 * anything else is not the service's to touch.
 */
async function initKilledHalfWay(clonePath: string): Promise<boolean> {
  const entries = await readdir(clonePath);
  if (!entries.every((entry) => MADE_BY_INIT.has(entry))) return false;
  const objects = await readdir(path.join(clonePath, 'objects'), { recursive: true, withFileTypes: true }).catch(() => []);
  return objects.every((entry) => entry.isDirectory());
}

/**
 * Fetch every branch (and the tags they reach) of the origin; prune branches gone there. Both the
 * URL and the refspec are given here, not read from the clone's config, which an agent can write:
 * a `remote.origin.fetch` rewritten to `+refs/*:refs/*` would let the fetch (and its prune)
 * overwrite or delete the clone's local branches — the rescue branches among them; `--refmap=`
 * keeps any configured refspec out of it as well.
 */
async function fetchOriginLocked(workspace: GitWorkspace, clonePath: string, repositoryUrl: string): Promise<void> {
  const fetch = () =>
    gitOnClone(
      workspace,
      clonePath,
      ['fetch', '--quiet', '--prune', '--no-write-fetch-head', '--refmap=', '--', repositoryUrl, '+refs/heads/*:refs/remotes/origin/*'],
      { timeoutMs: workspace.networkTimeoutMs },
    );
  try {
    await fetch();
  } catch (error) {
    if (!(await forgotUnbornWorktrees(clonePath, error))) throw error;
    await fetch();
  }
}

/**
 * `git worktree add` first registers the new worktree with a HEAD of all zeros, then sets HEAD and
 * checks it out. One killed in between (the service's process group killed) leaves that HEAD behind,
 * and from then on git refuses every fetch of the clone (`bad object worktrees/<id>/HEAD`) — every
 * lease of the repository. Runs on one clone take turns, in this process and between the replicas
 * sharing the root (serializedOnClone), so such a HEAD met by a
 * fetch is no add at work: the registration is removed, with the worktree's directory when it holds
 * nothing but its `.git` file (nothing was checked out). True when one was.
 */
async function forgotUnbornWorktrees(clonePath: string, error: unknown): Promise<boolean> {
  const stderr = gitStderr(error);
  const named = new Set([...stderr.matchAll(/bad object worktrees\/([^/\s]+)\/HEAD/g)].map((m) => m[1]!));
  let forgot = false;
  for (const id of named) {
    const admin = path.join(clonePath, 'worktrees', id);
    if (path.dirname(admin) !== path.join(clonePath, 'worktrees')) continue;
    const head = await readFile(path.join(admin, 'HEAD'), 'utf8').catch(() => null);
    if (head === null || !/^0{40}(0{24})?\s*$/.test(head)) continue;
    const dotGit = (await readFile(path.join(admin, 'gitdir'), 'utf8').catch(() => '')).trim();
    await rm(admin, { recursive: true, force: true });
    forgot = true;
    if (dotGit !== '' && path.basename(dotGit) === '.git') {
      const worktree = path.dirname(dotGit);
      const entries = await readdir(worktree).catch(() => null);
      if (entries?.length === 1 && entries[0] === '.git') {
        await unlink(dotGit);
        await rmdir(worktree);
      }
    }
  }
  return forgot;
}
