export { runGit } from './git-command.js';
export { GitCommandError, type GitResult, type GitRunOptions } from './git-process.js';
export type { CommitIdentity } from './environment.js';
export { ALLOWED_PROTOCOLS } from './environment.js';
export { CREDENTIAL_HELPER_VARIABLE } from './overrides.js';
export {
  assertRepositoryConfig,
  describeConfigKey,
  isAllowedRepositoryKey,
  listRepositoryConfig,
  removeForeignConfig,
  type RepositoryConfigEntry,
} from './repository-config.js';
export { assertBaseRef, assertBranchName, assertRepositoryUrl, assertSha, COMMITS_QUERY_ARGS, commitsQuery, isSha } from './operands.js';
