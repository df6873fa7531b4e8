export * from './agent-command.js';
export * from './prompt-templates.js';
export * from './verify-classification.js';
export * from './idempotency-precheck.js';
