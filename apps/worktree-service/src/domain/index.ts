export * from './worktree-lock.js';
export * from './worktree-lease.js';
export * from './worktree-effects.js';
export * from './reconciliation.js';
export * from './claim-ends.js';
