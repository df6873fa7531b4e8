import { baseRefProblem, branchNameProblem, ErrorCode, GantryError, repositoryUrlProblem } from '@gantry/contracts';
import { LRUCache } from 'lru-cache';
import { spawnGit } from './git-process.js';

/*
 * Operands that end up as git arguments, checked before git sees them. A refusal is INVALID_COMMAND
 * and happens before anything runs: a branch that would read as an option (`--upload-pack=…`), a
 * transport helper URL (`ext::…`, `fd::…`), a revision that is not a full SHA where one is needed.
 */

const SHA = /^[0-9a-f]{40}([0-9a-f]{24})?$/;

function invalid(message: string): GantryError {
  return new GantryError(ErrorCode.INVALID_COMMAND, message);
}

/**
 * Names git accepted, which it accepts again: its answer depends on the name alone (no repository
 * is read), and each check is a process of its own, several per job for the same two names.
 */
const acceptedBranchNames = new LRUCache<string, true>({ max: 10_000 });
let branchNamesCheckedByGit = 0;

/** How many branch-name checks ran git (for tests). */
export function branchNameChecksRun(): number {
  return branchNamesCheckedByGit;
}

export function isSha(value: string): boolean {
  return SHA.test(value);
}

export function assertSha(value: string, what = 'revision'): void {
  if (typeof value !== 'string' || !isSha(value)) throw invalid(`${what} must be a full commit SHA, got ${JSON.stringify(value)}`);
}

export function assertRepositoryUrl(repositoryUrl: string): void {
  const problem = typeof repositoryUrl === 'string' ? repositoryUrlProblem(repositoryUrl) : 'repository URL must be a string';
  if (problem) throw invalid(`invalid repository URL: ${problem}`);
}

/**
 * Names git accepts without asking it: '/'-separated parts of letters, digits, '_' and '-', each
 * beginning with a letter or a digit (`gantry/job-42`, `feature/Login_form`). None of git's rules
 * for a ref name can refuse one — they are about dots, `@{`, `@`, control characters, `~^:?*[\`,
 * spaces and empty parts — and the contract's rules refuse `HEAD` before this is asked.
 * `operands.spec.ts` has git check a spread of such names. Every other name is git's to judge.
 */
const PLAIN_BRANCH = /^[A-Za-z0-9][A-Za-z0-9_-]*(?:\/[A-Za-z0-9][A-Za-z0-9_-]*)*$/;

/**
 * A branch name as `git check-ref-format --branch` accepts it, and without a leading '-'. Checked by
 * the contract's rules first (so git never sees a name that could be read as an option), then by git
 * unless it is plain (PLAIN_BRANCH): each job names a new branch, and the check was a git process of
 * its own in the lease's start, the push and the PR service, on the job's path.
 */
export async function assertBranchName(branch: string, timeoutMs = 10_000): Promise<void> {
  const problem = typeof branch === 'string' ? branchNameProblem(branch) : 'branch name must be a string';
  if (problem) throw invalid(`invalid branch name ${JSON.stringify(branch)}: ${problem}`);
  if (PLAIN_BRANCH.test(branch) || acceptedBranchNames.has(branch)) return;
  // No repository: `--branch` would expand `@{-1}` against one (the contract refuses `@{` anyway).
  branchNamesCheckedByGit++;
  const checked = await spawnGit(['check-ref-format', '--branch', branch], { timeoutMs, okExitCodes: [1, 128] });
  if (checked.exitCode !== 0 || checked.stdout.trim() !== branch) {
    throw invalid(`invalid branch name ${JSON.stringify(branch)}: git check-ref-format --branch refuses it`);
  }
  acceptedBranchNames.set(branch, true);
}

/** A base ref: a full commit SHA, or a branch or tag name by the branch rules. */
export async function assertBaseRef(baseRef: string, timeoutMs = 10_000): Promise<void> {
  const problem = typeof baseRef === 'string' ? baseRefProblem(baseRef) : 'base ref must be a string';
  if (problem) throw invalid(`invalid base ref ${JSON.stringify(baseRef)}: ${problem}`);
  if (!isSha(baseRef)) await assertBranchName(baseRef, timeoutMs);
}

/** How `commitsQuery` asks: `cat-file` reads the names on its stdin, where none can be taken for an option. */
export const COMMITS_QUERY_ARGS: readonly string[] = ['cat-file', '--batch-check=%(objectname)'];

/**
 * What `git rev-parse --verify <name>^{commit}` answers for each of `names` — the commit it points
 * at (a tag peeled to its commit), or null where there is none — asked of one
 * `git <COMMITS_QUERY_ARGS>` rather than one process per name: run it with `input` on stdin and pass
 * its stdout to `answers`, which keeps the names' order. A name with a line break (it would be two
 * names) or a NUL (git would read only what precedes it) is INVALID_COMMAND before anything runs.
 */
export function commitsQuery(names: readonly string[]): { input: string; answers(stdout: string): Array<string | null> } {
  for (const name of names) {
    if (/[\n\0]/.test(name)) throw invalid(`a revision must be one line without NUL, got ${JSON.stringify(name)}`);
  }
  return {
    input: names.map((name) => `${name}^{commit}\n`).join(''),
    answers(stdout) {
      const lines = stdout.split('\n');
      return names.map((_, i) => (isSha(lines[i] ?? '') ? lines[i]! : null));
    },
  };
}
