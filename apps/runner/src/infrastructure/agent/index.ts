export * from './agent-process.js';
export { BoundedTail, StreamMatcher } from './bounded-tail.js';
