module.exports = { ...require('../../jest.preset.cjs'), displayName: 'contracts', roots: ['<rootDir>/libs/contracts'] };
