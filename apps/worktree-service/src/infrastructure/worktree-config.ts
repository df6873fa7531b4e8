import path from 'node:path';
import { worktreeRootOf } from '@gantry/contracts';

/** The worktree service's own settings, from the environment (see docs/DEVELOPING.md for the shared ones). */
export interface WorktreeConfig {
  /** Where the shared clones and worktrees live; the runners on this host use the same root. */
  root: string;
  /** At most this many worktrees per repository; idle ones beyond it are removed, least recently used first. */
  maxWorktreesPerRepository: number;
  /** How long an acquire waits in line for the lock when the request does not say. */
  defaultLockTimeoutMs: number;
  /** How long an acquire waits, after it got the lock, for the worktree to be created and synced. */
  prepareTimeoutMs: number;
  /** How often the sweep looks for expired leases, overdue waiters and effects left pending. */
  sweepIntervalMs: number;
  /** How often disk use is measured for /ready. */
  diskMeasureIntervalMs: number;
  gitCommandTimeoutMs: number;
  gitNetworkTimeoutMs: number;
  /** A key's stream longer than this has its books closed (the key goes on in a new epoch's stream). */
  epochEvents: number;
}

export const WORKTREE_CONFIG = Symbol('gantry:worktree-config');

function positiveInt(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value <= 0) throw new Error(`${name} must be a positive integer, got ${JSON.stringify(raw)}`);
  return value;
}

export function loadWorktreeConfig(): WorktreeConfig {
  const root = worktreeRootOf(process.env);
  return {
    root: path.resolve(root),
    maxWorktreesPerRepository: positiveInt('GANTRY_WORKTREE_MAX_PER_REPOSITORY', 8),
    defaultLockTimeoutMs: positiveInt('GANTRY_WORKTREE_LOCK_TIMEOUT_MS', 60_000),
    prepareTimeoutMs: positiveInt('GANTRY_WORKTREE_PREPARE_TIMEOUT_MS', 110_000),
    sweepIntervalMs: positiveInt('GANTRY_WORKTREE_SWEEP_INTERVAL_MS', 1_000),
    diskMeasureIntervalMs: positiveInt('GANTRY_WORKTREE_DISK_INTERVAL_MS', 30_000),
    gitCommandTimeoutMs: positiveInt('GANTRY_GIT_COMMAND_TIMEOUT_MS', 30_000),
    gitNetworkTimeoutMs: positiveInt('GANTRY_GIT_NETWORK_TIMEOUT_MS', 300_000),
    epochEvents: positiveInt('GANTRY_WORKTREE_EPOCH_EVENTS', 200),
  };
}
