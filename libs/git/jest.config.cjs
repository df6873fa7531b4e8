module.exports = { ...require('../../jest.preset.cjs'), displayName: 'git', roots: ['<rootDir>/libs/git'] };
