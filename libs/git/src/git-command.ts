import { assertSubcommand, spawnGit, type GitResult, type GitRunOptions } from './git-process.js';
import { assertRepositoryConfig, removeForeignConfig } from './repository-config.js';

/*
 * The only way Gantry's services run git (the worktree service, the runner, the PR service, and the
 * GitHub stand-in of the tests): the policy of docs/git.md — a scrubbed environment without system
 * or global config, command-line overrides for every key that names a program, the repository's
 * own config checked against an allow-list before the command, the caller's arguments checked by
 * simple-git's guard, no shell, no prompts, a timeout.
 * Callers put operands after `--` wherever git accepts it.
 */

/**
 * Runs `git <overrides> <args>` in `cwd` after checking its config (or, for its owner, restoring it);
 * resolves with the output, rejects with a GitCommandError — PRECONDITION_FAILED, with nothing run,
 * for a repository whose config has keys outside the allow-list.
 */
export async function runGit(args: readonly string[], options: GitRunOptions): Promise<GitResult> {
  assertSubcommand(args);
  options.signal?.throwIfAborted();
  const { cwd, restoreConfig, timeoutMs } = options;
  if (cwd !== undefined && restoreConfig) {
    const removed = await removeForeignConfig(cwd, { within: restoreConfig.within, timeoutMs });
    if (removed.length > 0) restoreConfig.onRemoved?.(removed, cwd);
  } else if (cwd !== undefined) {
    await assertRepositoryConfig(cwd, timeoutMs);
  }
  return spawnGit(args, options);
}
