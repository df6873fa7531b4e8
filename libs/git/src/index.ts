export { runGit, GitCommandError, type GitResult, type GitRunOptions } from './git-command.js';
