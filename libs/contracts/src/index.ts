export * from './errors.js';
export * from './hashing.js';
export * from './subjects.js';
export * from './envelope.js';
export * from './registry.js';
export * from './jobs/agent-config.js';
export * from './worktrees/index.js';
