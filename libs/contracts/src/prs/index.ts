export * from './values.js';
export * from './events.js';
export * from './commands.js';
export * from './sizes.js';
