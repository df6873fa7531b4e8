export * from './git-names.js';
export * from './commands.js';
export * from './events.js';
