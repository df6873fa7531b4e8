module.exports = { ...require('../../jest.preset.cjs'), displayName: 'github-fake', roots: ['<rootDir>/tools/github-fake'] };
