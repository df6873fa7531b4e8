import { ErrorCode, GantryError } from '@gantry/contracts';
import { assertBranchName, assertRepositoryUrl, assertSha } from '@gantry/git';
import { git } from '../verify/git.js';

export interface PushOutcome {
  branch: string;
  headSha: string;
  /** False when the origin already had headSha on the branch: nothing was sent. */
  pushed: boolean;
}

/**
 * Pushes exactly `headSha` (the commit verify looked at) to `refs/heads/<branch>` of
 * `repositoryUrl` — the repository the worktree was leased for, named by its URL rather than by the
 * worktree's `origin`, whose URL (pushurl, insteadOf) the agent could have rewritten. Without
 * force: a branch that moved on the origin meanwhile is refused by git, and that refusal is the
 * push failure the job reports. The worktree's config is checked and hooks are off (@gantry/git).
 */
export async function pushBranch(
  worktreeDir: string,
  repositoryUrl: string,
  branch: string,
  headSha: string,
  options: { targetBranch: string },
): Promise<PushOutcome> {
  assertSha(headSha, 'the pushed commit');
  assertRepositoryUrl(repositoryUrl);
  // Work reaches the target branch through a pull request, never straight from a runner (docs/jobs.md, "Branches").
  if (branch === options.targetBranch) {
    throw new GantryError(ErrorCode.PRECONDITION_FAILED, `refusing to push to ${branch}: it is the target branch; a job pushes only to a feature branch`, { branch });
  }
  await assertBranchName(branch);
  const ref = `refs/heads/${branch}`;
  let stdout: string;
  try {
    ({ stdout } = await git(worktreeDir, ['push', '--porcelain', '--', repositoryUrl, `${headSha}:${ref}`]));
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    throw new GantryError(ErrorCode.PRECONDITION_FAILED, `pushing ${branch} to the origin failed: ${message}`, { branch, headSha });
  }
  return { branch, headSha, pushed: !upToDate(stdout, `${headSha}:${ref}`) };
}

/**
 * Whether `git push --porcelain` says the origin had the commit on the ref already (flag `=`, "[up to
 * date]"): nothing was sent. One connection to the origin, where asking it first (`ls-remote`) and
 * then pushing took two — against a hosted origin each is a TLS handshake and a ref advertisement.
 */
function upToDate(porcelain: string, refspec: string): boolean {
  return porcelain.split('\n').some((line) => line.startsWith('=\t') && line.split('\t')[1] === refspec);
}

/**
 * The commit the origin's `refs/heads/<branch>` is at (null: the origin has no such branch), asked of
 * `repositoryUrl` from the worktree, as the push goes. An origin that does not answer is asked for a
 * minute at most, and no longer than until `signal` aborts (then git is stopped).
 */
export async function originBranchHead(worktreeDir: string, repositoryUrl: string, branch: string, signal?: AbortSignal): Promise<string | null> {
  assertRepositoryUrl(repositoryUrl);
  await assertBranchName(branch);
  const ref = `refs/heads/${branch}`;
  const { stdout } = await git(worktreeDir, ['ls-remote', '--', repositoryUrl, ref], { timeoutMs: 60_000, signal });
  const line = stdout.split('\n').find((l) => l.split('\t')[1] === ref);
  return line ? line.split('\t')[0]! : null;
}
