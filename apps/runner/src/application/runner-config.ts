import { hostname, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { ErrorCode, GantryError, JobKinds, JobKindSchema, RunnerIdSchema, worktreeRootOf, type JobKind } from '@gantry/contracts';
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

type Env = Record<string, string | undefined>;

export function loadRunnerConfig(env: Env = process.env, defaults: { hostname?: string; pid?: number } = {}): RunnerConfig {
  const leaseRenewMs = integer(env, 'GANTRY_LEASE_RENEW_MS', 60_000, 100, 24 * 3_600_000);
  const runnerId = env.GANTRY_RUNNER_ID?.trim() || defaultRunnerId(defaults.hostname ?? hostname(), defaults.pid ?? process.pid);
  if (!RunnerIdSchema.safeParse(runnerId).success) {
    refuse(`GANTRY_RUNNER_ID "${runnerId}" must be letters, digits, _ and - (it names subjects and idempotency scopes)`);
  }
  return {
    runnerId,
    kinds: kindsOf(env.GANTRY_RUNNER_KINDS),
    concurrency: integer(env, 'GANTRY_RUNNER_CONCURRENCY', 1, 1, 64),
    agentBin: env.GANTRY_AGENT_BIN?.trim() || DEFAULT_AGENT_BIN,
    agentTimeoutMs: integer(env, 'GANTRY_AGENT_TIMEOUT_MS', 60 * 60_000, 1, 2 ** 31 - 1),
    agentKillGraceMs: integer(env, 'GANTRY_AGENT_KILL_GRACE_MS', 10_000, 1, 600_000),
    leaseRenewMs,
    jobLeaseMs: integer(env, 'GANTRY_JOB_LEASE_MS', Math.max(10_000, 3 * leaseRenewMs), 10_000, 2 * 3_600_000),
    worktreeLeaseMs: integer(env, 'GANTRY_WORKTREE_LEASE_MS', Math.max(1_000, 3 * leaseRenewMs), 1_000, 86_400_000),
    worktreeLockTimeoutMs: integer(env, 'GANTRY_WORKTREE_LOCK_TIMEOUT_MS', 60_000, 0, 3_600_000),
    tokenExpiredPattern: patternOf(env.GANTRY_TOKEN_EXPIRED_PATTERN),
    worktreeRoot: resolve(worktreeRootOf(env)),
    scratchDir: env.GANTRY_RUNNER_SCRATCH_DIR?.trim() || join(tmpdir(), `gantry-runner-${runnerId}`),
    defaultRepositoryUrl: env.GANTRY_REPOSITORY_URL?.trim() || null,
    defaultTargetBranch: env.GANTRY_TARGET_BRANCH?.trim() || 'main',
    offerPollMs: integer(env, 'GANTRY_OFFER_POLL_MS', 1_000, 1_000, 60_000),
    offerAckWaitMs: integer(env, 'GANTRY_OFFER_ACK_WAIT_MS', 30_000, 3_000, 3_600_000),
    shutdownGraceMs: integer(env, 'GANTRY_RUNNER_SHUTDOWN_GRACE_MS', 15_000, 0, 3_600_000),
    backoffInitialMs: integer(env, 'GANTRY_RUNNER_BACKOFF_INITIAL_MS', 500, 1, 60_000),
    backoffMaxMs: integer(env, 'GANTRY_RUNNER_BACKOFF_MAX_MS', 30_000, 1, 3_600_000),
    commandTimeoutMs: integer(env, 'GANTRY_RUNNER_COMMAND_TIMEOUT_MS', 10_000, 100, 600_000),
  };
}

/** `<host>-<pid>` reduced to what a runner id may hold. */
export function defaultRunnerId(host: string, pid: number): string {
  const safeHost = host.replace(/[^A-Za-z0-9_-]+/g, '-').replace(/^[^A-Za-z0-9]+/, '').slice(0, 100) || 'runner';
  return `${safeHost}-${pid}`;
}

function kindsOf(value: string | undefined): JobKind[] {
  if (value === undefined || value.trim() === '') return [...JobKinds];
  const kinds = value.split(',').map((k) => k.trim()).filter((k) => k !== '');
  for (const kind of kinds) {
    if (!JobKindSchema.safeParse(kind).success) refuse(`GANTRY_RUNNER_KINDS names "${kind}", which is not a job kind (${JobKinds.join(', ')})`);
  }
  if (kinds.length === 0) refuse('GANTRY_RUNNER_KINDS names no job kind');
  return [...new Set(kinds)] as JobKind[];
}

function patternOf(value: string | undefined): RegExp {
  if (value === undefined || value.trim() === '') return DEFAULT_TOKEN_EXPIRED_PATTERN;
  try {
    return new RegExp(value, 'i');
  } catch (error) {
    return refuse(`GANTRY_TOKEN_EXPIRED_PATTERN is not a regular expression: ${(error as Error).message}`);
  }
}

function integer(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = env[name];
  if (raw === undefined || raw.trim() === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min || value > max) refuse(`${name} must be a whole number from ${min} to ${max}, got "${raw}"`);
  return value;
}

function refuse(sentence: string): never {
  throw new GantryError(ErrorCode.INVALID_COMMAND, sentence);
}
