import { spawn } from 'node:child_process';
import { delimiter, isAbsolute } from 'node:path';
import { ErrorCode, GantryError } from '@gantry/contracts';
import type { AgentCommand } from '../../domain/agent-command.js';
import { BoundedTail, StreamMatcher } from './bounded-tail.js';
import { processGroupRunning } from './process-group.js';

/** The CLI's own words when its credentials are no longer accepted. */
export const DEFAULT_TOKEN_EXPIRED_PATTERN = /token (has )?expired|authentication_error|401 Unauthorized/i;
const MAX_TIMER_MS = 2 ** 31 - 1;

/** The CLI's exit code for an expired or missing login. */
export const TOKEN_EXPIRED_EXIT_CODE = 3;

const AGENT_NOT_STARTED = 'agentNotStarted';

/** `runAgent` failed because the agent binary could not be started at all (missing, not executable). */
export function isAgentNotStarted(error: unknown): error is GantryError {
  return error instanceof GantryError && error.details?.[AGENT_NOT_STARTED] === true;
}

export interface RunAgentOptions {
  command: AgentCommand;
  /** The leased worktree. */
  cwd: string;
  /** The agent's whole environment; `agentEnvironment()` unless given. */
  env?: NodeJS.ProcessEnv;
  /** The job's timeout: SIGTERM to the agent's process group when it is reached. */
  timeoutMs: number;
  /** Time between SIGTERM and SIGKILL. Default 10 s. */
  killGraceMs?: number;
  /** How much of stdout and of stderr is kept (each). Default 64 KiB. */
  outputTailBytes?: number;
  tokenExpiredPattern?: RegExp;
  /** Aborting stops the agent like a timeout does (e.g. the runner is shutting down, the job was cancelled). */
  signal?: AbortSignal;
  onSpawn?: (pid: number) => void;
}

export interface AgentRunResult {
  pid: number;
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  timedOut: boolean;
  /** Stopped through `signal` before its timeout. */
  aborted: boolean;
  /**
   * Exit code 3, or the agent did not exit 0 and its stdout or its stderr matched the token-expired
   * pattern — and the runner did not stop it (not timed out, not aborted).
   */
  tokenExpired: boolean;
  stdoutTail: string;
  stderrTail: string;
  durationMs: number;
  /** Nothing of the agent's process group was left when the run resolved (waited for up to AGENT_AFTER_KILL_MS after its SIGKILL). */
  groupGone: boolean;
  /**
   * The agent's stdout or stderr was still open a kill grace after it exited (or AGENT_AFTER_KILL_MS
   * after its group's SIGKILL): a process outside its group (started in a new session) inherited
   * them. The run did not wait for it (docs/jobs.md, "Cancelling a running job").
   */
  outputHeldOpen: boolean;
}

/**
 * What a run waits after its agent's SIGKILL, twice at most: for the output to close (a process the
 * agent started in a new session may hold it open for ever), then for the process group to be gone.
 * A part of every stop past its grace, so the runner's settings check counts it (runner-config.ts).
 */
export const AGENT_AFTER_KILL_MS = 1_000;

/**
 * Runs one agent process for one job: no shell, its own process group (so a timeout also stops
 * whatever the agent started), output kept as a bounded tail and scanned for an expired token.
 * A binary that cannot be started rejects; every other ending resolves with what happened.
 */
export function runAgent(options: RunAgentOptions): Promise<AgentRunResult> {
  const graceMs = options.killGraceMs ?? 10_000;
  const tailBytes = options.outputTailBytes ?? 64 * 1024;
  const pattern = options.tokenExpiredPattern ?? DEFAULT_TOKEN_EXPIRED_PATTERN;
  const startedAt = performance.now();

  // setTimeout turns anything above 2^31-1 ms into 1 ms: a long timeout would kill the agent at once.
  for (const [name, ms] of [['timeoutMs', options.timeoutMs], ['killGraceMs', graceMs]] as const) {
    if (!Number.isInteger(ms) || ms < 1 || ms > MAX_TIMER_MS) {
      return Promise.reject(new GantryError(ErrorCode.INVALID_COMMAND, `${name} must be a whole number of milliseconds from 1 to ${MAX_TIMER_MS}, got ${ms}`));
    }
  }

  return new Promise((resolve, reject) => {
    if (options.signal?.aborted) {
      reject(new GantryError(ErrorCode.PRECONDITION_FAILED, 'the agent was not started: the run was already stopped'));
      return;
    }
    const child = spawn(options.command.bin, options.command.args, {
      cwd: options.cwd,
      env: options.env ?? agentEnvironment(),
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
      shell: false,
    });
    const stdout = new BoundedTail(tailBytes);
    const stderr = new BoundedTail(tailBytes);
    // One matcher per stream: the two arrive interleaved, and read as one text their pieces could
    // spell the CLI's failure where neither stream says it.
    const stdoutMatcher = new StreamMatcher(pattern);
    const stderrMatcher = new StreamMatcher(pattern);
    child.stdout.on('data', (chunk: Buffer) => {
      stdout.push(chunk);
      stdoutMatcher.push(chunk);
    });
    child.stderr.on('data', (chunk: Buffer) => {
      stderr.push(chunk);
      stderrMatcher.push(chunk);
    });

    let timedOut = false;
    let aborted = false;
    let exit: { code: number | null; signal: NodeJS.Signals | null } | null = null;
    let killTimer: NodeJS.Timeout | undefined;
    /** When the group's SIGKILL is due (epoch ms), once the agent is being stopped. */
    let killAt: number | undefined;
    let outputTimer: NodeJS.Timeout | undefined;
    let outputHeldOpen = false;
    const pid = child.pid;

    const killGroup = (signal: NodeJS.Signals) => {
      if (pid === undefined) return;
      try {
        process.kill(-pid, signal);
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'ESRCH') throw error;
      }
    };
    const stop = () => {
      killGroup('SIGTERM');
      if (killTimer) return;
      killAt = Date.now() + graceMs;
      killTimer = setTimeout(() => killGroup('SIGKILL'), graceMs);
    };
    const timeout = setTimeout(() => {
      timedOut = true;
      stop();
    }, options.timeoutMs);
    const onAbort = () => {
      if (exit) return;
      aborted = true;
      stop();
    };
    options.signal?.addEventListener('abort', onAbort, { once: true });

    child.once('error', (error) => {
      clearTimeout(timeout);
      options.signal?.removeEventListener('abort', onAbort);
      reject(new GantryError(ErrorCode.INTERNAL, `the agent ${options.command.bin} could not be started: ${error.message}`, { [AGENT_NOT_STARTED]: true }));
    });
    if (pid !== undefined) options.onSpawn?.(pid);

    child.once('exit', (code, signal) => {
      exit = { code, signal };
      clearTimeout(timeout);
      // What the agent started and left behind belongs to the finished job: stop it too.
      if (groupAlive(pid)) stop();
      // The run ends when the pipes close, and they close when the last process holding them is gone.
      // One the agent started in a new session (setsid) is out of the group's reach and may hold them
      // for ever: the run would never end — past its timeout, deaf to a cancel or a shutdown — and its
      // job and worktree would stay held. So the pipes get until the group's SIGKILL (the kill grace
      // from when the agent was first stopped, or from now) and AGENT_AFTER_KILL_MS after it to close,
      // then they are let go: never a second kill grace after the SIGKILL.
      const releaseAt = (killAt ?? Date.now() + graceMs) + AGENT_AFTER_KILL_MS;
      outputTimer = setTimeout(() => {
        outputHeldOpen = true;
        child.stdout.destroy();
        child.stderr.destroy();
      }, Math.max(0, releaseAt - Date.now()));
    });
    const finish = async (): Promise<AgentRunResult> => {
      // The run is over only when nothing of the agent can write to the worktree any more.
      if (groupAlive(pid)) killGroup('SIGKILL');
      // What outlives a SIGKILL for long is stuck in the kernel: waiting the kill grace again would not end it.
      const gone = await groupGoneWithin(pid, AGENT_AFTER_KILL_MS);
      const exitCode = exit?.code ?? null;
      return {
        pid: pid!,
        exitCode,
        signal: exit?.signal ?? null,
        timedOut,
        aborted,
        // The pattern stands for the CLI's own failure: an agent that succeeded may well have written
        // those words (a task about authentication), and taking it for an expired token would throw
        // its work away and stop the runner (docs/jobs.md, "Leases and liveness"). So may an agent the
        // runner stopped (its timeout, an abort): that run ended for the runner's reason, not the CLI's.
        tokenExpired:
          !timedOut && !aborted && (exitCode === TOKEN_EXPIRED_EXIT_CODE || (exitCode !== 0 && (stdoutMatcher.matched || stderrMatcher.matched))),
        stdoutTail: stdout.toString(),
        stderrTail: stderr.toString(),
        durationMs: Math.round(performance.now() - startedAt),
        groupGone: gone,
        outputHeldOpen,
      };
    };
    child.once('close', () => {
      clearTimeout(timeout);
      clearTimeout(killTimer);
      clearTimeout(outputTimer);
      options.signal?.removeEventListener('abort', onAbort);
      finish().then(resolve, reject);
    });
  });
}

async function groupGoneWithin(pid: number | undefined, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (groupAlive(pid)) {
    if (Date.now() >= deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return true;
}

function groupAlive(pid: number | undefined): boolean {
  return pid !== undefined && processGroupRunning(pid);
}

/** Variables the agent CLI needs; the runner's own configuration (database, NATS, secrets) stays out, and so do settings that would override the job's. */
const PASSED_THROUGH = ['PATH', 'HOME', 'USER', 'LOGNAME', 'SHELL', 'LANG', 'LC_ALL', 'TZ', 'TMPDIR', 'TERM'];
const PASSED_THROUGH_PREFIXES = ['ANTHROPIC_', 'CLAUDE_'];
/**
 * Of those, the ones the CLI lets win over its command line: the job's configuration, recorded on the
 * job at its claim, is what the command line says, and a host's setting must not replace it unseen.
 */
const KEPT_OUT = ['CLAUDE_CODE_EFFORT_LEVEL'];

/**
 * The agent's environment. Its PATH keeps only absolute entries: the agent runs in its worktree, where
 * a relative entry (`.`, `bin`, an empty one) names the repository's files — the spawn's own lookup of
 * a bare agent name, and every command the agent starts by name, would run what the repository holds.
 * With no absolute entry left PATH is left out (the system's default path is used): an empty PATH
 * would mean the current directory again.
 */
export function agentEnvironment(extra: Record<string, string> = {}, from: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(from)) {
    if (value === undefined || KEPT_OUT.includes(name)) continue;
    if (PASSED_THROUGH.includes(name) || PASSED_THROUGH_PREFIXES.some((prefix) => name.startsWith(prefix))) env[name] = value;
  }
  if (env.PATH !== undefined) {
    const absolute = absolutePathEntries(env.PATH);
    if (absolute.length > 0) env.PATH = absolute.join(delimiter);
    else delete env.PATH;
  }
  return { ...env, ...extra };
}

/** PATH's absolute entries, in order: the ones that name the same directory whatever the cwd. */
export function absolutePathEntries(path: string | undefined): string[] {
  return (path ?? '').split(delimiter).filter((entry) => entry !== '' && isAbsolute(entry));
}
