import { lstat, mkdir, realpath, unlink } from 'node:fs/promises';
import path from 'node:path';
import { ErrorCode, GantryError, isLegacyWorktreeKey, legacyRepositoryCloneName, repositoryCloneName, WorktreeKeySchema } from '@gantry/contracts';
import { assertRepositoryUrl, runGit, type GitResult, type GitRunOptions } from '@gantry/git';

/*
 * The layout under the configured root, and the checks every input passes before git or the file
 * system sees it:
 *   <root>/repos/<clone-name>.git   one shared bare clone per repository (its URL's canonical spelling)
 *   <root>/worktrees/<worktree-key> one worktree per key
 * Every path is resolved, its existing part resolved through symlinks, and refused unless it stays
 * inside the root. A refusal is INVALID_COMMAND and happens before anything on disk is touched.
 */

export interface GitWorkspace {
  /** The root, absolute and with symlinks resolved. */
  readonly root: string;
  readonly reposDir: string;
  readonly worktreesDir: string;
  /** Timeout of a local git command. */
  readonly commandTimeoutMs: number;
  /** Timeout of a git command that talks to the origin (clone, fetch). */
  readonly networkTimeoutMs: number;
  /** Told of the keys an agent wrote into a clone's config that were removed before a git command. */
  readonly onForeignConfigRemoved?: (keys: string[], dir: string) => void;
  /** Told of the repositories found inside a worktree that a rescue moved aside, whole, into `<root>/quarantine`. */
  readonly onSetAside?: (moved: Array<{ from: string; to: string }>) => void;
  /** Told of a worktree whose `.git` file (its link to the shared clone) was missing or wrong and that `git worktree repair` restored. */
  readonly onGitlinkRepaired?: (worktreePath: string) => void;
  /**
   * Runs `work` while no other process that shares the root runs git on the clone (serializedOnClone
   * calls it once this process's turn on the clone has come). Without it, only this process's runs take turns.
   */
  readonly acrossProcesses?: CloneLock;
  /**
   * Aborts when a lock the git work runs under is lost (withSignal): every git command run through
   * this workspace is then stopped, and none is started any more.
   */
  readonly signal?: AbortSignal;
}

/**
 * Runs `work` under a lock of the clone held across processes. `signal` aborts when the lock is lost
 * while the work runs (its connection dropped): the work must stop, since another process may now
 * run git on the clone.
 */
export type CloneLock = <T>(clonePath: string, work: (signal: AbortSignal) => Promise<T>) => Promise<T>;

export interface GitWorkspaceOptions {
  commandTimeoutMs?: number;
  networkTimeoutMs?: number;
  onForeignConfigRemoved?: (keys: string[], dir: string) => void;
  onSetAside?: (moved: Array<{ from: string; to: string }>) => void;
  onGitlinkRepaired?: (worktreePath: string) => void;
  acrossProcesses?: CloneLock;
}

/** Opens (creating if needed) the layout under `root`, which must be an absolute path. */
export async function openGitWorkspace(root: string, options: GitWorkspaceOptions = {}): Promise<GitWorkspace> {
  if (!path.isAbsolute(root)) throw hostile(`the worktree root must be an absolute path, got ${JSON.stringify(root)}`);
  await mkdir(root, { recursive: true });
  const realRoot = await realpath(root);
  const reposDir = path.join(realRoot, 'repos');
  const worktreesDir = path.join(realRoot, 'worktrees');
  const commandTimeoutMs = options.commandTimeoutMs ?? 30_000;
  await assertOutsideAnyRepository(realRoot, commandTimeoutMs);
  for (const dir of [reposDir, worktreesDir]) {
    await mkdir(dir, { recursive: true });
    if ((await lstat(dir)).isSymbolicLink()) throw hostile(`${dir} must be a directory, not a symlink`);
  }
  return {
    root: realRoot,
    reposDir,
    worktreesDir,
    commandTimeoutMs,
    networkTimeoutMs: options.networkTimeoutMs ?? 300_000,
    onForeignConfigRemoved: options.onForeignConfigRemoved,
    onSetAside: options.onSetAside,
    onGitlinkRepaired: options.onGitlinkRepaired,
    acrossProcesses: options.acrossProcesses,
  };
}

/**
 * The workspace whose git runs stop when `signal` aborts too (a lock they run under was lost; see
 * docs/worktrees.md, "Replicas"), as well as when the signal the workspace already had does.
 */
export function withSignal(workspace: GitWorkspace, signal: AbortSignal): GitWorkspace {
  return { ...workspace, signal: workspace.signal ? AbortSignal.any([workspace.signal, signal]) : signal };
}

/**
 * git on a shared clone or one of its worktrees. The service owns the clones: a key an agent wrote
 * into their config that service-side git does not accept (docs/git.md) is removed before the
 * command — and reported — rather than refused, so an agent cannot make a worktree key unusable.
 */
export async function gitOnClone(
  workspace: GitWorkspace,
  cwd: string,
  args: readonly string[],
  options: Omit<GitRunOptions, 'cwd' | 'restoreConfig' | 'timeoutMs'> & { timeoutMs?: number } = {},
): Promise<GitResult> {
  const run = () =>
    runGit(args, {
      ...options,
      cwd,
      timeoutMs: options.timeoutMs ?? workspace.commandTimeoutMs,
      restoreConfig: { within: workspace.reposDir, onRemoved: workspace.onForeignConfigRemoved },
      signal: workspace.signal,
    });
  for (let attempt = 1; ; attempt++) {
    try {
      return await run();
    } catch (error) {
      // Stopped for a lock lost: another process may be at work on the clone, its locks are not stale.
      if (workspace.signal?.aborted) throw error;
      if (attempt >= MAX_STALE_LOCK_ROUNDS || !(await removedStaleLocks(workspace, cwd, error))) throw error;
    }
  }
}

/**
 * A lock file older than this is no git at work: git holds its locks for the length of one command,
 * and the service's own git commands are stopped at their timeout (git removes its locks when
 * stopped). A git killed outright (SIGKILL of the service's process group, an agent killed mid-commit)
 * leaves its lock behind, and git refuses every later command that needs it — a rescue, a sync, every
 * fetch of the clone — until someone removes it (docs/worktrees.md, "Restart and recovery").
 */
export const STALE_LOCK_MS = 60_000;
/** A fetch can meet several locks (one per ref); each round removes those named and runs git again. */
const MAX_STALE_LOCK_ROUNDS = 5;

/** What git wrote to its standard error before the command failed (empty for a failure of another kind). */
export function gitStderr(error: unknown): string {
  return error instanceof GantryError && typeof error.details?.stderr === 'string' ? error.details.stderr : '';
}

/**
 * Removes the lock files under `<root>/repos` that git said stopped `error` (`Unable to create
 * '<file>.lock': File exists`, `could not lock config file <file>`) when they are older than
 * STALE_LOCK_MS; a younger one is left to the git that may hold it. True when one was removed.
 */
async function removedStaleLocks(workspace: GitWorkspace, cwd: string, error: unknown): Promise<boolean> {
  const stderr = gitStderr(error);
  const named = [
    ...[...stderr.matchAll(/Unable to create '([^'\n]+\.lock)': File exists/g)].map((m) => m[1]!),
    ...[...stderr.matchAll(/could not lock config file ([^\n]+): File exists/g)].map((m) => `${m[1]!}.lock`),
  ];
  let removed = false;
  for (const file of new Set(named.map((one) => path.resolve(cwd, one)))) {
    if (!isWithin(workspace.reposDir, file)) continue;
    const info = await lstat(file).catch(() => null);
    if (!info?.isFile() || Date.now() - info.mtimeMs < STALE_LOCK_MS) continue;
    try {
      await unlink(file);
      removed = true;
    } catch (unlinkError) {
      if ((unlinkError as NodeJS.ErrnoException).code !== 'ENOENT') throw unlinkError;
      removed = true; // gone meanwhile: worth running git again
    }
  }
  return removed;
}

/**
 * The root must not lie inside a git repository. git finds a repository by looking at the parent
 * directories; a process that still runs in a worktree after its directory was removed (or that
 * creates the path again) would otherwise have its git commands act on that enclosing repository —
 * the project's own checkout, when the root is inside it. See docs/worktrees.md.
 */
async function assertOutsideAnyRepository(root: string, timeoutMs: number): Promise<void> {
  let enclosing: string | null;
  try {
    const probe = await runGit(['rev-parse', '--absolute-git-dir'], { cwd: root, timeoutMs, okExitCodes: [128] });
    enclosing = probe.exitCode === 0 ? probe.stdout.trim() : /dubious ownership/.test(probe.stderr) ? 'a repository owned by another user' : null;
  } catch (error) {
    // Refused for its config: there is a repository around the root, one whose config git may not even read.
    if (!(error instanceof GantryError && error.code === ErrorCode.PRECONDITION_FAILED)) throw error;
    enclosing = `a repository (${error.message})`;
  }
  if (enclosing !== null) {
    throw new GantryError(
      ErrorCode.PRECONDITION_FAILED,
      `the worktree root ${root} is inside the git repository ${enclosing}; set GANTRY_WORKTREE_ROOT to a directory outside any repository`,
      { root },
    );
  }
}

export function hostile(message: string, details?: Record<string, unknown>): GantryError {
  return new GantryError(ErrorCode.INVALID_COMMAND, message, details);
}

function isWithin(parent: string, candidate: string): boolean {
  const relative = path.relative(parent, candidate);
  return relative === '' || (!relative.startsWith(`..${path.sep}`) && relative !== '..' && !path.isAbsolute(relative));
}

/**
 * `candidate` (absolute, or relative to the root) as an absolute path that is inside the root even
 * after following every symlink in the part of it that exists. Refuses `..` escapes and symlinks
 * that lead out.
 */
export async function resolveInsideRoot(workspace: Pick<GitWorkspace, 'root'>, candidate: string): Promise<string> {
  // eslint-disable-next-line no-control-regex -- refusing control characters is the point of this pattern
  if (candidate.length === 0 || /[\x00]/.test(candidate)) throw hostile('a path must be a non-empty string without NUL');
  const absolute = path.resolve(workspace.root, candidate);
  if (!isWithin(workspace.root, absolute)) {
    throw hostile(`path ${JSON.stringify(candidate)} is outside the worktree root`, { root: workspace.root });
  }
  const missing: string[] = [];
  let probe = absolute;
  for (;;) {
    try {
      const real = await realpath(probe);
      const resolved = path.join(real, ...missing.reverse());
      if (!isWithin(workspace.root, resolved)) {
        throw hostile(`path ${JSON.stringify(candidate)} leads outside the worktree root through a symlink`, { root: workspace.root });
      }
      return resolved;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
      missing.push(path.basename(probe));
      probe = path.dirname(probe);
    }
  }
}

/** `name` directly inside `dir` (inside the root), and not itself a symlink. */
async function entryInside(workspace: GitWorkspace, dir: string, name: string): Promise<string> {
  const resolved = await resolveInsideRoot(workspace, path.join(dir, name));
  if (resolved !== path.join(dir, name)) throw hostile(`${name} does not resolve to an entry of ${dir}`);
  try {
    if ((await lstat(resolved)).isSymbolicLink()) throw hostile(`${resolved} is a symlink; refusing to use it`);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
  return resolved;
}

export { assertBaseRef, assertBranchName, assertRepositoryUrl } from '@gantry/git';

export function assertWorktreeKey(worktreeKey: string): void {
  const parsed = WorktreeKeySchema.safeParse(worktreeKey);
  if (!parsed.success) throw hostile(`invalid worktree key ${JSON.stringify(worktreeKey)}: ${parsed.error.issues[0]?.message}`);
}

/** The directory of a worktree key: `<root>/worktrees/<key>`. */
export async function worktreePathFor(workspace: GitWorkspace, worktreeKey: string): Promise<string> {
  assertWorktreeKey(worktreeKey);
  return entryInside(workspace, workspace.worktreesDir, worktreeKey);
}

/**
 * The shared bare clone of a repository: `<root>/repos/<clone-name>.git`, named by the URL's
 * canonical spelling — every spelling of one repository has the one clone. The worktree of a key
 * made before URLs had a canonical spelling (`of` a legacy key) is in the clone named as it was then,
 * by the URL as written (docs/worktrees.md, "Keys from before").
 */
export async function clonePathFor(workspace: GitWorkspace, repositoryUrl: string, of?: { worktreeKey: string; branch: string }): Promise<string> {
  assertRepositoryUrl(repositoryUrl);
  const legacy = of !== undefined && isLegacyWorktreeKey(of.worktreeKey, repositoryUrl, of.branch);
  const name = legacy ? legacyRepositoryCloneName(repositoryUrl) : repositoryCloneName(repositoryUrl);
  return entryInside(workspace, workspace.reposDir, `${name}.git`);
}

/** The clones a repository URL's worktrees can be in: its clone, and the one named by the URL as written when that is another. */
export async function clonePathsOf(workspace: GitWorkspace, repositoryUrl: string): Promise<string[]> {
  assertRepositoryUrl(repositoryUrl);
  const names = [...new Set([repositoryCloneName(repositoryUrl), legacyRepositoryCloneName(repositoryUrl)])];
  return Promise.all(names.map((name) => entryInside(workspace, workspace.reposDir, `${name}.git`)));
}
