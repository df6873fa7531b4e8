import type { Provider } from '@nestjs/common';
import { openGitWorkspace } from './git/index.js';
import { loadWorktreeConfig, WORKTREE_CONFIG, type WorktreeConfig } from './worktree-config.js';

export const GIT_WORKSPACE = Symbol('gantry:git-workspace');

/** The worktree settings and the git layout under the root, as injectable values. */
export const worktreeInfrastructure: Provider[] = [
  { provide: WORKTREE_CONFIG, useFactory: loadWorktreeConfig },
  {
    provide: GIT_WORKSPACE,
    inject: [WORKTREE_CONFIG],
    useFactory: (config: WorktreeConfig) =>
      openGitWorkspace(config.root, { commandTimeoutMs: config.gitCommandTimeoutMs, networkTimeoutMs: config.gitNetworkTimeoutMs }),
  },
];
