module.exports = { ...require('../../jest.preset.cjs'), displayName: 'service-runtime', roots: ['<rootDir>/libs/service-runtime'] };
