import { lstat, mkdir, open, readdir, realpath, rename, rm, rmdir } from 'node:fs/promises';
import path from 'node:path';
import { deriveWorktreeKey, ErrorCode, GantryError, isLegacyWorktreeKey, rescueBranchName } from '@gantry/contracts';
import { COMMITS_QUERY_ARGS, commitsQuery, isSha } from '@gantry/git';
import { serializedOnClone } from './clone-queue.js';
import { parseWorktreeListPorcelain, type WorktreeListEntry } from './worktree-list.js';
import { ensureSharedClone } from './shared-clone.js';
import {
  assertBaseRef,
  assertBranchName,
  assertRepositoryUrl,
  assertWorktreeKey,
  clonePathsOf,
  gitOnClone,
  hostile,
  resolveInsideRoot,
  worktreePathFor,
  type GitWorkspace,
} from './workspace.js';

/*
 * The git work of a worktree lease. Each operation first looks at what is really on disk, so that
 * running it again after a crash or a lost reply does the right thing (and nothing twice).
 * A dirty worktree is never thrown away: rescue commits its changes to a rescue branch first.
 */

export interface RescueResult {
  /** `gantry/rescue/<key>/<timestamp>`, a local branch of the shared clone. */
  branch: string;
  sha: string;
}

export interface PreparedWorktree {
  outcome: 'created' | 'reused';
  path: string;
  headSha: string;
  /** A reused worktree that was dirty (left by a crash) is rescued before it is handed out. */
  rescue: RescueResult | null;
  /**
   * Made on a new branch at the lease's starting point (the origin has no branch of that name, so
   * the base ref), as the pass over the clone that this create began found it: a sync right after it
   * would neither fetch nor move anything (see syncWorktree's `madeAtStart`).
   */
  atStartingPoint: boolean;
}

export interface SyncedWorktree {
  /** The commit the worktree is at after the sync: the job's base SHA, always a commit the origin has. */
  baseSha: string;
  /** True when the branch only moved forward to it. */
  fastForwarded: boolean;
  /** Local commits of the branch that the starting point does not contain, kept on a rescue branch (then dropped from the branch). */
  rescue: RescueResult | null;
}

const notThere = (message: string, details?: Record<string, unknown>) => new GantryError(ErrorCode.PRECONDITION_FAILED, message, details);

async function lstatOrNull(p: string) {
  try {
    return await lstat(p);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw error;
  }
}

async function git(workspace: GitWorkspace, cwd: string, args: string[], okExitCodes?: number[]) {
  return gitOnClone(workspace, cwd, args, { okExitCodes });
}

async function registeredWorktrees(workspace: GitWorkspace, clonePath: string): Promise<WorktreeListEntry[]> {
  const listed = await git(workspace, clonePath, ['worktree', 'list', '--porcelain', '-z']);
  return parseWorktreeListPorcelain(listed.stdout);
}

/**
 * The shared clone git finds through the worktree's `.git` file (its gitlink), or null when that file
 * is missing or leads elsewhere: git then finds no repository there, or another one (one outside the
 * root, a directory that is not a shared clone of this root, a repository of a parent directory).
 */
async function linkedClone(workspace: GitWorkspace, worktreePath: string): Promise<string | null> {
  let asked;
  try {
    asked = await git(workspace, worktreePath, ['rev-parse', '--path-format=absolute', '--show-toplevel', '--git-common-dir'], [128]);
  } catch (error) {
    // A `.git` file naming no repository fails every git command there, the policy's config check first.
    if (noRepositoryThere(error)) return null;
    throw error;
  }
  if (asked.exitCode !== 0) return null;
  const [top, common] = asked.stdout.replace(/\n$/, '').split('\n');
  if (!top || !common || (await realpathOrNull(top)) !== worktreePath) return null;
  const clonePath = await realpathOrNull(common);
  return clonePath !== null && path.dirname(clonePath) === workspace.reposDir ? clonePath : null;
}

function noRepositoryThere(error: unknown): boolean {
  if (!(error instanceof GantryError)) return false;
  const details = error.details as { exitCode?: unknown; stderr?: unknown } | undefined;
  return details?.exitCode === 128 && typeof details.stderr === 'string' && /not a git repository|\.git file/.test(details.stderr);
}

async function realpathOrNull(p: string): Promise<string | null> {
  try {
    return await realpath(p);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT' || (error as NodeJS.ErrnoException).code === 'ENOTDIR') return null;
    throw error;
  }
}

/** The shared clone of this root that registers a worktree at `worktreePath`, or null when none does. */
async function registeringClone(workspace: GitWorkspace, worktreePath: string): Promise<string | null> {
  for (const clonePath of await listClones(workspace)) {
    if ((await registeredWorktrees(workspace, clonePath)).some((w) => !w.bare && w.path === worktreePath)) return clonePath;
  }
  return null;
}

/**
 * An agent can delete or rewrite its worktree's `.git` file: git run there then finds no repository
 * (or another one), and every rescue, sync and removal of it fails for ever. The clone still registers
 * the worktree, so `git worktree repair`, run from the clone, writes the file again (git 2.39 exits 1
 * even when it repaired: the result is what counts). False when git still does not find the worktree
 * as one of `clonePath` (a `.git` directory of the agent's own in its place: git repairs no such one).
 * See docs/worktrees.md.
 */
async function repairGitlink(workspace: GitWorkspace, clonePath: string, worktreePath: string): Promise<boolean> {
  await git(workspace, clonePath, ['worktree', 'repair', '--', worktreePath], [1]);
  if ((await linkedClone(workspace, worktreePath)) !== clonePath) return false;
  workspace.onGitlinkRepaired?.(worktreePath);
  return true;
}

/**
 * True when git finds the worktree as one of `clonePath`, after repairing its `.git` file if needed
 * (repairGitlink); false when that could not be repaired. Run in the clone's turn.
 */
async function withSoundGitlink(workspace: GitWorkspace, clonePath: string, worktreePath: string): Promise<boolean> {
  return (await linkedClone(workspace, worktreePath)) === clonePath || (await repairGitlink(workspace, clonePath, worktreePath));
}

/**
 * The shared clone a worktree belongs to, asked of git. A worktree whose `.git` file is missing or
 * wrong is repaired first (repairGitlink) when a shared clone registers it; null when none does (git
 * has forgotten it) or the repair failed: nothing git can do finds it as a worktree any more.
 */
async function cloneOfWorktree(workspace: GitWorkspace, worktreePath: string): Promise<string | null> {
  const linked = await linkedClone(workspace, worktreePath);
  if (linked !== null) return linked;
  const registering = await registeringClone(workspace, worktreePath);
  if (registering === null) return null;
  return (await serializedOnClone(workspace, registering, (workspace) => withSoundGitlink(workspace, registering, worktreePath))) ? registering : null;
}

/**
 * The shared clone a worktree belongs to (refused unless it is `clonePath`) and the ref its HEAD
 * names (`refs/heads/<branch>`, or null on a detached HEAD), asked of one `git rev-parse`. Ref names
 * hold no line break, so the last line is HEAD's and the lines before it the common directory.
 */
async function worktreeHeadIn(workspace: GitWorkspace, worktreePath: string, clonePath: string): Promise<string | null> {
  const asked = await git(workspace, worktreePath, ['rev-parse', '--path-format=absolute', '--git-common-dir', '--symbolic-full-name', 'HEAD']);
  const lines = asked.stdout.replace(/\n$/, '').split('\n');
  const head = lines.pop() ?? '';
  const owner = await resolveInsideRoot(workspace, lines.join('\n'));
  if (path.dirname(owner) !== workspace.reposDir) {
    throw hostile(`worktree ${worktreePath} belongs to ${owner}, which is not a shared clone of this root`);
  }
  if (owner !== clonePath) throw notThere(`worktree ${worktreePath} does not belong to ${clonePath}`, { worktreePath });
  return head.startsWith('refs/') ? head : null;
}

/**
 * The key must be the one of (repository, branch): a worktree never serves another branch's key.
 * A legacy key of that URL and branch (made before URLs had a canonical spelling) is its key too.
 */
function assertKeyOf(worktreeKey: string, repositoryUrl: string, branch: string): void {
  const expected = deriveWorktreeKey(repositoryUrl, branch);
  if (worktreeKey !== expected && !isLegacyWorktreeKey(worktreeKey, repositoryUrl, branch)) {
    throw hostile(`worktree key ${JSON.stringify(worktreeKey)} is not the key of ${branch} in that repository (${expected})`);
  }
}

async function revParse(workspace: GitWorkspace, cwd: string, ref: string): Promise<string | null> {
  const result = await git(workspace, cwd, ['rev-parse', '--verify', '--quiet', '--end-of-options', `${ref}^{commit}`], [1, 128]);
  return result.exitCode === 0 ? result.stdout.trim() : null;
}

/**
 * The commit each of the full ref names `refnames` points at, or null where there is no such ref or
 * it names no commit, asked of one git process (commitsQuery). The names were checked by git's
 * branch rules.
 */
async function refsAt(workspace: GitWorkspace, cwd: string, refnames: readonly string[]): Promise<Map<string, string | null>> {
  const query = commitsQuery(refnames);
  const asked = await gitOnClone(workspace, cwd, COMMITS_QUERY_ARGS, { input: query.input });
  const answers = query.answers(asked.stdout);
  return new Map(refnames.map((name, i) => [name, answers[i]!]));
}

/** The refs that can name a base ref on the origin, in the order they are tried: an origin branch, then a tag. */
function baseRefCandidates(baseRef: string): string[] {
  return isSha(baseRef) ? [] : [`refs/remotes/origin/${baseRef}`, `refs/tags/${baseRef}`];
}

/**
 * The commit a base ref names on the origin: an origin branch, a tag, or a full SHA that the origin's
 * branches or tags contain — never a commit that only this clone has (a rescue, a failed attempt).
 * `refs` holds what refsAt found of baseRefCandidates(baseRef).
 */
async function resolveBaseRef(workspace: GitWorkspace, clonePath: string, baseRef: string, refs: Map<string, string | null>): Promise<string> {
  if (isSha(baseRef)) {
    const sha = await revParse(workspace, clonePath, baseRef);
    if (sha && (await originContains(workspace, clonePath, sha))) return sha;
  } else {
    for (const candidate of baseRefCandidates(baseRef)) {
      const sha = refs.get(candidate);
      if (sha) return sha;
    }
  }
  // The origin's, not the host's: every host would refuse it alike (the job's fault, preparationFaultOf).
  throw notThere(`base ref ${baseRef} is not a branch, tag or commit of the origin`, { baseRef, fault: 'JOB' });
}

async function originContains(workspace: GitWorkspace, clonePath: string, sha: string): Promise<boolean> {
  const refs = await git(workspace, clonePath, ['for-each-ref', '--count=1', '--format=%(refname)', `--contains=${sha}`, 'refs/remotes/origin/', 'refs/tags/']);
  return refs.stdout.trim() !== '';
}

/**
 * Where a lease of `branch` starts: the origin's branch when the origin has it — moved up to the
 * base ref when it is only behind it — else the base ref. Both are the origin's, as fetched just now.
 */
async function startingPoint(workspace: GitWorkspace, clonePath: string, branch: string, baseRef: string): Promise<{ start: string; local: string | null }> {
  const [localBranch, originBranch] = [`refs/heads/${branch}`, `refs/remotes/origin/${branch}`];
  // The clone's branch too, in the same process: a worktree on it has its HEAD there.
  const refs = await refsAt(workspace, clonePath, [localBranch, originBranch, ...baseRefCandidates(baseRef)]);
  const local = refs.get(localBranch) ?? null;
  const base = await resolveBaseRef(workspace, clonePath, baseRef, refs);
  const remote = refs.get(originBranch) ?? null;
  if (remote === null || remote === base) return { start: base, local };
  return { start: (await isAncestor(workspace, clonePath, remote, base)) ? base : remote, local };
}

async function currentBranch(workspace: GitWorkspace, worktreePath: string): Promise<string | null> {
  const head = await git(workspace, worktreePath, ['symbolic-ref', '--quiet', 'HEAD'], [1]);
  return head.exitCode === 0 ? head.stdout.trim() : null;
}

async function isAncestor(workspace: GitWorkspace, cwd: string, ancestor: string, descendant: string): Promise<boolean> {
  const result = await git(workspace, cwd, ['merge-base', '--is-ancestor', ancestor, descendant], [1]);
  return result.exitCode === 0;
}

async function statusOf(workspace: GitWorkspace, worktreePath: string): Promise<string> {
  const status = await git(workspace, worktreePath, ['status', '--porcelain=v1', '-z', '--untracked-files=all', '--ignore-submodules=none']);
  return status.stdout;
}

/** True when the worktree has changes git would lose on removal: modified, staged or untracked files. */
export async function isWorktreeDirty(workspace: GitWorkspace, worktreeKey: string): Promise<boolean> {
  const worktreePath = await worktreePathFor(workspace, worktreeKey);
  if (!(await lstatOrNull(worktreePath))) throw notThere(`worktree ${worktreeKey} does not exist`, { worktreeKey });
  return (await statusOf(workspace, worktreePath)).length > 0;
}

/** The operands of a create or sync checked (URL, branch, base ref, key of that URL and branch), and where its worktree lives. */
async function checkedWorktreePath(
  workspace: GitWorkspace,
  input: { worktreeKey: string; repositoryUrl: string; branch: string; baseRef: string },
): Promise<string> {
  const { worktreeKey, repositoryUrl, branch, baseRef } = input;
  assertRepositoryUrl(repositoryUrl);
  await assertBranchName(branch);
  await assertBaseRef(baseRef);
  const worktreePath = await worktreePathFor(workspace, worktreeKey);
  assertKeyOf(worktreeKey, repositoryUrl, branch);
  return worktreePath;
}

/**
 * The worktree of `worktreeKey` on `branch`, ready for a sync: created with `git worktree add`
 * (on the local branch if the clone has one — the sync then moves it to the origin's state, rescuing
 * what the origin lacks — else from the origin's branch, else as a new branch at the base ref), or
 * the existing one reused — after rescuing its changes if it is dirty.
 * Refuses a directory git does not know as a worktree of this repository (it is not ours to delete).
 */
export async function createOrReuseWorktree(
  workspace: GitWorkspace,
  input: { worktreeKey: string; repositoryUrl: string; branch: string; baseRef: string; now: Date; rescueFor?: string },
): Promise<PreparedWorktree> {
  const { worktreeKey, repositoryUrl, branch, baseRef, now, rescueFor } = input;
  const worktreePath = await checkedWorktreePath(workspace, input);

  const { clonePath } = await ensureSharedClone(workspace, repositoryUrl, { of: { worktreeKey, branch } });
  return serializedOnClone(workspace, clonePath, async (workspace) => {
    let registered = (await registeredWorktrees(workspace, clonePath)).find((w) => w.path === worktreePath);
    let onDisk = await lstatOrNull(worktreePath);
    let offBranchRescue: RescueResult | null = null;

    if (registered && onDisk) {
      // A `git worktree add` killed before it finished leaves its worktree locked ("initializing"), and
      // an agent may lock its own: locked, it could never be removed (evicted) nor pruned.
      if (registered.locked) await git(workspace, clonePath, ['worktree', 'unlock', '--', worktreePath]);
      // An agent may have deleted or rewritten its .git file: git would find no worktree there. Past
      // repair, its files are kept in the quarantine and the worktree is made again.
      if (!(await withSoundGitlink(workspace, clonePath, worktreePath))) {
        await setAsideUnknownDirectory(workspace, worktreePath, worktreeKey, now);
        await pruneLocked(workspace, clonePath);
        registered = undefined;
        onDisk = null;
      }
    }
    if (registered && onDisk) {
      const head = await currentBranch(workspace, worktreePath);
      let onBranchRescue: RescueResult | null = null;
      if (head === `refs/heads/${branch}`) {
        onBranchRescue = await rescueLocked(workspace, worktreePath, worktreeKey, now, rescueFor);
        const headSha = await revParse(workspace, worktreePath, 'HEAD');
        if (headSha !== null) return { outcome: 'reused', path: worktreePath, headSha, rescue: onBranchRescue, atStartingPoint: false };
        // HEAD names the key's branch, but it has no commit (an agent's `git checkout --orphan`):
        // reused, every sync of it would fail. It is made again like a worktree off its branch.
      }
      // Off its branch (an agent detached HEAD or switched branches): refusing it would refuse every
      // lease of the key. Its work is kept on a rescue branch, and it is made again.
      const setAside = await setAsideOffBranch(workspace, { clonePath, worktreePath, worktreeKey, branch, now, rescueFor });
      offBranchRescue = onBranchRescue ?? setAside;
      registered = undefined;
      onDisk = null;
    }
    if (registered && !onDisk) {
      // Registered, but its directory is gone (a crash, or someone deleted it): let git forget it.
      await pruneLocked(workspace, clonePath);
      registered = undefined;
    }
    if (onDisk) {
      if (!onDisk.isDirectory() || (await readdir(worktreePath)).length > 0) {
        throw notThere(`${worktreePath} exists but is not a worktree of ${repositoryUrl}; refusing to overwrite it`, { worktreeKey });
      }
      await rmdir(worktreePath);
    }

    const [localBranch, originBranch] = [`refs/heads/${branch}`, `refs/remotes/origin/${branch}`];
    const refs = await refsAt(workspace, clonePath, [localBranch, originBranch, ...baseRefCandidates(baseRef)]);
    let headSha: string;
    let atStartingPoint = false;
    if (refs.get(localBranch)) {
      await git(workspace, clonePath, ['worktree', 'add', '--quiet', '--', worktreePath, branch]);
      // Read after the checkout: another worktree of the clone could have moved the branch meanwhile.
      headSha = (await revParse(workspace, worktreePath, 'HEAD'))!;
    } else {
      // A new branch at a commit named by its SHA: that commit is the new worktree's HEAD.
      const originHead = refs.get(originBranch);
      // Without the origin's branch, the base ref is the starting point (startingPoint).
      atStartingPoint = !originHead;
      headSha = originHead ?? (await resolveBaseRef(workspace, clonePath, baseRef, refs));
      await git(workspace, clonePath, ['worktree', 'add', '--quiet', '--no-track', '-b', branch, '--', worktreePath, headSha]);
    }
    return { outcome: 'created', path: worktreePath, headSha, rescue: offBranchRescue, atStartingPoint };
  });
}

/**
 * A worktree of the key found on another branch or none: its uncommitted changes and the commit its
 * HEAD is at go to a rescue branch (one commit on top of HEAD holds both), then it is removed. On a
 * branch with no commit yet (an orphan branch) only its files are there to keep.
 */
async function setAsideOffBranch(
  workspace: GitWorkspace,
  input: { clonePath: string; worktreePath: string; worktreeKey: string; branch: string; now: Date; rescueFor?: string },
): Promise<RescueResult | null> {
  const { clonePath, worktreePath, worktreeKey, branch, now, rescueFor } = input;
  const headSha = await revParse(workspace, worktreePath, 'HEAD');
  let rescue = await rescueLocked(workspace, worktreePath, worktreeKey, now, rescueFor);
  if (rescue === null && headSha !== null) {
    const onBranch = (await refsAt(workspace, clonePath, [`refs/heads/${branch}`])).get(`refs/heads/${branch}`) ?? null;
    if (onBranch === null || !(await isAncestor(workspace, clonePath, headSha, onBranch))) {
      rescue = await rescueBranchAt(workspace, clonePath, worktreeKey, headSha, now, rescueFor);
    }
  }
  await removeLocked(workspace, clonePath, worktreePath);
  return rescue;
}

/**
 * Fetch, then put the worktree's branch on its starting point (see startingPoint): what the origin
 * has, never what an earlier holder left. The fetch is skipped when one began after `fetchedSince`
 * (a `performance.now()` reading; by default, when the sync was asked for): the create of the same
 * lease just fetched (see ensureSharedClone). `madeAtStart` is the commit the create of the same lease,
 * in this process, made the worktree at (PreparedWorktree.atStartingPoint): the worktree is handed out
 * only once synced, so nothing has had it since and the sync has nothing to check or move — it only
 * makes sure the directory is still there. Local commits the starting point does not contain — a
 * failed attempt's, never verified nor pushed — go to a rescue branch first, then the branch is
 * reset; a branch that is only behind is fast-forwarded. A dirty worktree is refused
 * (PRECONDITION_FAILED); create_or_reuse rescues before a sync. Run again after a crash, it finds
 * the rescue branch it made and does not make a second one. See docs/worktrees.md.
 */
export async function syncWorktree(
  workspace: GitWorkspace,
  input: { worktreeKey: string; repositoryUrl: string; branch: string; baseRef: string; now: Date; fetchedSince?: number; madeAtStart?: string; rescueFor?: string },
): Promise<SyncedWorktree> {
  const { worktreeKey, repositoryUrl, branch, baseRef, now, fetchedSince, madeAtStart, rescueFor } = input;
  const worktreePath = await checkedWorktreePath(workspace, input);
  const onDisk = await lstatOrNull(worktreePath);
  if (!onDisk) throw notThere(`worktree ${worktreeKey} does not exist; create it first`, { worktreeKey });
  if (madeAtStart !== undefined) {
    // A symbolic link (or a file) there now was put by someone else; what a sync checks is then in doubt.
    if (!onDisk.isDirectory()) throw hostile(`${worktreePath} is no longer the directory its create made`);
    return { baseSha: madeAtStart, fastForwarded: false, rescue: null };
  }

  const { clonePath } = await ensureSharedClone(workspace, repositoryUrl, { fetchedSince, of: { worktreeKey, branch } });
  return serializedOnClone(workspace, clonePath, async (workspace) => {
    // An agent may have deleted or rewritten its .git file (repaired when the clone registers the worktree).
    if ((await linkedClone(workspace, worktreePath)) === null && (await registeringClone(workspace, worktreePath)) === clonePath) {
      if (!(await repairGitlink(workspace, clonePath, worktreePath))) {
        throw notThere(`worktree ${worktreeKey} has a missing or wrong .git file that git worktree repair could not restore`, { worktreeKey });
      }
    }
    const head = await worktreeHeadIn(workspace, worktreePath, clonePath);
    if (head !== `refs/heads/${branch}`) {
      throw notThere(`worktree ${worktreeKey} is on ${head ?? 'a detached HEAD'}, not on ${branch}`, { worktreeKey, head });
    }
    if ((await statusOf(workspace, worktreePath)).length > 0) {
      throw notThere(`worktree ${worktreeKey} has uncommitted changes; refusing to sync over them`, { worktreeKey });
    }
    const { start, local } = await startingPoint(workspace, clonePath, branch, baseRef);
    if (local === null) throw notThere(`worktree ${worktreeKey} is on ${branch}, which has no commit yet`, { worktreeKey });
    if (local === start) return { baseSha: start, fastForwarded: false, rescue: null };
    if (await isAncestor(workspace, worktreePath, local, start)) {
      await git(workspace, worktreePath, ['merge', '--ff-only', '--quiet', start]);
      return { baseSha: start, fastForwarded: true, rescue: null };
    }
    const rescue = await rescueBranchAt(workspace, worktreePath, worktreeKey, local, now, rescueFor);
    await git(workspace, worktreePath, ['reset', '--hard', '--quiet', start]);
    return { baseSha: start, fastForwarded: false, rescue };
  });
}

/**
 * A rescue branch at `sha`: the one already there for the same work (a run repeated after a crash:
 * reusedRescueBranch), else a new `gantry/rescue/<key>/<time>`.
 */
async function rescueBranchAt(workspace: GitWorkspace, cwd: string, worktreeKey: string, sha: string, now: Date, rescueFor?: string): Promise<RescueResult> {
  const existing = await git(workspace, cwd, ['for-each-ref', '--format=%(refname)', `--points-at=${sha}`, `refs/heads/gantry/rescue/${worktreeKey}/`]);
  const found = await reusedRescueBranch(workspace, cwd, lines(existing.stdout), rescueFor);
  if (found !== null) return { branch: found.slice('refs/heads/'.length), sha };
  return { branch: await newRescueBranch(workspace, cwd, worktreeKey, sha, now, rescueFor), sha };
}

/**
 * Of the rescue branches `refs` that already hold what a rescue would save, the one it reports: with
 * `rescueFor`, only one made for that work (its reflog names it: rescuesMadeFor). A branch of another
 * work that saved the same (another lease's identical rescue) or one made before rescues named their
 * work does not name this one, and git writes no reflog entry for an update that leaves a branch where
 * it is: reported, a run of this work again after its clean-up would not find it (earlierRescue). Such
 * work gets a branch of its own at the same commit (null here). Without `rescueFor`, the first.
 */
async function reusedRescueBranch(workspace: GitWorkspace, cwd: string, refs: readonly string[], rescueFor?: string): Promise<string | null> {
  if (refs.length === 0) return null;
  if (rescueFor === undefined) return refs[0]!;
  return (await rescuesMadeFor(workspace, cwd, refs, rescueFor))[0]?.ref ?? null;
}

/** Those of the rescue branches `refs` whose reflog names `rescueFor` (newRescueBranch), with the commit each was made at. */
async function rescuesMadeFor(workspace: GitWorkspace, cwd: string, refs: readonly string[], rescueFor: string): Promise<Array<{ ref: string; sha: string }>> {
  // `<sha> <ref>@{<n>} <message>`; a branch made without a reflog has no entry.
  const logs = await git(workspace, cwd, ['log', '--walk-reflogs', '--format=%H %gD %gs', '--end-of-options', ...refs]);
  const found: Array<{ ref: string; sha: string }> = [];
  for (const line of lines(logs.stdout)) {
    const [sha, selector] = line.split(' ', 2);
    if (sha && selector && line.endsWith(` ${RESCUE_REFLOG} for ${rescueFor}`)) found.push({ ref: selector.replace(/@\{\d+\}$/, ''), sha });
  }
  return found;
}

const lines = (output: string): string[] => output.split('\n').filter((line) => line !== '');

/**
 * Creates `gantry/rescue/<key>/<time>` (or `-2`, `-3` … when taken) at `sha`; never moves an existing
 * branch. With `rescueFor`, the branch's reflog (made for it: a bare clone keeps none by default) names
 * the work the rescue is done for, so that a run of that work again finds it (earlierRescue).
 */
async function newRescueBranch(workspace: GitWorkspace, cwd: string, worktreeKey: string, sha: string, now: Date, rescueFor?: string): Promise<string> {
  let name = rescueBranchName(worktreeKey, now);
  for (let n = 2; await revParse(workspace, cwd, `refs/heads/${name}`); n++) name = `${rescueBranchName(worktreeKey, now)}-${n}`;
  const named = rescueFor === undefined ? ['-m', RESCUE_REFLOG] : ['--create-reflog', '-m', `${RESCUE_REFLOG} for ${rescueFor}`];
  // The empty old value makes update-ref refuse to overwrite a branch that appeared meanwhile.
  await git(workspace, cwd, ['update-ref', ...named, `refs/heads/${name}`, sha, '']);
  return name;
}

const RESCUE_REFLOG = 'gantry rescue';

/**
 * Commits every change of a dirty worktree — modified, staged and untracked files (not ignored
 * ones) — as a commit on top of HEAD, on a new branch `gantry/rescue/<key>/<timestamp>`, and only
 * then cleans the worktree back to HEAD. HEAD and the worktree's branch do not move. Returns null
 * when there was nothing to rescue. Run again after a crash between the commit and the cleaning,
 * it finds the rescue branch holding exactly these changes and does not make a second one.
 * `rescueFor` names the work the rescue is done for (newRescueBranch): a run again after the
 * cleaning finds nothing to rescue, and earlierRescue then finds what the first run made.
 */
export async function rescueWorktree(workspace: GitWorkspace, input: { worktreeKey: string; now: Date; rescueFor?: string }): Promise<RescueResult | null> {
  const { worktreeKey, now, rescueFor } = input;
  const worktreePath = await worktreeToLetGo(workspace, worktreeKey, now);
  const info = worktreePath === null ? null : await lstatOrNull(worktreePath);
  if (!worktreePath || !info) return null;
  const clonePath = info.isDirectory() ? await cloneOfWorktree(workspace, worktreePath) : null;
  if (clonePath === null) {
    await setAsideAndForget(workspace, worktreePath, worktreeKey, now);
    return null;
  }
  return serializedOnClone(workspace, clonePath, (workspace) => rescueLocked(workspace, worktreePath, worktreeKey, now, rescueFor));
}

/**
 * The rescue an earlier run of the same work made (the branch's reflog names `rescueFor`:
 * newRescueBranch), or null. A rescue, a rescue and removal, or a sync that kept local commits, run
 * again after a crash (or a report that failed) between its clean-up — the worktree's cleaning,
 * removal or reset — and its report finds nothing left to rescue, yet what it saved must still be
 * reported. Looked for in every shared clone: the worktree, and with it the clone it was of, may be
 * gone. See docs/worktrees.md.
 */
export async function earlierRescue(workspace: GitWorkspace, input: { worktreeKey: string; rescueFor: string }): Promise<RescueResult | null> {
  const { worktreeKey, rescueFor } = input;
  await worktreePathFor(workspace, worktreeKey);
  for (const clonePath of await listClones(workspace)) {
    const listed = await git(workspace, clonePath, ['for-each-ref', '--format=%(refname)', `refs/heads/gantry/rescue/${worktreeKey}/`]);
    const refs = lines(listed.stdout);
    if (refs.length === 0) continue;
    const [made] = await rescuesMadeFor(workspace, clonePath, refs, rescueFor);
    if (made) return { branch: made.ref.slice('refs/heads/'.length), sha: made.sha };
  }
  return null;
}

async function rescueLocked(workspace: GitWorkspace, worktreePath: string, worktreeKey: string, now: Date, rescueFor?: string): Promise<RescueResult | null> {
  const status = await statusOf(workspace, worktreePath);
  if (status.length === 0) return null;
  if ((await setAsideEmbeddedRepositories(workspace, worktreePath, worktreeKey, status, now)) && (await statusOf(workspace, worktreePath)).length === 0) return null;
  const head = await revParse(workspace, worktreePath, 'HEAD');
  await git(workspace, worktreePath, ['add', '--all', '--', '.']);
  const tree = (await git(workspace, worktreePath, ['write-tree'])).stdout.trim();

  const prefix = `refs/heads/gantry/rescue/${worktreeKey}/`;
  const existing = await git(workspace, worktreePath, ['for-each-ref', '--format=%(refname) %(objectname) %(tree) %(parent)', prefix]);
  // Branches already holding these changes on this HEAD: this work's own, made before a crash ahead of
  // the cleaning — or another work's that saved the same (reusedRescueBranch).
  const same = lines(existing.stdout)
    .map((line) => line.split(' '))
    .filter(([, , t, parent]) => t === tree && (parent ?? '') === (head ?? ''));
  const reused = await reusedRescueBranch(workspace, worktreePath, same.map(([ref]) => ref!), rescueFor);
  let rescue: RescueResult;
  if (reused !== null) {
    rescue = { branch: reused.slice('refs/heads/'.length), sha: same.find(([ref]) => ref === reused)![1]! };
  } else {
    let sha = same[0]?.[1];
    if (sha === undefined) {
      const message = `gantry: rescue of worktree ${worktreeKey} at ${now.toISOString()}`;
      const commit = await gitOnClone(workspace, worktreePath, ['commit-tree', '--no-gpg-sign', tree, ...(head ? ['-p', head] : []), '-m', message], {
        identity: { name: 'Gantry', email: 'gantry@localhost.invalid' },
      });
      sha = commit.stdout.trim();
    }
    rescue = { branch: await newRescueBranch(workspace, worktreePath, worktreeKey, sha, now, rescueFor), sha };
  }
  // The changes are safe on the rescue branch: now, and only now, clean the worktree.
  const saved = await git(workspace, worktreePath, ['rev-parse', '--verify', '--quiet', '--end-of-options', `refs/heads/${rescue.branch}^{tree}`], [1]);
  if (saved.stdout.trim() !== tree) {
    throw new GantryError(ErrorCode.INTERNAL, `rescue branch ${rescue.branch} does not hold the worktree's changes; not cleaning`, { worktreeKey });
  }
  // No revision named: git resets to HEAD, and to an empty index on a branch with no commit yet
  // (where naming HEAD is refused).
  await git(workspace, worktreePath, ['reset', '--hard', '--quiet']);
  await git(workspace, worktreePath, ['clean', '-d', '--force', '--quiet']);
  return rescue;
}

/**
 * The repositories of their own inside a worktree that git lists as untracked (an agent's `git init`
 * or clone there): with `--untracked-files=all` git names every other untracked file, but such a
 * repository by its directory (`?? <dir>/`). `status` is `statusOf`'s output (`-z`: a rename or copy
 * has its source as the next field).
 */
function embeddedRepositories(status: string): string[] {
  const fields = status.split('\0');
  const found: string[] = [];
  for (let i = 0; i < fields.length; i++) {
    const field = fields[i]!;
    if (/^[RC]|^.[RC]/.test(field)) i++;
    else if (field.startsWith('?? ') && field.endsWith('/')) found.push(field.slice(3, -1));
  }
  return found;
}

/**
 * A rescue commit cannot hold a repository inside the worktree — `git add` records at most a link to
 * its commit (none of its files) and refuses one without a commit — and `git clean -d` leaves it: the
 * worktree would stay dirty for ever, its rescue failing or every later sync and removal of the key
 * refused. So each is moved, whole, to `<root>/quarantine/<key>-<time>/<its path>` first (never
 * deleted), and the move is reported (GitWorkspace.onSetAside). True when one was moved.
 */
async function setAsideEmbeddedRepositories(workspace: GitWorkspace, worktreePath: string, worktreeKey: string, status: string, now: Date): Promise<boolean> {
  const repositories = embeddedRepositories(status);
  if (repositories.length === 0) return false;
  const target = await newQuarantineEntry(workspace, worktreeKey, now, 'directory');
  const moved: Array<{ from: string; to: string }> = [];
  for (const relative of repositories) {
    const from = path.join(worktreePath, relative);
    const info = await lstatOrNull(from);
    const inside = path.relative(worktreePath, from);
    if (inside === '' || inside === '..' || inside.startsWith(`..${path.sep}`) || path.isAbsolute(inside) || !info?.isDirectory()) {
      throw hostile(`${JSON.stringify(relative)} is not a directory inside worktree ${worktreeKey}`);
    }
    const to = await resolveInsideRoot(workspace, path.join(target, relative));
    await mkdir(path.dirname(to), { recursive: true });
    await rename(from, to);
    moved.push({ from, to });
  }
  workspace.onSetAside?.(moved);
  return true;
}

/**
 * A new entry `<root>/quarantine/<name>-<time>` (or `-2`, `-3` … when taken), made here and now — an
 * empty directory, or an empty file for what is not a directory — so that nothing else moved there in
 * the same millisecond, by this process or by a replica sharing the root, gets its name: a name only
 * looked at and then moved onto was taken by both, and the second move failed (a directory onto one
 * not empty, onto a link or a file) or replaced the first (a file or a link). What is moved there
 * replaces the empty entry (rename). An entry of that name already there, a link too, is never followed.
 */
async function newQuarantineEntry(workspace: GitWorkspace, name: string, now: Date, as: 'directory' | 'file'): Promise<string> {
  const stamp = now.toISOString().replace(/[-:.]/g, '');
  const quarantine = await resolveInsideRoot(workspace, 'quarantine');
  await mkdir(quarantine, { recursive: true });
  for (let n = 1; ; n++) {
    const entry = path.join(quarantine, n === 1 ? `${name}-${stamp}` : `${name}-${stamp}-${n}`);
    try {
      if (as === 'directory') await mkdir(entry);
      else await (await open(entry, 'wx')).close();
      return entry;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
  }
}

/** Moves `from` (a directory, a file or a link itself) to a new entry of the quarantine named after `name`; returns where. */
async function moveToQuarantine(workspace: GitWorkspace, from: string, name: string, now: Date): Promise<string> {
  const isDirectory = (await lstat(from)).isDirectory();
  const to = await newQuarantineEntry(workspace, name, now, isDirectory ? 'directory' : 'file');
  try {
    await rename(from, to);
  } catch (error) {
    // The empty entry made for it goes again; what was to be moved stays where it was.
    await (isDirectory ? rmdir(to) : rm(to, { force: true })).catch(() => undefined);
    throw error;
  }
  return to;
}

/**
 * The directory of a key that git finds as no worktree of a shared clone, past repair (its `.git` file
 * missing or wrong and its registration pruned since, or a `.git` directory in its place), or a file or
 * symbolic link an agent put in the worktree's place. Its files may be someone's work: it is moved,
 * whole, to `<root>/quarantine/<key>-<time>` (never deleted; a link is moved itself, its target neither
 * followed nor touched), the move reported (GitWorkspace.onSetAside), and the key is free for a new worktree.
 */
async function setAsideUnknownDirectory(workspace: GitWorkspace, worktreePath: string, worktreeKey: string, now: Date): Promise<void> {
  if (!(await lstatOrNull(worktreePath))) return;
  const to = await moveToQuarantine(workspace, worktreePath, worktreeKey, now);
  workspace.onSetAside?.([{ from: worktreePath, to }]);
}

/** setAsideUnknownDirectory, then `git worktree prune` on every clone: one that still registered the directory forgets it. */
async function setAsideAndForget(workspace: GitWorkspace, worktreePath: string, worktreeKey: string, now: Date): Promise<void> {
  await setAsideUnknownDirectory(workspace, worktreePath, worktreeKey, now);
  await pruneWorktrees(workspace);
}

/**
 * Removes the worktree with `git worktree remove` (never `--force`).
 * A dirty worktree is refused with PRECONDITION_FAILED: rescue it first (see rescueAndRemoveWorktree).
 * `removed` says the worktree is gone afterwards: a key whose directory is already gone (a removal
 * interrupted after git's work, or a directory deleted by hand) is pruned and counts as removed —
 * otherwise its record would stay and every later eviction would pick it again.
 */
export async function removeWorktree(workspace: GitWorkspace, input: { worktreeKey: string; now?: Date }): Promise<{ removed: boolean }> {
  const found = await worktreeToRemove(workspace, input.worktreeKey, input.now ?? new Date());
  if (!found) return { removed: true };
  const { worktreePath, clonePath } = found;
  return serializedOnClone(workspace, clonePath, async (workspace) => {
    if ((await statusOf(workspace, worktreePath)).length > 0) {
      throw notThere(`worktree ${input.worktreeKey} has uncommitted changes; rescue them before removing it`, { worktreeKey: input.worktreeKey });
    }
    await removeLocked(workspace, clonePath, worktreePath);
    return { removed: true };
  });
}

/**
 * Rescue (if dirty), then remove: the release of a worktree that is not kept. Both in one turn on
 * the clone, asking git which clone the worktree belongs to once; the rescue has just found the
 * worktree clean or cleaned it, and `git worktree remove` (without `--force`) itself refuses a
 * worktree with modified or untracked files, so a write in between is not lost: the removal fails
 * and is tried again, rescuing it.
 */
export async function rescueAndRemoveWorktree(
  workspace: GitWorkspace,
  input: { worktreeKey: string; now: Date; rescueFor?: string },
): Promise<{ rescue: RescueResult | null; removed: boolean }> {
  const { worktreeKey, now, rescueFor } = input;
  const found = await worktreeToRemove(workspace, worktreeKey, now);
  if (!found) return { rescue: null, removed: true };
  const { worktreePath, clonePath } = found;
  return serializedOnClone(workspace, clonePath, async (workspace) => {
    const rescue = await rescueLocked(workspace, worktreePath, worktreeKey, now, rescueFor);
    await removeLocked(workspace, clonePath, worktreePath);
    return { rescue, removed: true };
  });
}

/**
 * The place of a key's worktree for its rescue or removal. A symbolic link an agent put there is moved,
 * itself, to the quarantine (setAsideAndForget) and null returned: nothing of the worktree is left, and
 * the link is never followed. Refused like any other use of it (worktreePathFor), the release was retried
 * for ever, the key's lock held.
 */
async function worktreeToLetGo(workspace: GitWorkspace, worktreeKey: string, now: Date): Promise<string | null> {
  assertWorktreeKey(worktreeKey);
  const place = path.join(workspace.worktreesDir, worktreeKey);
  if ((await lstatOrNull(place))?.isSymbolicLink()) {
    await setAsideAndForget(workspace, place, worktreeKey, now);
    return null;
  }
  return worktreePathFor(workspace, worktreeKey);
}

/**
 * The worktree of a key and its clone (its `.git` file repaired if an agent broke it: cloneOfWorktree);
 * null when its directory is gone, after pruning what git still registers, or when it is a directory
 * no shared clone knows, moved to the quarantine (setAsideUnknownDirectory): both count as removed.
 */
async function worktreeToRemove(workspace: GitWorkspace, worktreeKey: string, now: Date): Promise<{ worktreePath: string; clonePath: string } | null> {
  const worktreePath = await worktreeToLetGo(workspace, worktreeKey, now);
  const info = worktreePath === null ? null : await lstatOrNull(worktreePath);
  if (!worktreePath || !info) {
    await pruneWorktrees(workspace);
    return null;
  }
  const clonePath = info.isDirectory() ? await cloneOfWorktree(workspace, worktreePath) : null;
  if (clonePath === null) {
    await setAsideAndForget(workspace, worktreePath, worktreeKey, now);
    return null;
  }
  return { worktreePath, clonePath };
}

/**
 * `git worktree remove` deletes the directory and the clone's record of it. No `git worktree prune`
 * after it: that is for records whose directory went some other way, which worktreeToRemove, a
 * create of the key and the reconciliation at start prune where they find them.
 */
async function removeLocked(workspace: GitWorkspace, clonePath: string, worktreePath: string): Promise<void> {
  const removal = await git(workspace, clonePath, ['worktree', 'remove', '--', worktreePath], [128]);
  if (removal.exitCode === 0) return;
  // Locked by an agent (`git worktree lock`) or by a `git worktree add` killed before it finished: the
  // service owns its worktrees, so it unlocks and removes (still without --force: a dirty one stays).
  if (!/cannot remove a locked working tree/.test(removal.stderr)) {
    throw notThere(`git worktree remove failed: ${removal.stderr.trim().split('\n').slice(-3).join(' | ')}`, { worktreePath, stderr: removal.stderr.slice(0, 4000) });
  }
  await git(workspace, clonePath, ['worktree', 'unlock', '--', worktreePath]);
  await git(workspace, clonePath, ['worktree', 'remove', '--', worktreePath]);
}

/** The shared clones under `<root>/repos` (directories named `*.git`, never symlinks). */
export async function listClones(workspace: GitWorkspace): Promise<string[]> {
  const entries = await readdir(workspace.reposDir, { withFileTypes: true });
  return entries.filter((e) => e.isDirectory() && e.name.endsWith('.git')).map((e) => path.join(workspace.reposDir, e.name));
}

export interface WorktreeOnDisk {
  worktreeKey: string;
  path: string;
  clonePath: string;
  /** The checked-out branch, short name; null when detached. */
  branch: string | null;
  headSha: string | null;
  /** Whether it has uncommitted changes; null unless asked for (it costs a `git status`). */
  dirty: boolean | null;
  /** Registered, but its directory is missing: the service's prune forgets it. */
  prunable: boolean;
  /**
   * Its directory is there but its `.git` file is not (git calls it prunable too): the service repairs
   * it from the clone before it prunes, rescues, syncs or removes it, so it is no prunable one.
   * Whether it is dirty git cannot say until then.
   */
  gitlinkMissing: boolean;
  locked: boolean;
}

export interface WorktreeInventory {
  worktrees: WorktreeOnDisk[];
  /** Directories under `<root>/worktrees` that no clone knows as a worktree. */
  orphanDirectories: string[];
}

/**
 * What is really on disk, for reconciliation: every worktree the shared clones know
 * (`git worktree list --porcelain`) under `<root>/worktrees`, and the directories there no clone knows.
 * The directories are read first: one a `git worktree add` was making is then known to its clone,
 * asked after. With `inTurn`, each clone is asked in its turn among the git runs on it (of every
 * replica: serializedOnClone), so no add is half done when it answers (docs/worktrees.md, "Replicas").
 */
export async function listWorktrees(
  workspace: GitWorkspace,
  options: { withDirtyState?: boolean; repositoryUrl?: string; inTurn?: boolean } = {},
): Promise<WorktreeInventory> {
  const clones = options.repositoryUrl ? await clonePathsOf(workspace, options.repositoryUrl) : await listClones(workspace);
  const directories = options.repositoryUrl ? [] : (await readdir(workspace.worktreesDir)).map((name) => path.join(workspace.worktreesDir, name));
  const worktrees: WorktreeOnDisk[] = [];
  for (const clonePath of clones) {
    if (!(await lstatOrNull(clonePath))) continue;
    const list = (inTurn: GitWorkspace) => registeredWorktrees(inTurn, clonePath);
    for (const entry of await (options.inTurn ? serializedOnClone(workspace, clonePath, list) : list(workspace))) {
      if (entry.bare || path.dirname(entry.path) !== workspace.worktreesDir) continue;
      // git's prunable also says a worktree whose directory is there lost its `.git` file (pruneLocked repairs those).
      const gitlinkMissing = entry.prunable && (await lstatOrNull(entry.path))?.isDirectory() === true;
      const dirty = options.withDirtyState && !entry.prunable ? (await statusOf(workspace, entry.path)).length > 0 : null;
      worktrees.push({
        worktreeKey: path.basename(entry.path),
        path: entry.path,
        clonePath,
        branch: entry.branch?.startsWith('refs/heads/') ? entry.branch.slice('refs/heads/'.length) : null,
        headSha: entry.headSha,
        dirty,
        prunable: entry.prunable && !gitlinkMissing,
        gitlinkMissing,
        locked: entry.locked,
      });
    }
  }
  const known = new Set(worktrees.map((w) => w.path));
  return { worktrees, orphanDirectories: directories.filter((p) => !known.has(p)) };
}

/** `git worktree prune` on every shared clone (pruneLocked): git forgets worktrees whose directory is gone. */
export async function pruneWorktrees(workspace: GitWorkspace): Promise<void> {
  for (const clonePath of await listClones(workspace)) {
    await serializedOnClone(workspace, clonePath, (workspace) => pruneLocked(workspace, clonePath));
  }
}

/**
 * `git worktree prune` of one clone, in its turn. git counts a worktree whose `.git` file is gone as
 * prunable, as it does one whose directory is gone: pruned, its record in the clone (its HEAD, its
 * index) would be lost, and its release, past repair, would move its files to the quarantine. So a
 * prunable worktree whose directory is still there is repaired first (repairGitlink); only those
 * whose directory went, or that git cannot repair, are forgotten. See docs/worktrees.md.
 */
async function pruneLocked(workspace: GitWorkspace, clonePath: string): Promise<void> {
  for (const entry of await registeredWorktrees(workspace, clonePath)) {
    if (!entry.prunable || entry.bare || path.dirname(entry.path) !== workspace.worktreesDir) continue;
    if ((await lstatOrNull(entry.path))?.isDirectory()) await repairGitlink(workspace, clonePath, entry.path);
  }
  await git(workspace, clonePath, ['worktree', 'prune']);
}

/**
 * Moves a directory under `<root>/worktrees` that no shared clone knows as a worktree to
 * `<root>/quarantine/<name>-<timestamp>` (a suffix when taken: newQuarantineEntry) — out of the way
 * of the key, never deleted (it may hold someone's work). An empty one is simply removed. A file or a symbolic link there is moved the same
 * way (the link itself: its target is neither followed nor touched); refused, it failed every start.
 * Returns where it went, or null.
 */
export async function quarantineOrphanDirectory(workspace: GitWorkspace, input: { directory: string; now: Date }): Promise<string | null> {
  const { directory, now } = input;
  if (directory !== path.basename(directory) || directory === '.' || directory === '..' || directory === '') {
    throw hostile(`orphan directory must be a plain name inside the worktrees directory, got ${JSON.stringify(directory)}`);
  }
  // The entry itself, not what a link there leads to: its parent is the (real) worktrees directory.
  const orphan = path.join(workspace.worktreesDir, directory);
  const info = await lstatOrNull(orphan);
  if (!info) return null;
  const { orphanDirectories } = await listWorktrees(workspace);
  if (!orphanDirectories.includes(orphan)) {
    throw new GantryError(ErrorCode.PRECONDITION_FAILED, `${orphan} is a registered worktree, not an orphan`, { directory });
  }
  if (info.isDirectory() && (await readdir(orphan)).length === 0) {
    await rmdir(orphan);
    return null;
  }
  return moveToQuarantine(workspace, orphan, directory, now);
}
