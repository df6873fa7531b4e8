export * from './lib/bus.js';
export * from './lib/commands.js';
export * from './lib/relay.js';
export * from './lib/durable-reader.js';
export * from './lib/event-consumer.js';
export * from './lib/shared-durable.js';
export * from './lib/dead-letters.js';
export * from './lib/pages.js';
