export * from './verify-worktree.js';
export * from './plan-precheck.js';
export { git, resolveCommit, resolveCommits, isSha, type GitResult, type GitOptions } from './git.js';
export * from './finish-facts.js';
