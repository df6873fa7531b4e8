import { execFile } from 'node:child_process';
import { ErrorCode, GantryError } from '@gantry/contracts';
import { gitEnvironment, type CommitIdentity } from './environment.js';
import { commandLineOverrides } from './overrides.js';

/*
 * One git process under the policy of docs/git.md: `git -c <overrides> <args>` without a shell, in
 * the scrubbed environment, killed at its timeout. The config check (repository-config.ts) is the
 * caller's: runGit does it before every command.
 */

export interface GitRunOptions {
  /** Kill git after this long; the call then fails with TIMEOUT. */
  timeoutMs: number;
  /** The directory git runs in: the repository or worktree. Its config is checked before the command runs. */
  cwd?: string;
  /** Written to git's stdin (e.g. patches for `git patch-id`). */
  input?: string;
  maxBufferBytes?: number;
  /** Exit codes that are answers, not failures (e.g. 1 for `merge-base --is-ancestor`). */
  okExitCodes?: readonly number[];
  /** Author and committer of a commit the command makes (`commit-tree`). */
  identity?: CommitIdentity;
  /**
   * Only for the owner of the repository (the worktree service and its shared clones): keys outside
   * the allow-list in config files under `within` are removed before the command instead of refused.
   */
  restoreConfig?: { within: string; onRemoved?: (keys: string[], dir: string) => void };
}

export interface GitResult {
  stdout: string;
  stderr: string;
  exitCode: number;
}

/** git failed: the exit code and git's own words, for the effect's failure report. */
export class GitCommandError extends GantryError {
  constructor(message: string, details: { args: string[]; exitCode: number | null; stderr: string } & Record<string, unknown>, code: ErrorCode = ErrorCode.INTERNAL) {
    super(code, message, details);
    this.name = 'GitCommandError';
  }
}

/**
 * Options before the subcommand (`-c`, `-C`, `--git-dir`, `--exec-path` …) are the policy's alone:
 * a caller names the directory with `cwd` and the identity with `identity`.
 */
export function assertSubcommand(args: readonly string[]): void {
  const subcommand = args[0];
  if (subcommand === undefined || !/^[a-z][a-z0-9-]*$/.test(subcommand)) {
    throw new GitCommandError(
      `git must be called with a subcommand first, got ${JSON.stringify(subcommand ?? null)}: options before it are set by @gantry/git`,
      { args: [...args], exitCode: null, stderr: '' },
      ErrorCode.INVALID_COMMAND,
    );
  }
}

export function spawnGit(args: readonly string[], options: GitRunOptions): Promise<GitResult> {
  assertSubcommand(args);
  const fullArgs = [...commandLineOverrides().flatMap((setting) => ['-c', setting]), ...args];
  const okExitCodes = options.okExitCodes ?? [];
  return new Promise((resolve, reject) => {
    const child = execFile(
      'git',
      fullArgs,
      {
        cwd: options.cwd,
        env: gitEnvironment(options.identity),
        timeout: options.timeoutMs,
        killSignal: 'SIGKILL',
        maxBuffer: options.maxBufferBytes ?? 64 * 1024 * 1024,
        encoding: 'utf8',
        windowsHide: true,
      },
      (error, stdout, stderr) => {
        if (!error) return resolve({ stdout, stderr, exitCode: 0 });
        const failure = error as NodeJS.ErrnoException & { code?: number | string; killed?: boolean; signal?: string | null };
        const exitCode = typeof failure.code === 'number' ? failure.code : null;
        if (exitCode !== null && okExitCodes.includes(exitCode)) return resolve({ stdout, stderr, exitCode });
        const details = { args: [...args], exitCode, stderr: String(stderr).slice(0, 4000) };
        const command = `git ${args.slice(0, 3).join(' ')}`;
        if (failure.code === 'ENOENT' && exitCode === null && !failure.killed) {
          return reject(new GitCommandError(`git is not installed on this host, or ${options.cwd ?? 'the directory'} does not exist`, details, ErrorCode.UNAVAILABLE));
        }
        if (failure.killed || failure.signal) {
          return reject(new GitCommandError(`${command} did not finish within ${options.timeoutMs} ms`, details, ErrorCode.TIMEOUT));
        }
        const said = String(stderr).trim().split('\n').slice(-3).join(' | ');
        reject(new GitCommandError(`${command} failed (exit ${exitCode ?? '?'}): ${said || error.message}`, details));
      },
    );
    // A git that exits without reading its stdin closes the pipe (EPIPE); its exit code already says what happened.
    child.stdin?.on('error', () => undefined);
    child.stdin?.end(options.input);
  });
}
