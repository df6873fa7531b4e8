module.exports = { ...require('../../jest.preset.cjs'), displayName: 'system-tests', roots: ['<rootDir>/tools/system-tests'] };
