import { execFile } from 'node:child_process';
import { ErrorCode, GantryError } from '@gantry/contracts';

/*
 * The only way Gantry runs git (the worktree service and the runner alike): `execFile('git', args)` — no shell — with transports that
 * run commands disabled, no terminal prompts, no repository-configured programs (fsmonitor,
 * hooks), and a timeout. Callers put operands after `--` wherever git accepts it.
 */

const HARDENING = [
  '-c', 'protocol.ext.allow=never',
  '-c', 'protocol.fd.allow=never',
  // A repository's own config must not make us run programs: no fsmonitor, no hooks.
  '-c', 'core.fsmonitor=false',
  '-c', 'core.hooksPath=/dev/null',
];

// Inherited variables that would point git at another repository than the one we name.
const REPOSITORY_ENV = ['GIT_DIR', 'GIT_WORK_TREE', 'GIT_INDEX_FILE', 'GIT_COMMON_DIR', 'GIT_OBJECT_DIRECTORY', 'GIT_ALTERNATE_OBJECT_DIRECTORIES', 'GIT_NAMESPACE', 'GIT_PREFIX'];

function gitEnvironment(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, GIT_TERMINAL_PROMPT: '0', LC_ALL: 'C' };
  for (const name of REPOSITORY_ENV) delete env[name];
  return env;
}

export interface GitRunOptions {
  /** Kill git after this long; the call then fails with TIMEOUT. */
  timeoutMs: number;
  /** Directory git runs in (callers may use `-C <dir>` instead). */
  cwd?: string;
  /** Written to git's stdin (e.g. patches for `git patch-id`). */
  input?: string;
  maxBufferBytes?: number;
  /** Exit codes that are answers, not failures (e.g. 1 for `merge-base --is-ancestor`). */
  okExitCodes?: readonly number[];
}

export interface GitResult {
  stdout: string;
  stderr: string;
  exitCode: number;
}

/** git failed: the exit code and git's own words, for the effect's failure report. */
export class GitCommandError extends GantryError {
  constructor(message: string, details: { args: string[]; exitCode: number | null; stderr: string }, code: ErrorCode = ErrorCode.INTERNAL) {
    super(code, message, details);
    this.name = 'GitCommandError';
  }
}

/** Runs `git <hardening> <args>`; resolves with the output, rejects with a GitCommandError. */
export function runGit(args: readonly string[], options: GitRunOptions): Promise<GitResult> {
  const fullArgs = [...HARDENING, ...args];
  const okExitCodes = options.okExitCodes ?? [];
  return new Promise((resolve, reject) => {
    const child = execFile(
      'git',
      fullArgs,
      {
        cwd: options.cwd,
        env: gitEnvironment(),
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
        if (failure.code === 'ENOENT') {
          return reject(new GitCommandError('git is not installed on this host', details, ErrorCode.UNAVAILABLE));
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
