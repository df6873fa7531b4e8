module.exports = { ...require('../../jest.preset.cjs'), displayName: 'worktree-service', roots: ['<rootDir>/apps/worktree-service'] };
