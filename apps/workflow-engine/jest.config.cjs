module.exports = { ...require('../../jest.preset.cjs'), displayName: 'workflow-engine', roots: ['<rootDir>/apps/workflow-engine'] };
