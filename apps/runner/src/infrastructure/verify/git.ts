import { execFile } from 'node:child_process';
import { ErrorCode, GantryError } from '@gantry/contracts';

export interface GitResult {
  stdout: string;
  stderr: string;
  exitCode: number;
}

export interface GitOptions {
  /** Exit codes that answer a question rather than signal a failure (e.g. 1 for `merge-base --is-ancestor`). */
  okExitCodes?: number[];
  maxBufferBytes?: number;
  /** Written to git's stdin (e.g. patches for `git patch-id`). */
  input?: string;
}

/**
 * Runs git in `cwd` without a shell. `protocol.ext.allow=never` keeps a crafted remote URL from
 * running commands; callers pass revisions as resolved SHAs and put paths after `--`, so nothing an
 * agent wrote into a branch name or a file name can be read as an option.
 */
export function git(cwd: string, args: readonly string[], options: GitOptions = {}): Promise<GitResult> {
  const okExitCodes = options.okExitCodes ?? [];
  return new Promise((resolve, reject) => {
    const child = execFile(
      'git',
      ['-c', 'protocol.ext.allow=never', ...args],
      {
        cwd,
        maxBuffer: options.maxBufferBytes ?? 64 * 1024 * 1024,
        env: { ...process.env, GIT_TERMINAL_PROMPT: '0', GIT_OPTIONAL_LOCKS: '0', LC_ALL: 'C' },
        encoding: 'utf8',
      },
      (error, stdout, stderr) => {
        if (!error) return resolve({ stdout, stderr, exitCode: 0 });
        const exitCode = typeof error.code === 'number' ? error.code : null;
        if (exitCode !== null && okExitCodes.includes(exitCode)) return resolve({ stdout, stderr, exitCode });
        reject(
          new GantryError(ErrorCode.INTERNAL, `git ${args[0]} failed in ${cwd}: ${(stderr || error.message).trim()}`, {
            gitArgs: args,
            exitCode,
          }),
        );
      },
    );
    // A git that exits without reading its stdin closes the pipe (EPIPE); its exit code already says what happened.
    child.stdin?.on('error', () => undefined);
    child.stdin?.end(options.input);
  });
}

const SHA = /^[0-9a-f]{40}([0-9a-f]{24})?$/;

/** Resolves a revision (branch, remote ref, SHA) to the full SHA of a commit; an unknown one is NOT_FOUND. */
export async function resolveCommit(cwd: string, revision: string): Promise<string> {
  const { stdout, exitCode } = await git(cwd, ['rev-parse', '--verify', '--quiet', '--end-of-options', `${revision}^{commit}`], {
    okExitCodes: [1],
  });
  const sha = stdout.trim();
  if (exitCode !== 0 || !SHA.test(sha)) {
    throw new GantryError(ErrorCode.NOT_FOUND, `"${revision}" is not a commit in ${cwd}`, { revision });
  }
  return sha;
}

export function isSha(value: string): boolean {
  return SHA.test(value);
}
