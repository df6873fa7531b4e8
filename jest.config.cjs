// Every project's tests in one Jest run (npm test). One project alone: npx nx test <project>.
// testTimeout is a global option: project configs cannot set it when they run as `projects`.
module.exports = {
  projects: ['<rootDir>/libs/*/jest.config.cjs', '<rootDir>/apps/*/jest.config.cjs', '<rootDir>/tools/*/jest.config.cjs'],
  testTimeout: require('./jest.preset.cjs').testTimeout,
};
