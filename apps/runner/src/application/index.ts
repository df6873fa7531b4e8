export * from './runner-config.js';
export * from './backoff.js';
export * from './slots.js';
export * from './job-workspace.js';
export * from './job-run.js';
export * from './orphaned-agents.js';
export * from './runner-daemon.js';
