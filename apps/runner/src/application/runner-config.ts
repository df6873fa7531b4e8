import { hostname, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { JobKinds, JobKindSchema, RunnerIdSchema, worktreeRootOf, type JobKind } from '@gantry/contracts';
import { defineSettings, setting, shutdownGraceSetting, type Refuse } from '@gantry/service-runtime';
import { DEFAULT_AGENT_BIN } from '../domain/agent-command.js';
import { DEFAULT_TOKEN_EXPIRED_PATTERN } from '../infrastructure/agent/agent-process.js';

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
    // Past the process's grace it exits 1 at once: agents (process groups of their own) would run on
    // and their claims would not be given back (docs/jobs.md, "Stopping a runner").
    if (v.GANTRY_RUNNER_SHUTDOWN_GRACE_MS + v.GANTRY_AGENT_KILL_GRACE_MS >= v.GANTRY_SHUTDOWN_GRACE_MS) {
      refuse(
        'GANTRY_RUNNER_SHUTDOWN_GRACE_MS',
        'plus GANTRY_AGENT_KILL_GRACE_MS must be less than GANTRY_SHUTDOWN_GRACE_MS (the stop would exit before the agents are stopped and their claims given back)',
      );
    }
    return {
      runnerId,
      kinds: kindsOf(v.GANTRY_RUNNER_KINDS, refuse),
      concurrency: v.GANTRY_RUNNER_CONCURRENCY,
      agentBin: v.GANTRY_AGENT_BIN,
      agentTimeoutMs: v.GANTRY_AGENT_TIMEOUT_MS,
      agentKillGraceMs: v.GANTRY_AGENT_KILL_GRACE_MS,
      leaseRenewMs: v.GANTRY_LEASE_RENEW_MS,
      jobLeaseMs: v.GANTRY_JOB_LEASE_MS ?? Math.max(10_000, 3 * v.GANTRY_LEASE_RENEW_MS),
      worktreeLeaseMs: v.GANTRY_WORKTREE_LEASE_MS ?? Math.max(1_000, 3 * v.GANTRY_LEASE_RENEW_MS),
      worktreeLockTimeoutMs: v.GANTRY_WORKTREE_LOCK_TIMEOUT_MS,
      tokenExpiredPattern: patternOf(v.GANTRY_TOKEN_EXPIRED_PATTERN, refuse),
      worktreeRoot: resolve(worktreeRootOf({ GANTRY_WORKTREE_ROOT: v.GANTRY_WORKTREE_ROOT, XDG_STATE_HOME: v.XDG_STATE_HOME })),
      scratchDir: v.GANTRY_RUNNER_SCRATCH_DIR ?? join(tmpdir(), `gantry-runner-${runnerId}`),
      defaultRepositoryUrl: v.GANTRY_REPOSITORY_URL ?? null,
      defaultTargetBranch: v.GANTRY_TARGET_BRANCH,
      offerPollMs: v.GANTRY_OFFER_POLL_MS,
      offerAckWaitMs: v.GANTRY_OFFER_ACK_WAIT_MS,
      shutdownGraceMs: v.GANTRY_RUNNER_SHUTDOWN_GRACE_MS,
      backoffInitialMs: v.GANTRY_RUNNER_BACKOFF_INITIAL_MS,
      backoffMaxMs: v.GANTRY_RUNNER_BACKOFF_MAX_MS,
      commandTimeoutMs: v.GANTRY_RUNNER_COMMAND_TIMEOUT_MS,
    };
  },
});

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
  try {
    return new RegExp(value, 'i');
  } catch (error) {
    return refuse('GANTRY_TOKEN_EXPIRED_PATTERN', `is not a regular expression: ${(error as Error).message}`);
  }
}
