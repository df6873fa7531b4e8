module.exports = { ...require('../../jest.preset.cjs'), displayName: 'runner', roots: ['<rootDir>/apps/runner'] };
