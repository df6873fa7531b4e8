export { runGit, GitCommandError, type GitResult, type GitRunOptions } from '@gantry/git';
export {
  openGitWorkspace,
  resolveInsideRoot,
  worktreePathFor,
  clonePathFor,
  assertBranchName,
  assertBaseRef,
  assertRepositoryUrl,
  assertWorktreeKey,
  withSignal,
  type GitWorkspace,
  type GitWorkspaceOptions,
  type CloneLock,
} from './workspace.js';
export { ensureSharedClone, sharedCloneFetchCount, type SharedClone } from './shared-clone.js';
export {
  createOrReuseWorktree,
  syncWorktree,
  isWorktreeDirty,
  rescueWorktree,
  earlierRescue,
  removeWorktree,
  rescueAndRemoveWorktree,
  listWorktrees,
  listClones,
  pruneWorktrees,
  quarantineOrphanDirectory,
  type PreparedWorktree,
  type SyncedWorktree,
  type RescueResult,
  type WorktreeOnDisk,
  type WorktreeInventory,
} from './worktree-operations.js';
export { parseWorktreeListPorcelain, type WorktreeListEntry } from './worktree-list.js';
export { measureDiskUsage } from './disk-usage.js';
