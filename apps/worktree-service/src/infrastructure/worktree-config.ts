import path from 'node:path';
import { worktreeRootOf } from '@gantry/contracts';
import { defineSettings, setting } from '@gantry/service-runtime';

/** The worktree service's own settings (docs/configuration.md); the shared ones are the runtime's. */
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

const milliseconds = (fallback: number) => setting.wholeNumber({ min: 1, max: 2 ** 31 - 1, default: fallback });

export const worktreeSettings = defineSettings({
  name: 'worktrees',
  token: WORKTREE_CONFIG,
  variables: {
    GANTRY_WORKTREE_ROOT: setting.text(),
    XDG_STATE_HOME: setting.text(),
    GANTRY_WORKTREE_MAX_PER_REPOSITORY: setting.wholeNumber({ min: 1, max: 10_000, default: 8 }),
    GANTRY_WORKTREE_LOCK_TIMEOUT_MS: milliseconds(60_000),
    GANTRY_WORKTREE_PREPARE_TIMEOUT_MS: milliseconds(110_000),
    GANTRY_WORKTREE_SWEEP_INTERVAL_MS: milliseconds(1_000),
    GANTRY_WORKTREE_DISK_INTERVAL_MS: milliseconds(30_000),
    GANTRY_GIT_COMMAND_TIMEOUT_MS: milliseconds(30_000),
    GANTRY_GIT_NETWORK_TIMEOUT_MS: milliseconds(300_000),
    GANTRY_WORKTREE_EPOCH_EVENTS: setting.wholeNumber({ min: 1, max: 1_000_000, default: 200 }),
  },
  build: (v): WorktreeConfig => ({
    root: path.resolve(worktreeRootOf({ GANTRY_WORKTREE_ROOT: v.GANTRY_WORKTREE_ROOT, XDG_STATE_HOME: v.XDG_STATE_HOME })),
    maxWorktreesPerRepository: v.GANTRY_WORKTREE_MAX_PER_REPOSITORY,
    defaultLockTimeoutMs: v.GANTRY_WORKTREE_LOCK_TIMEOUT_MS,
    prepareTimeoutMs: v.GANTRY_WORKTREE_PREPARE_TIMEOUT_MS,
    sweepIntervalMs: v.GANTRY_WORKTREE_SWEEP_INTERVAL_MS,
    diskMeasureIntervalMs: v.GANTRY_WORKTREE_DISK_INTERVAL_MS,
    gitCommandTimeoutMs: v.GANTRY_GIT_COMMAND_TIMEOUT_MS,
    gitNetworkTimeoutMs: v.GANTRY_GIT_NETWORK_TIMEOUT_MS,
    epochEvents: v.GANTRY_WORKTREE_EPOCH_EVENTS,
  }),
});
