module.exports = { ...require('../../jest.preset.cjs'), displayName: 'messaging', roots: ['<rootDir>/libs/messaging'] };
