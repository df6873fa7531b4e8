export * from './agent-config.js';
export * from './values.js';
export * from './events.js';
export * from './sprint-run-events.js';
export * from './commands.js';
export * from './sprint-run-commands.js';
export * from './views.js';
export * from './queries.js';
