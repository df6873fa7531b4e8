import type { Provider } from '@nestjs/common';
import { PinoLogger } from 'nestjs-pino';
import { WorktreeLocks } from './worktree-locks.js';
import { openGitWorkspace } from './git/index.js';
import { WORKTREE_CONFIG, type WorktreeConfig } from './worktree-config.js';

export const GIT_WORKSPACE = Symbol('gantry:git-workspace');

/** The git layout under the root (from the worktree settings), as an injectable value. */
export const worktreeInfrastructure: Provider[] = [
  WorktreeLocks,
  {
    provide: GIT_WORKSPACE,
    inject: [WORKTREE_CONFIG, PinoLogger, WorktreeLocks],
    useFactory: (config: WorktreeConfig, log: PinoLogger, locks: WorktreeLocks) => {
      log.setContext('git');
      return openGitWorkspace(config.root, {
        commandTimeoutMs: config.gitCommandTimeoutMs,
        networkTimeoutMs: config.gitNetworkTimeoutMs,
        // An agent wrote them; the keys (never their values) say what it tried.
        onForeignConfigRemoved: (keys, dir) => log.warn({ dir, keys }, 'removed git config that service-side git does not accept'),
        // A rescue commit cannot hold them: kept under the root's quarantine (docs/worktrees.md).
        onSetAside: (moved) => log.warn({ moved }, 'repositories inside a worktree moved aside before its rescue'),
        // An agent deleted or rewrote its worktree's .git file; git worktree repair restored it (docs/worktrees.md).
        onGitlinkRepaired: (worktreePath) => log.warn({ worktreePath }, "a worktree's .git file was missing or wrong; repaired from its shared clone"),
        // Replicas on one host share the root and its clones.
        acrossProcesses: (clonePath, work) => locks.onClone(clonePath, work),
      });
    },
  },
];
