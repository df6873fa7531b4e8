export * from './job-reporter.js';
export * from './bearer-secret.js';
export * from './mcp-config-file.js';
export * from './tool-server.js';
