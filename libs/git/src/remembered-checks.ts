import { lstat, readFile } from 'node:fs/promises';
import type { BigIntStats } from 'node:fs';
import path from 'node:path';
import { LRUCache } from 'lru-cache';

/*
 * Config checks that passed, remembered while nothing they depended on changed. Listing a
 * repository's config is a git process of its own, one before every command, and starting a process
 * is the dearest step of a short git command (about 14 ms from a Node service on our 2-core machines,
 * the command itself often less). A service runs dozens of commands per job in the same worktree,
 * whose config does not change in between unless someone writes it. See docs/git.md, "Checks
 * remembered".
 *
 * What git reads to find a directory's config is a handful of files: `<dir>/.git` (a directory, or
 * a file naming the git directory), the git directory's `HEAD` and `commondir`, the common
 * directory's `objects` and `refs`, and its `config`. After a check that passed, their identities
 * (inode, type, mode, size, change and modification times; the small files' content) are
 * remembered, and a later check whose files all still look the same is not run again. Any write
 * changes a file's change time (ctime), which no one can set back: not even `touch -d`, which sets
 * the modification time and moves the change time to now. A write in the same clock tick as an
 * earlier one could keep it, so only files whose last change is older than `SETTLED_MS` are trusted:
 * any later write then has a later ctime. A file changed more recently is checked every time until
 * it settles.
 *
 * Not remembered at all: a check that did not pass, a directory whose git directory git found in a
 * way this model does not follow (a parent's repository, a symbolic link among the files above), and
 * a repository with per-worktree config (`extensions.worktreeConfig`), whose extra file this model
 * does not track. A remembered check is run again at least every `REMEMBER_MS` anyway.
 */

/** Files changed less than this long ago are not trusted: enough for every file system's timestamp granularity (2 s on FAT). */
const SETTLED_MS = 2_000;
const REMEMBER_MS = 60_000;
const REMEMBERED_DIRECTORIES = 1_000;
const SMALL_FILE_BYTES = 4_096n;

/** What git's discovery and config reading depend on in a directory, as the file system shows it now. */
interface Observation {
  /** The repository config git reads there (absolute). */
  configFile: string;
  /** One line per file: its path and identity, the content of the small ones. */
  identity: string;
  /** The latest change time among the files, in nanoseconds since the epoch. */
  latestChangeNs: bigint;
}

const remembered = new LRUCache<string, string>({ max: REMEMBERED_DIRECTORIES, ttl: REMEMBER_MS });
const counts = { listed: 0, remembered: 0 };

/** How many config checks ran git, and how many were answered from memory (for tests). */
export function configCheckCounts(): { listed: number; remembered: number } {
  return { ...counts };
}

/**
 * Runs `check` (which lists the config of `dir` and returns the entries it refuses) unless a check
 * that passed is remembered for `dir` and nothing it depended on has changed since.
 */
export async function checkRemembered<E extends { scope: string; file: string | null; key: string }>(
  dir: string,
  check: () => Promise<{ entries: readonly E[]; refused: E[] }>,
): Promise<E[]> {
  const key = path.resolve(dir);
  const before = await observe(key);
  if (before && remembered.get(key) === before.identity) {
    counts.remembered++;
    return [];
  }
  const startedNs = BigInt(Date.now()) * 1_000_000n;
  counts.listed++;
  const { entries, refused } = await check();
  if (refused.length > 0 || !before) {
    remembered.delete(key);
    return refused;
  }
  const after = await observe(key);
  const settled = before.latestChangeNs < startedNs - BigInt(SETTLED_MS) * 1_000_000n;
  if (after?.identity === before.identity && settled && readsOnly(entries, before.configFile)) remembered.set(key, before.identity);
  else remembered.delete(key);
  return refused;
}

/** Whether git read config only from `configFile` (besides our own command-line overrides), and no per-worktree config. */
function readsOnly(entries: ReadonlyArray<{ scope: string; file: string | null; key: string }>, configFile: string): boolean {
  let local = false;
  for (const entry of entries) {
    if (entry.scope === 'command') continue;
    if (entry.scope !== 'local' || entry.file !== configFile || entry.key === 'extensions.worktreeconfig') return false;
    local = true;
  }
  return local;
}

/**
 * Follows git's discovery of the repository in `dir` as far as the usual layouts go — a clone
 * (`.git` directory), a linked worktree (`.git` file and `commondir`), a bare repository — and
 * describes every file it went through. Null where it cannot follow: a symbolic link, a file of an
 * unexpected type, a missing one (git may then find a parent's repository).
 */
async function observe(dir: string): Promise<Observation | null> {
  const lines: string[] = [];
  let latestChangeNs = 0n;
  const seen = async (file: string, type: 'file' | 'directory' | 'absent'): Promise<BigIntStats | null | undefined> => {
    const stats = await lstat(file, { bigint: true }).catch((error: NodeJS.ErrnoException) => (error.code === 'ENOENT' ? null : undefined));
    if (stats === undefined) return undefined;
    if (stats === null) {
      lines.push(`${file} absent`);
      return type === 'absent' ? null : undefined;
    }
    const actual = stats.isFile() ? 'file' : stats.isDirectory() ? 'directory' : 'other';
    if (actual !== type) return undefined;
    lines.push(`${file} ${actual} ${stats.dev}:${stats.ino} ${stats.mode} ${stats.nlink} ${stats.uid}`);
    if (actual === 'file') {
      lines.push(` ${stats.size} ${stats.mtimeNs} ${stats.ctimeNs}`);
      if (stats.ctimeNs > latestChangeNs) latestChangeNs = stats.ctimeNs;
    }
    return stats;
  };
  /** A `.git` file or `commondir`: a path on one line; anything longer is not followed. */
  const small = async (file: string, stats: BigIntStats): Promise<string | undefined> => {
    if (stats.size > SMALL_FILE_BYTES) return undefined;
    const content = await readFile(file, 'utf8').catch(() => undefined);
    if (content !== undefined) lines.push(` ${JSON.stringify(content)}`);
    return content;
  };

  const dotGit = path.join(dir, '.git');
  const dotGitStats = await lstat(dotGit, { bigint: true }).catch(() => null);
  let gitDir: string;
  if (dotGitStats?.isFile()) {
    const stats = await seen(dotGit, 'file');
    if (!stats) return null;
    const match = /^gitdir: (.+?)\r?\n?$/.exec((await small(dotGit, stats)) ?? '');
    if (!match) return null;
    gitDir = path.resolve(dir, match[1]!);
  } else if (dotGitStats?.isDirectory()) {
    if ((await seen(dotGit, 'directory')) === undefined) return null;
    gitDir = dotGit;
  } else {
    if (dotGitStats || (await seen(dotGit, 'absent')) !== null) return null;
    gitDir = dir;
  }
  if (!(await seen(path.join(gitDir, 'HEAD'), 'file'))) return null;
  const commonDirFile = path.join(gitDir, 'commondir');
  let commonDir = gitDir;
  const commonDirStats = await lstat(commonDirFile, { bigint: true }).catch(() => null);
  if (commonDirStats) {
    const stats = await seen(commonDirFile, 'file');
    if (!stats) return null;
    const content = await small(commonDirFile, stats);
    if (content === undefined) return null;
    commonDir = path.resolve(gitDir, content.trim());
  } else if ((await seen(commonDirFile, 'absent')) !== null) {
    return null;
  }
  if (!(await seen(path.join(commonDir, 'objects'), 'directory'))) return null;
  if (!(await seen(path.join(commonDir, 'refs'), 'directory'))) return null;
  const configFile = path.join(commonDir, 'config');
  if (!(await seen(configFile, 'file'))) return null;
  return { configFile, identity: lines.join('\n'), latestChangeNs };
}
