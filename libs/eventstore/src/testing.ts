// Test helpers of @gantry/eventstore (import from '@gantry/eventstore/testing'; they use Jest's expect).
// Only the pure decider parts are loaded: no pg, no connection.
export { DeciderSpecification, type DeciderThen, type DeciderSpecificationOptions } from './lib/decider-specification.js';
export type { Decider, DomainEvent } from './lib/decider.js';
