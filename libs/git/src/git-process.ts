import { ErrorCode } from '@gantry/contracts';
import { GitConstructError, GitPluginError, simpleGit, type SimpleGitOptions } from 'simple-git';
import { gitEnvironment, type CommitIdentity } from './environment.js';
import { GitCommandError } from './git-command-error.js';
import { commandLineOverrides } from './overrides.js';
import { assertNoUnsafeOperation, POLICY_OPT_INS } from './unsafe-operations.js';

export { GitCommandError };

/*
 * One git process under the policy of docs/git.md, started by simple-git: `git -c <overrides> <args>`
 * without a shell, in the scrubbed environment, stopped at its deadline. The caller's arguments pass
 * simple-git's guard with every protection on first (unsafe-operations.ts). The config check
 * (repository-config.ts) is the caller's: runGit does it before every command.
 */

export interface GitRunOptions {
  /** Stop git after this long; the call then fails with TIMEOUT. */
  timeoutMs: number;
  /** The directory git runs in: the repository or worktree. Its config is checked before the command runs. */
  cwd?: string;
  /** Written to git's stdin (e.g. patches for `git patch-id`). */
  input?: string;
  /** More output than this (stdout and stderr together) stops git and fails the call; default 64 MiB. */
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
  /**
   * Stops git when it aborts (a lock the caller held for the command was lost): the call then
   * rejects with the signal's reason, and one asked for after it rejects before git is started.
   */
  signal?: AbortSignal;
}

export interface GitResult {
  stdout: string;
  stderr: string;
  exitCode: number;
}

const DEFAULT_MAX_BUFFER_BYTES = 64 * 1024 * 1024;

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

/** Runs git after the caller's arguments passed simple-git's guard with every protection on. */
export function spawnGit(args: readonly string[], options: GitRunOptions): Promise<GitResult> {
  assertNoUnsafeOperation(args);
  return spawnUnderPolicy(args, options, {});
}

/**
 * Runs git with the guard on the caller's arguments relaxed by `optIns`: only for a command this
 * library writes itself and whose reason it states where it calls this (the removal of a key with
 * `git config --file`, which the guard counts as a write of that key).
 */
export async function spawnUnderPolicy(args: readonly string[], options: GitRunOptions, optIns: SimpleGitOptions['unsafe']): Promise<GitResult> {
  assertSubcommand(args);
  options.signal?.throwIfAborted();
  const details = (stderr: string, exitCode: number | null) => ({ args: [...args], exitCode, stderr: stderr.slice(0, 4000) });
  const command = `git ${args.slice(0, 3).join(' ')}`;
  const okExitCodes = options.okExitCodes ?? [];
  const maxBufferBytes = options.maxBufferBytes ?? DEFAULT_MAX_BUFFER_BYTES;
  const environment = gitEnvironment(options.identity);
  // A hard deadline: simple-git's own `timeout.block` restarts whenever git writes, so a git that
  // trickles progress would never meet it. Aborting makes simple-git kill the process.
  const deadline = new AbortController();
  // Filled in by simple-git's callbacks: why git was stopped, and how it ended.
  const run: { stopped?: 'timeout' | 'output' | 'aborted'; exitCode?: number; stderr: string } = { stderr: '' };
  const stop = (why: 'timeout' | 'output' | 'aborted') => {
    run.stopped ??= why;
    deadline.abort();
  };
  const timer = setTimeout(() => stop('timeout'), options.timeoutMs);
  const aborted = () => stop('aborted');
  options.signal?.addEventListener('abort', aborted, { once: true });
  try {
    const git = simpleGit({
      baseDir: options.cwd ?? process.cwd(),
      config: commandLineOverrides(),
      unsafe: { ...POLICY_OPT_INS, ...optIns },
      // The policy's own variables; simple-git drops every other GIT_* variable (and EDITOR, PAGER …)
      // and refuses the command if one was set on purpose. environment.ts has dropped them already.
      allowEnvironment: Object.keys(environment).filter((name) => name.startsWith('GIT_')),
      abort: deadline.signal,
      // Always written and closed, so a git that reads stdin never waits for more.
      input: () => Buffer.from(options.input ?? ''),
      // The exit code decides, not whether git wrote to stderr (simple-git's default).
      errors: (error, result) => {
        run.exitCode = result.exitCode;
        run.stderr = Buffer.concat(result.stdErr).toString('utf8');
        return error instanceof GitPluginError ? error : undefined;
      },
    })
      .env(environment)
      .outputHandler((_command, stdout, stderr) => {
        let bytes = 0;
        const count = (chunk: Buffer | string) => {
          bytes += chunk.length;
          if (bytes > maxBufferBytes) stop('output');
        };
        stdout.on('data', count);
        stderr.on('data', count);
        answeredOnceEnded(stdout, stderr);
      });
    const stdout = await git.raw([...args]);
    const { exitCode: code, stderr } = run;
    if (code === 0 || (code !== undefined && okExitCodes.includes(code))) return { stdout, stderr, exitCode: code };
    // simple-git reports a process that could not be started with node's negative errno (ENOENT: -2).
    if (typeof code === 'number' && code < 0) {
      throw new GitCommandError('git is not installed on this host, or could not be started', details('', null), ErrorCode.UNAVAILABLE);
    }
    // No exit code: killed by a signal that was not ours.
    if (typeof code !== 'number') throw new GitCommandError(`${command} was killed`, details(stderr, null));
    const said = stderr.trim().split('\n').slice(-3).join(' | ');
    throw new GitCommandError(`${command} failed (exit ${code}): ${said || 'git said nothing'}`, details(stderr, code));
  } catch (error) {
    if (error instanceof GitCommandError) throw error;
    const { stderr, stopped } = run;
    // The caller's reason (a lock lost) says what happened; git's own words after a kill do not.
    if (stopped === 'aborted') options.signal!.throwIfAborted();
    if (stopped === 'timeout') {
      throw new GitCommandError(`${command} did not finish within ${options.timeoutMs} ms`, details(stderr, null), ErrorCode.TIMEOUT);
    }
    if (stopped === 'output') {
      throw new GitCommandError(`${command} wrote more than ${maxBufferBytes} bytes and was stopped`, details('', null));
    }
    if (error instanceof GitConstructError) {
      throw new GitCommandError(`${options.cwd ?? 'the directory'} does not exist`, details('', null), ErrorCode.UNAVAILABLE);
    }
    if (error instanceof GitPluginError && (error.plugin === 'unsafe' || error.plugin === 'allowEnvironment')) {
      // The policy's own settings are opted in: this is a setting of ours the guard does not know.
      throw new GitCommandError(`${command} refused by simple-git's guard: ${error.message}`, details('', null), ErrorCode.INVALID_COMMAND);
    }
    throw new GitCommandError(`${command} failed: ${error instanceof Error ? error.message : String(error)}`, details(stderr, run.exitCode ?? null));
  } finally {
    clearTimeout(timer);
    options.signal?.removeEventListener('abort', aborted);
  }
}

/**
 * simple-git (its completion plugin, not configurable in 4.x) waits a fixed 50 ms after a git that
 * wrote nothing before it reports the process finished. Commands that answer with their exit code
 * alone (the status of a clean worktree, a fetch with nothing new, `merge-base --is-ancestor`,
 * `worktree add --quiet`) are a third of a job's git processes and took most of its git time that
 * way (docs/git.md, "Cost"). Once both of git's pipes have ended there is nothing more to come, so an
 * empty chunk on stdout then tells the plugin that git answered (the output is unchanged). A process
 * that exits while its pipes are still open (a helper it started holds them) keeps the plugin's wait.
 */
function answeredOnceEnded(stdout: NodeJS.ReadableStream, stderr: NodeJS.ReadableStream): void {
  let open = 2;
  const ended = () => {
    if (--open === 0) stdout.emit('data', EMPTY);
  };
  stdout.once('end', ended);
  stderr.once('end', ended);
}

const EMPTY = Buffer.alloc(0);
