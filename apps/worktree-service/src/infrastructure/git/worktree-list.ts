/** One record of `git worktree list --porcelain [-z]`. */
export interface WorktreeListEntry {
  path: string;
  headSha: string | null;
  /** The full ref (`refs/heads/x`) checked out, or null when detached or bare. */
  branch: string | null;
  bare: boolean;
  detached: boolean;
  locked: boolean;
  prunable: boolean;
}

/**
 * Parses `git worktree list --porcelain` output, NUL-separated (`-z`) or line-separated: records are
 * separated by an empty field; each field is `<label>[ <value>]`. Unknown labels are ignored, as git
 * documents new ones may appear.
 */
export function parseWorktreeListPorcelain(output: string): WorktreeListEntry[] {
  const separator = output.includes('\0') ? '\0' : '\n';
  const entries: WorktreeListEntry[] = [];
  let current: WorktreeListEntry | null = null;
  for (const field of output.split(separator)) {
    if (field === '') {
      if (current) entries.push(current);
      current = null;
      continue;
    }
    const space = field.indexOf(' ');
    const label = space === -1 ? field : field.slice(0, space);
    const value = space === -1 ? '' : field.slice(space + 1);
    if (label === 'worktree') {
      if (current) entries.push(current);
      current = { path: value, headSha: null, branch: null, bare: false, detached: false, locked: false, prunable: false };
      continue;
    }
    if (!current) continue;
    switch (label) {
      case 'HEAD':
        current.headSha = value;
        break;
      case 'branch':
        current.branch = value;
        break;
      case 'bare':
        current.bare = true;
        break;
      case 'detached':
        current.detached = true;
        break;
      case 'locked':
        current.locked = true;
        break;
      case 'prunable':
        current.prunable = true;
        break;
      default:
        break;
    }
  }
  if (current) entries.push(current);
  return entries;
}
