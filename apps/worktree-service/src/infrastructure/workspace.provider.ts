import type { Provider } from '@nestjs/common';
import { PinoLogger } from 'nestjs-pino';
import { openGitWorkspace } from './git/index.js';
import { loadWorktreeConfig, WORKTREE_CONFIG, type WorktreeConfig } from './worktree-config.js';

export const GIT_WORKSPACE = Symbol('gantry:git-workspace');

/** The worktree settings and the git layout under the root, as injectable values. */
export const worktreeInfrastructure: Provider[] = [
  { provide: WORKTREE_CONFIG, useFactory: loadWorktreeConfig },
  {
    provide: GIT_WORKSPACE,
    inject: [WORKTREE_CONFIG, PinoLogger],
    useFactory: (config: WorktreeConfig, log: PinoLogger) => {
      log.setContext('git');
      return openGitWorkspace(config.root, {
        commandTimeoutMs: config.gitCommandTimeoutMs,
        networkTimeoutMs: config.gitNetworkTimeoutMs,
        // An agent wrote them; the keys (never their values) say what it tried.
        onForeignConfigRemoved: (keys, dir) => log.warn({ dir, keys }, 'removed git config that service-side git does not accept'),
      });
    },
  },
];
