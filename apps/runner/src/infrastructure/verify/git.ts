import { ErrorCode, GantryError } from '@gantry/contracts';
import { COMMITS_QUERY_ARGS, commitsQuery, isSha, runGit, type GitResult } from '@gantry/git';

export type { GitResult };
export { isSha };

export interface GitOptions {
  /** Exit codes that answer a question rather than signal a failure (e.g. 1 for `merge-base --is-ancestor`). */
  okExitCodes?: number[];
  maxBufferBytes?: number;
  /** Written to git's stdin (e.g. patches for `git patch-id`). */
  input?: string;
  /** Default 10 minutes: long enough for a push of a large branch, short enough that a hung git ends. */
  timeoutMs?: number;
  /** Stops git when it aborts (the runner's stop deadline); the call then rejects with the signal's reason. */
  signal?: AbortSignal;
}

/**
 * Runs git in `cwd` through @gantry/git (docs/git.md): the worktree's config — which the agent could
 * write — is checked before every command and refused when it names programs; hooks, fsmonitor and
 * the rest are overridden. Diffs pass `--no-textconv --no-ext-diff` as well. Callers pass revisions
 * as resolved SHAs and put paths after `--`, so nothing an agent wrote into a branch name or a file
 * name can be read as an option.
 */
export function git(cwd: string, args: readonly string[], options: GitOptions = {}): Promise<GitResult> {
  return runGit(args, {
    cwd,
    timeoutMs: options.timeoutMs ?? 600_000,
    okExitCodes: options.okExitCodes,
    input: options.input,
    maxBufferBytes: options.maxBufferBytes,
    signal: options.signal,
  });
}

/** Resolves a revision (branch, remote ref, SHA) to the full SHA of a commit; an unknown one is NOT_FOUND. */
export async function resolveCommit(cwd: string, revision: string): Promise<string> {
  const [sha] = await resolveCommits(cwd, [revision]);
  return sha!;
}

/** Resolves revisions to the full SHAs of their commits with one git process; any unknown one is NOT_FOUND. */
export async function resolveCommits(cwd: string, revisions: readonly string[]): Promise<string[]> {
  const query = commitsQuery(revisions);
  const { stdout } = await git(cwd, COMMITS_QUERY_ARGS, { input: query.input });
  const answers = query.answers(stdout);
  return revisions.map((revision, i) => {
    const sha = answers[i];
    if (!sha) throw new GantryError(ErrorCode.NOT_FOUND, `"${revision}" is not a commit in ${cwd}`, { revision });
    return sha;
  });
}
