module.exports = { ...require('../../jest.preset.cjs'), displayName: 'eventstore', roots: ['<rootDir>/libs/eventstore'] };
