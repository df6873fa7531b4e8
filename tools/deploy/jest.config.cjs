// Checks of the deployment files (Dockerfile, docker-compose.yml, deploy/) that Docker cannot run here.
module.exports = { ...require('../../jest.preset.cjs'), displayName: 'deploy', roots: ['<rootDir>/tools/deploy'] };
