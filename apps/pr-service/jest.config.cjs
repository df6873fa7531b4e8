module.exports = { ...require('../../jest.preset.cjs'), displayName: 'pr-service', roots: ['<rootDir>/apps/pr-service'] };
