export { createGitFixture, plainGit, plainGitEnvironment, snapshotTree, type GitFixture } from './git-fixture.js';
