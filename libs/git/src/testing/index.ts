export { createGitFixture, createGitFixtureTemplate, plainGit, plainGitEnvironment, snapshotTree, type GitFixture, type GitFixtureTemplate } from './git-fixture.js';
