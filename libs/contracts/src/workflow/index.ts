export * from './values.js';
export * from './definition.js';
export * from './events.js';
export * from './views.js';
export * from './commands.js';
export * from './queries.js';
