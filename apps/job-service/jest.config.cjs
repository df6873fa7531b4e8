module.exports = { ...require('../../jest.preset.cjs'), displayName: 'job-service', roots: ['<rootDir>/apps/job-service'] };
