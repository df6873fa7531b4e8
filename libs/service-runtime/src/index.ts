export * from './lib/config.js';
export * from './lib/logger.js';
export * from './lib/readiness.js';
export * from './lib/consumers.js';
export * from './lib/command-handler.decorator.js';
export * from './lib/runtime.module.js';
export * from './lib/bootstrap.js';
export * from './lib/http.controllers.js';
