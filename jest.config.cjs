// Every project's tests in one Jest run (npm test). One project alone: npx nx test <project>.
module.exports = {
  projects: ['<rootDir>/libs/*/jest.config.cjs', '<rootDir>/apps/*/jest.config.cjs', '<rootDir>/tools/*/jest.config.cjs'],
};
