// Shared Jest settings: native ESM, TypeScript through SWC, workspace libraries resolved to their sources.
const path = require('node:path');
const swcrc = require('./swc.jest.cjs');

module.exports = {
  testEnvironment: 'node',
  testEnvironmentOptions: { customExportConditions: ['@gantry/source', 'node', 'node-addons'] },
  extensionsToTreatAsEsm: ['.ts'],
  moduleFileExtensions: ['ts', 'js', 'mjs', 'cjs', 'json'],
  moduleNameMapper: { '^(\\.{1,2}/.*)\\.js$': '$1' },
  transform: { '^.+\\.ts$': ['@swc/jest', swcrc] },
  testMatch: ['**/?(*.)+(spec|test).ts'],
  testPathIgnorePatterns: ['/node_modules/', '/dist/'],
  testTimeout: 60000,
  setupFiles: [path.resolve(__dirname, 'jest.setup.cjs')],
  rootDir: path.resolve(__dirname),
};
