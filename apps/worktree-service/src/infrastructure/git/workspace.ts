import { lstat, mkdir, realpath } from 'node:fs/promises';
import path from 'node:path';
import {
  baseRefProblem,
  branchNameProblem,
  ErrorCode,
  GantryError,
  repositoryCloneName,
  repositoryUrlProblem,
  WorktreeKeySchema,
} from '@gantry/contracts';
import { runGit } from '@gantry/git';

/*
 * The layout under the configured root, and the checks every input passes before git or the file
 * system sees it:
 *   <root>/repos/<clone-name>.git   one shared bare clone per repository URL
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
}

export interface GitWorkspaceOptions {
  commandTimeoutMs?: number;
  networkTimeoutMs?: number;
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
  };
}

/**
 * The root must not lie inside a git repository. git finds a repository by looking at the parent
 * directories; a process that still runs in a worktree after its directory was removed (or that
 * creates the path again) would otherwise have its git commands act on that enclosing repository —
 * the project's own checkout, when the root is inside it. See docs/worktrees.md.
 */
async function assertOutsideAnyRepository(root: string, timeoutMs: number): Promise<void> {
  const probe = await runGit(['rev-parse', '--absolute-git-dir'], { cwd: root, timeoutMs, okExitCodes: [128] });
  const enclosing = probe.exitCode === 0 ? probe.stdout.trim() : /dubious ownership/.test(probe.stderr) ? 'a repository owned by another user' : null;
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
  // eslint-disable-next-line no-control-regex
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

export function assertWorktreeKey(worktreeKey: string): void {
  const parsed = WorktreeKeySchema.safeParse(worktreeKey);
  if (!parsed.success) throw hostile(`invalid worktree key ${JSON.stringify(worktreeKey)}: ${parsed.error.issues[0]?.message}`);
}

/** The directory of a worktree key: `<root>/worktrees/<key>`. */
export async function worktreePathFor(workspace: GitWorkspace, worktreeKey: string): Promise<string> {
  assertWorktreeKey(worktreeKey);
  return entryInside(workspace, workspace.worktreesDir, worktreeKey);
}

/** The shared bare clone of a repository: `<root>/repos/<clone-name>.git`. */
export async function clonePathFor(workspace: GitWorkspace, repositoryUrl: string): Promise<string> {
  assertRepositoryUrl(repositoryUrl);
  return entryInside(workspace, workspace.reposDir, `${repositoryCloneName(repositoryUrl)}.git`);
}

export function assertRepositoryUrl(repositoryUrl: string): void {
  const problem = typeof repositoryUrl === 'string' ? repositoryUrlProblem(repositoryUrl) : 'repository URL must be a string';
  if (problem) throw hostile(`invalid repository URL: ${problem}`);
}

/**
 * A branch name as `git check-ref-format --branch` accepts it, and without a leading '-'. Checked by
 * our own rules first (so git never sees a name that could be read as an option), then by git.
 */
export async function assertBranchName(branch: string, timeoutMs = 10_000): Promise<void> {
  const problem = typeof branch === 'string' ? branchNameProblem(branch) : 'branch name must be a string';
  if (problem) throw hostile(`invalid branch name ${JSON.stringify(branch)}: ${problem}`);
  const checked = await runGit(['check-ref-format', '--branch', branch], { timeoutMs, okExitCodes: [1, 128] });
  if (checked.exitCode !== 0 || checked.stdout.trim() !== branch) {
    throw hostile(`invalid branch name ${JSON.stringify(branch)}: git check-ref-format --branch refuses it`);
  }
}

/** A base ref: a full commit SHA, or a branch or tag name by the branch rules. */
export async function assertBaseRef(baseRef: string, timeoutMs = 10_000): Promise<void> {
  const problem = typeof baseRef === 'string' ? baseRefProblem(baseRef) : 'base ref must be a string';
  if (problem) throw hostile(`invalid base ref ${JSON.stringify(baseRef)}: ${problem}`);
  if (!/^[0-9a-f]{40}([0-9a-f]{24})?$/.test(baseRef)) await assertBranchName(baseRef, timeoutMs);
}
