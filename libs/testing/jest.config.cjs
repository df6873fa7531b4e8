module.exports = { ...require('../../jest.preset.cjs'), displayName: 'testing', roots: ['<rootDir>/libs/testing'] };
