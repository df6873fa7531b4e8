export * from './worktree-lease-client.js';
export * from './push-branch.js';
