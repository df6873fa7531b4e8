import { ErrorCode, GantryError } from '@gantry/contracts';
import { git, isSha } from '../verify/git.js';

export interface PushOutcome {
  branch: string;
  headSha: string;
  /** False when the origin already had headSha on the branch: nothing was sent. */
  pushed: boolean;
}

/**
 * Pushes exactly `headSha` (the commit verify looked at) to `refs/heads/<branch>` on the worktree's
 * `origin`, without force: a branch that moved on the origin meanwhile is refused by git, and that
 * refusal is the push failure the job reports. Hooks are off (`core.hooksPath=/dev/null`): the
 * agent could have written one into the repository, and it would run with the runner's rights.
 */
export async function pushBranch(worktreeDir: string, branch: string, headSha: string, options: { targetBranch: string }): Promise<PushOutcome> {
  if (!isSha(headSha)) throw new GantryError(ErrorCode.INVALID_COMMAND, `the pushed commit must be a full SHA, got "${headSha}"`);
  // Work reaches the target branch through a pull request, never straight from a runner (docs/jobs.md, "Branches").
  if (branch === options.targetBranch) {
    throw new GantryError(ErrorCode.PRECONDITION_FAILED, `refusing to push to ${branch}: it is the target branch; a job pushes only to a feature branch`, { branch });
  }
  await assertBranchName(worktreeDir, branch);
  const ref = `refs/heads/${branch}`;
  const remoteSha = await remoteBranchSha(worktreeDir, ref);
  if (remoteSha === headSha) return { branch, headSha, pushed: false };
  try {
    await git(worktreeDir, ['-c', 'core.hooksPath=/dev/null', 'push', '--porcelain', '--', 'origin', `${headSha}:${ref}`]);
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    throw new GantryError(ErrorCode.PRECONDITION_FAILED, `pushing ${branch} to the origin failed: ${message}`, { branch, headSha });
  }
  return { branch, headSha, pushed: true };
}

/** The SHA the origin has for `ref`, or null when the origin has no such branch. */
export async function remoteBranchSha(worktreeDir: string, ref: string): Promise<string | null> {
  const { stdout } = await git(worktreeDir, ['ls-remote', '--', 'origin', ref]);
  const line = stdout.split('\n').find((l) => l.endsWith(`\t${ref}`));
  return line ? line.split('\t')[0]! : null;
}

async function assertBranchName(cwd: string, branch: string): Promise<void> {
  if (branch.startsWith('-')) throw new GantryError(ErrorCode.INVALID_COMMAND, `branch "${branch}" must not start with "-"`);
  const { exitCode } = await git(cwd, ['check-ref-format', '--branch', branch], { okExitCodes: [1, 128] });
  if (exitCode !== 0) throw new GantryError(ErrorCode.INVALID_COMMAND, `"${branch}" is not a valid branch name`);
}
