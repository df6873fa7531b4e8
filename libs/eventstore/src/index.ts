export * from './lib/types.js';
export * from './lib/database.js';
export * from './lib/migrations.js';
export * from './lib/projection.js';
export * from './lib/event-store.js';
export * from './lib/decider.js';
export * from './lib/rebuild.js';
export * from './lib/retention.js';
export { inlineStatement, jsonRows, JsonRows, type SqlWriter } from './lib/deferred-writes.js';
