export * from './git-names.js';
export * from './commands.js';
export * from './events.js';
export * from './worktree-root.js';
