import { accessSync, constants, statSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { branchNameProblem, JobKinds, JobKindSchema, repositoryUrlProblem, RunnerIdSchema, worktreeRootOf, type JobKind } from '@gantry/contracts';
import { DEFAULT_RETRY_BACKOFF } from '@gantry/messaging';
import { defineSettings, setting, shutdownGraceSetting, type Refuse } from '@gantry/service-runtime';
import { DEFAULT_AGENT_BIN } from '../domain/agent-command.js';
import { absolutePathEntries, AGENT_AFTER_KILL_MS, DEFAULT_TOKEN_EXPIRED_PATTERN } from '../infrastructure/agent/agent-process.js';

/** Everything the runner daemon takes from its environment (the service basics — NATS, naming, port — come from service-runtime). */
export interface RunnerConfig {
  runnerId: string;
  kinds: JobKind[];
  concurrency: number;
  agentBin: string;
  /** A job's agent timeout unless its payload names one (`timeoutMs`). */
  agentTimeoutMs: number;
  agentKillGraceMs: number;
  /** How often the job lease and the worktree lease are renewed while the agent runs. */
  leaseRenewMs: number;
  jobLeaseMs: number;
  worktreeLeaseMs: number;
  worktreeLockTimeoutMs: number;
  tokenExpiredPattern: RegExp;
  /** A worktree lease whose path lies outside it is refused: GANTRY_WORKTREE_ROOT, else the worktree service's default. */
  worktreeRoot: string;
  /** Per-job scratch files (payload, MCP config) live here, outside every worktree. */
  scratchDir: string;
  /** Used when a job's payload names no repository. */
  defaultRepositoryUrl: string | null;
  /** The branch work is meant to end up on, when the payload names none. */
  defaultTargetBranch: string;
  /** How long one pull from a kind's dispatch consumer waits for an offer. */
  offerPollMs: number;
  /** How long a held offer stays with this runner without a sign of life before it is offered again. */
  offerAckWaitMs: number;
  /** On SIGTERM: how long a running job may go on before its agent is stopped and its claim rolled back. */
  shutdownGraceMs: number;
  /** The process's whole stop (`GANTRY_SHUTDOWN_GRACE_MS`), past which it exits 1: what is left of it bounds the hand-backs at a stop. */
  stopLimitMs: number;
  backoffInitialMs: number;
  backoffMaxMs: number;
  commandTimeoutMs: number;
}

export const RUNNER_CONFIG = Symbol('gantry:runner-config');

const milliseconds = (min: number, max: number, fallback: number) => setting.wholeNumber({ min, max, default: fallback });

const variables = {
  GANTRY_RUNNER_ID: setting.text(),
  GANTRY_RUNNER_KINDS: setting.text(),
  GANTRY_RUNNER_CONCURRENCY: setting.wholeNumber({ min: 1, max: 64, default: 1 }),
  GANTRY_AGENT_BIN: setting.text(DEFAULT_AGENT_BIN),
  // Where a bare GANTRY_AGENT_BIN is looked up (its absolute entries only: see agentBinOf).
  PATH: setting.text(),
  GANTRY_AGENT_TIMEOUT_MS: milliseconds(1, 2 ** 31 - 1, 60 * 60_000),
  GANTRY_AGENT_KILL_GRACE_MS: milliseconds(1, 600_000, 10_000),
  GANTRY_LEASE_RENEW_MS: milliseconds(100, 24 * 3_600_000, 60_000),
  // Defaults follow the renewal: see build.
  GANTRY_JOB_LEASE_MS: setting.wholeNumber({ min: 10_000, max: 2 * 3_600_000 }),
  GANTRY_WORKTREE_LEASE_MS: setting.wholeNumber({ min: 1_000, max: 86_400_000 }),
  GANTRY_WORKTREE_LOCK_TIMEOUT_MS: milliseconds(0, 3_600_000, 60_000),
  GANTRY_TOKEN_EXPIRED_PATTERN: setting.text(),
  GANTRY_WORKTREE_ROOT: setting.text(),
  XDG_STATE_HOME: setting.text(),
  GANTRY_RUNNER_SCRATCH_DIR: setting.text(),
  GANTRY_REPOSITORY_URL: setting.text(),
  GANTRY_TARGET_BRANCH: setting.text('main'),
  GANTRY_OFFER_POLL_MS: milliseconds(1_000, 60_000, 1_000),
  GANTRY_OFFER_ACK_WAIT_MS: milliseconds(3_000, 3_600_000, 30_000),
  GANTRY_RUNNER_SHUTDOWN_GRACE_MS: milliseconds(0, 3_600_000, 15_000),
  // The runtime's: the runner's shutdown steps must end within it (see build).
  GANTRY_SHUTDOWN_GRACE_MS: shutdownGraceSetting(),
  GANTRY_RUNNER_BACKOFF_INITIAL_MS: milliseconds(1, 60_000, 500),
  GANTRY_RUNNER_BACKOFF_MAX_MS: milliseconds(1, 3_600_000, 30_000),
  GANTRY_RUNNER_COMMAND_TIMEOUT_MS: milliseconds(100, 600_000, 10_000),
};

type Refused = Refuse<keyof typeof variables>;

/** The runner daemon's own settings (docs/configuration.md); NATS, naming and port are the runtime's. */
export const runnerSettings = defineSettings({
  name: 'runner',
  token: RUNNER_CONFIG,
  variables,
  build(v, refuse): RunnerConfig {
    const runnerId = v.GANTRY_RUNNER_ID ?? defaultRunnerId(hostname(), process.pid);
    if (!RunnerIdSchema.safeParse(runnerId).success) {
      refuse('GANTRY_RUNNER_ID', 'must be letters, digits, _ and - (it names subjects and idempotency scopes)');
    }
    stopFits(v, refuse);
    // An initial pause above the cap is not a backoff: every pause would be the cap from the first
    // failure on, and a runner meant to retry at once after a blip would sit out the longest pause.
    if (v.GANTRY_RUNNER_BACKOFF_INITIAL_MS > v.GANTRY_RUNNER_BACKOFF_MAX_MS) {
      refuse(
        'GANTRY_RUNNER_BACKOFF_INITIAL_MS',
        `(${v.GANTRY_RUNNER_BACKOFF_INITIAL_MS} ms) must not be longer than GANTRY_RUNNER_BACKOFF_MAX_MS (${v.GANTRY_RUNNER_BACKOFF_MAX_MS} ms), the longest pause`,
      );
    }
    const { jobLeaseMs, worktreeLeaseMs } = leasesOf(v, refuse);
    return {
      runnerId,
      kinds: kindsOf(v.GANTRY_RUNNER_KINDS, refuse),
      concurrency: v.GANTRY_RUNNER_CONCURRENCY,
      agentBin: agentBinOf(v.GANTRY_AGENT_BIN, v.PATH),
      agentTimeoutMs: v.GANTRY_AGENT_TIMEOUT_MS,
      agentKillGraceMs: v.GANTRY_AGENT_KILL_GRACE_MS,
      leaseRenewMs: v.GANTRY_LEASE_RENEW_MS,
      jobLeaseMs,
      worktreeLeaseMs,
      worktreeLockTimeoutMs: v.GANTRY_WORKTREE_LOCK_TIMEOUT_MS,
      tokenExpiredPattern: patternOf(v.GANTRY_TOKEN_EXPIRED_PATTERN, refuse),
      worktreeRoot: resolve(worktreeRootOf({ GANTRY_WORKTREE_ROOT: v.GANTRY_WORKTREE_ROOT, XDG_STATE_HOME: v.XDG_STATE_HOME })),
      // Absolute: the agent starts in its worktree and is handed its payload and MCP config by path
      // (buildAgentCommand refuses a relative one, which would name a file of the repository).
      scratchDir: resolve(v.GANTRY_RUNNER_SCRATCH_DIR ?? join(tmpdir(), `gantry-runner-${runnerId}`)),
      defaultRepositoryUrl: repositoryUrlOf(v.GANTRY_REPOSITORY_URL, refuse),
      defaultTargetBranch: targetBranchOf(v.GANTRY_TARGET_BRANCH, refuse),
      offerPollMs: v.GANTRY_OFFER_POLL_MS,
      offerAckWaitMs: v.GANTRY_OFFER_ACK_WAIT_MS,
      shutdownGraceMs: v.GANTRY_RUNNER_SHUTDOWN_GRACE_MS,
      stopLimitMs: v.GANTRY_SHUTDOWN_GRACE_MS,
      backoffInitialMs: v.GANTRY_RUNNER_BACKOFF_INITIAL_MS,
      backoffMaxMs: v.GANTRY_RUNNER_BACKOFF_MAX_MS,
      commandTimeoutMs: v.GANTRY_RUNNER_COMMAND_TIMEOUT_MS,
    };
  },
});

/** What a stop keeps of its limit, after the hand-backs, for closing NATS and HTTP: 2 s, at most a tenth of the limit. */
export function stopMarginMs(stopLimitMs: number): number {
  return Math.min(2_000, stopLimitMs / 10);
}

/**
 * What a stop keeps, after its agents are stopped, for handing their claims back and releasing their
 * worktrees: a live job service answers in milliseconds. Each gets only what is left of the limit:
 * unanswered then, the claim and the lease are left to expire.
 */
export const HAND_BACK_RESERVE_MS = 1_000;

/**
 * Past the process's stop limit it exits 1 at once: agents (process groups of their own) would run
 * on and their claims would not be given back (docs/jobs.md, "Stopping a runner"). Every part the stop
 * waits for must fit in it: the runs' grace, the agents' kill grace, what a run waits after its agent's
 * SIGKILL (for its output to close, then for its group to be gone: AGENT_AFTER_KILL_MS each), the
 * hand-backs and releases, and the margin for closing NATS and HTTP. Refused naming the variables,
 * each part and the sum when they do not.
 */
function stopFits(
  v: { GANTRY_RUNNER_SHUTDOWN_GRACE_MS: number; GANTRY_AGENT_KILL_GRACE_MS: number; GANTRY_SHUTDOWN_GRACE_MS: number },
  refuse: Refused,
): void {
  const limit = v.GANTRY_SHUTDOWN_GRACE_MS;
  const margin = stopMarginMs(limit);
  const afterKill = 2 * AGENT_AFTER_KILL_MS;
  const needed = v.GANTRY_RUNNER_SHUTDOWN_GRACE_MS + v.GANTRY_AGENT_KILL_GRACE_MS + afterKill + HAND_BACK_RESERVE_MS + margin;
  if (needed <= limit) return;
  refuse(
    'GANTRY_SHUTDOWN_GRACE_MS',
    `(${limit} ms) is shorter than the stop it bounds: GANTRY_RUNNER_SHUTDOWN_GRACE_MS + GANTRY_AGENT_KILL_GRACE_MS + ${afterKill} ms after the SIGKILL for the agents' output and process groups + ${HAND_BACK_RESERVE_MS} ms for the hand-backs and releases + ${margin} ms for closing NATS and HTTP (${v.GANTRY_RUNNER_SHUTDOWN_GRACE_MS} + ${v.GANTRY_AGENT_KILL_GRACE_MS} + ${afterKill} + ${HAND_BACK_RESERVE_MS} + ${margin} = ${needed} ms); the process would exit 1 with its agents running and their claims not given back: raise GANTRY_SHUTDOWN_GRACE_MS or lower the graces`,
  );
}

/** The longest job lease `claim_job` accepts (@gantry/contracts). */
const MAX_JOB_LEASE_MS = 2 * 3_600_000;

/**
 * The shortest lease the renewals can keep (docs/jobs.md, "Leases and liveness"): a renewal is sent
 * at most one interval after the last grant, and when that try goes unanswered for a whole command
 * timeout it must be sent again, after the first retry pause, and given a whole command timeout of
 * its own before the lease runs out. Shorter, one lost reply would outlast the lease: the runner
 * would go on as the holder of a claim or a worktree another runner may already have been given.
 */
export function shortestLeaseMs(renewMs: number, commandTimeoutMs: number): number {
  return renewMs + 2 * commandTimeoutMs + DEFAULT_RETRY_BACKOFF.initialMs;
}

/**
 * The job and worktree leases: three renewal intervals unless set — at least the shortest lease the
 * renewals can keep, and within what the services accept. A lease set shorter than that is refused,
 * naming it; a derived one that cannot be long enough (past the 2 h a claim may ask for) is refused
 * naming GANTRY_LEASE_RENEW_MS. Kept anyway, every long job would lose its claim (an attempt spent)
 * or its worktree (rescued and reset under its agent) to one unanswered renewal.
 */
function leasesOf(
  v: { GANTRY_LEASE_RENEW_MS: number; GANTRY_RUNNER_COMMAND_TIMEOUT_MS: number; GANTRY_JOB_LEASE_MS?: number; GANTRY_WORKTREE_LEASE_MS?: number },
  refuse: Refused,
): { jobLeaseMs: number; worktreeLeaseMs: number } {
  const renewMs = v.GANTRY_LEASE_RENEW_MS;
  const timeoutMs = v.GANTRY_RUNNER_COMMAND_TIMEOUT_MS;
  const shortest = shortestLeaseMs(renewMs, timeoutMs);
  // Derived beyond the services' bounds, a lease would have every claim or acquire refused as invalid.
  const jobLeaseMs = v.GANTRY_JOB_LEASE_MS ?? Math.min(MAX_JOB_LEASE_MS, Math.max(10_000, 3 * renewMs, shortest));
  // (A renewal interval and command timeout the job lease allows keep this one under the worktree service's 24 h.)
  const worktreeLeaseMs = v.GANTRY_WORKTREE_LEASE_MS ?? Math.max(1_000, 3 * renewMs, shortest);
  const rule = `GANTRY_LEASE_RENEW_MS + 2 × GANTRY_RUNNER_COMMAND_TIMEOUT_MS + ${DEFAULT_RETRY_BACKOFF.initialMs} ms (${renewMs} + 2 × ${timeoutMs} + ${DEFAULT_RETRY_BACKOFF.initialMs} = ${shortest} ms)`;
  const why = 'a renewal that goes unanswered must be sent again and answered before the lease runs out';
  for (const [name, leaseMs, set, what] of [
    ['GANTRY_JOB_LEASE_MS', jobLeaseMs, v.GANTRY_JOB_LEASE_MS !== undefined, 'job lease'],
    ['GANTRY_WORKTREE_LEASE_MS', worktreeLeaseMs, v.GANTRY_WORKTREE_LEASE_MS !== undefined, 'worktree lease'],
  ] as const) {
    if (leaseMs >= shortest) continue;
    if (set) refuse(name, `(${leaseMs} ms) must be at least ${rule}: ${why}`);
    else refuse('GANTRY_LEASE_RENEW_MS', `plus 2 × GANTRY_RUNNER_COMMAND_TIMEOUT_MS and ${DEFAULT_RETRY_BACKOFF.initialMs} ms (${shortest} ms) must be at most the ${what} (${leaseMs} ms, at most what the service accepts): ${why}`);
  }
  return { jobLeaseMs, worktreeLeaseMs };
}

/**
 * The agent binary as an absolute path wherever it can be one. The agent is spawned in its worktree,
 * and whatever is resolved there is a file of the repository (or of an earlier agent), which the
 * runner would start as the agent:
 * - a path (it holds a `/`) is made absolute against the directory the runner starts in;
 * - a bare name is looked up now, on PATH's absolute entries only: a relative entry (`.`, `bin`, or an
 *   empty one, which means `.`) would be taken from the worktree at the spawn.
 * A name found on no absolute entry stays a bare name: the agent then fails to start at its first job
 * (the runner's failure, docs/jobs.md), and the agent's PATH holds no relative entry either
 * (`agentEnvironment`), so that lookup cannot land in the worktree.
 */
export function agentBinOf(bin: string, path: string | undefined): string {
  if (bin.includes('/')) return resolve(bin);
  for (const dir of absolutePathEntries(path)) {
    const candidate = join(dir, bin);
    if (isExecutableFile(candidate)) return candidate;
  }
  return bin;
}

function isExecutableFile(path: string): boolean {
  try {
    if (!statSync(path).isFile()) return false;
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/**
 * The repository of a job that names none, by the rules every repository URL of a job passes
 * (@gantry/contracts, `repositoryUrlProblem`): checked only when a job used it, a bad one failed
 * that job instead of the start — and an https URL with credentials went into the worktree lease's
 * command and the run record before anything refused it. The problem never quotes the URL.
 */
function repositoryUrlOf(value: string | undefined, refuse: Refused): string | null {
  if (value === undefined) return null;
  const problem = repositoryUrlProblem(value);
  return problem === null ? value : refuse('GANTRY_REPOSITORY_URL', `is not a repository URL the runner may use: ${problem}`);
}

/**
 * The target branch of a job that names none, by the contract's branch rules (the ones a job's own
 * target branch passes): a name git would read as an option, or no branch name at all, is refused at
 * start rather than on each job that falls back to it.
 */
function targetBranchOf(value: string, refuse: Refused): string {
  const problem = branchNameProblem(value);
  return problem === null ? value : refuse('GANTRY_TARGET_BRANCH', `is not a branch name: ${problem}`);
}

/** `<host>-<pid>` reduced to what a runner id may hold. */
export function defaultRunnerId(host: string, pid: number): string {
  const safeHost = host.replace(/[^A-Za-z0-9_-]+/g, '-').replace(/^[^A-Za-z0-9]+/, '').slice(0, 100) || 'runner';
  return `${safeHost}-${pid}`;
}

function kindsOf(value: string | undefined, refuse: Refused): JobKind[] {
  if (value === undefined) return [...JobKinds];
  const kinds = value.split(',').map((k) => k.trim()).filter((k) => k !== '');
  for (const kind of kinds) {
    if (!JobKindSchema.safeParse(kind).success) refuse('GANTRY_RUNNER_KINDS', `names "${kind}", which is not a job kind (${JobKinds.join(', ')})`);
  }
  if (kinds.length === 0) refuse('GANTRY_RUNNER_KINDS', 'names no job kind');
  return [...new Set(kinds)] as JobKind[];
}

function patternOf(value: string | undefined, refuse: Refused): RegExp {
  if (value === undefined) return DEFAULT_TOKEN_EXPIRED_PATTERN;
  let pattern: RegExp;
  try {
    pattern = new RegExp(value, 'i');
  } catch (error) {
    return refuse('GANTRY_TOKEN_EXPIRED_PATTERN', `is not a regular expression: ${(error as Error).message}`);
  }
  // A pattern that matches nothing at all (`x|`, `.*`) would find an expired token in every agent's
  // output: every failed run would stop the runner's intake.
  if (pattern.test('')) return refuse('GANTRY_TOKEN_EXPIRED_PATTERN', 'matches the empty string, so it would match every output');
  return pattern;
}
