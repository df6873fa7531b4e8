import path from 'node:path';
import { ErrorCode } from '@gantry/contracts';
import { GitCommandError, spawnGit, spawnUnderPolicy } from './git-process.js';
import { checkRemembered } from './remembered-checks.js';
import { unsafeOperations } from './unsafe-operations.js';

/*
 * The repository's own config, checked against an allow-list before every service-side git call.
 * An agent works with full permissions in a worktree and can write the shared clone's config (and
 * a worktree's config.worktree, and files they include). Most keys that name a program are
 * overridden on the command line (overrides.ts), but some cannot be: their name is the
 * repository's choice (filter.<driver>.clean where .gitattributes names the driver,
 * url.<anything>.insteadOf, remote.<other>.uploadpack, merge.<driver>.driver …). So the repository
 * may hold only the keys git itself writes and a few harmless ones; anything else is refused before
 * git runs. See docs/git.md.
 */

const ALLOWED_KEYS: readonly RegExp[] = [
  /^core\.(repositoryformatversion|filemode|bare|logallrefupdates|ignorecase|precomposeunicode|symlinks|autocrlf|eol|safecrlf|quotepath|abbrev|checkstat|trustctime|untrackedcache|splitindex|preloadindex|sharedrepository|commentchar)$/,
  /^extensions\.(objectformat|worktreeconfig|refstorage)$/,
  /^remote\.origin\.(url|fetch)$/,
  /^branch\.[^\n]+\.(remote|merge|rebase|description)$/,
  /^(user|author|committer)\.(name|email)$/,
  /^init\.defaultbranch$/,
  /^advice\.[a-z0-9]+$/,
];

export interface RepositoryConfigEntry {
  /** `local`, `worktree` (the repository's) or `command` (our own overrides). */
  scope: string;
  /** The file it was read from, absolute. */
  file: string | null;
  /** As git prints it: section and name lower case, the subsection as written. */
  key: string;
}

export function isAllowedRepositoryKey(key: string): boolean {
  return ALLOWED_KEYS.some((pattern) => pattern.test(key));
}

/**
 * A key as it may appear in an error, a log line or an event: its subsection (a URL, a path, a
 * driver name the agent chose — possibly with credentials in it) is not repeated.
 */
export function describeConfigKey(key: string): string {
  const first = key.indexOf('.');
  const last = key.lastIndexOf('.');
  if (first === -1) return key;
  if (first === last) return key.slice(0, 200);
  return `${key.slice(0, first)}.<…>.${key.slice(last + 1, last + 101)}`;
}

/** Every entry of the config git reads in `dir`, except git's own defaults (system and global config are never read). */
export async function listRepositoryConfig(dir: string, timeoutMs: number): Promise<RepositoryConfigEntry[]> {
  const listed = await spawnGit(['config', '--list', '-z', '--show-scope', '--show-origin'], { cwd: dir, timeoutMs });
  // Records of `<scope>\0<origin>\0<key>[\n<value>]\0`.
  const fields = listed.stdout.split('\0');
  const entries: RepositoryConfigEntry[] = [];
  for (let i = 0; i + 2 < fields.length; i += 3) {
    const [scope, origin, record] = [fields[i]!, fields[i + 1]!, fields[i + 2]!];
    const newline = record.indexOf('\n');
    const key = newline === -1 ? record : record.slice(0, newline);
    const file = origin.startsWith('file:') ? path.resolve(dir, origin.slice('file:'.length)) : null;
    entries.push({ scope, file, key });
  }
  return entries;
}

/**
 * The repository's keys the allow-list does not have (our own command-line overrides aside). A check
 * that passed is not run again while the files it read are unchanged (remembered-checks.ts).
 */
export async function foreignConfig(dir: string, timeoutMs: number): Promise<RepositoryConfigEntry[]> {
  return checkRemembered(dir, async () => {
    const entries = await listRepositoryConfig(dir, timeoutMs);
    return { entries, refused: entries.filter((entry) => entry.scope !== 'command' && !isAllowedRepositoryKey(entry.key)) };
  });
}

export function foreignConfigError(dir: string, entries: readonly RepositoryConfigEntry[]): GitCommandError {
  const keys = [...new Set(entries.map((entry) => describeConfigKey(entry.key)))].slice(0, 20);
  return new GitCommandError(
    `the git config of ${dir} has settings service-side git does not accept (${keys.join(', ')}); nothing was run — see docs/git.md`,
    { args: [], exitCode: null, stderr: '', repository: dir, keys },
    ErrorCode.PRECONDITION_FAILED,
  );
}

/** Refuses (PRECONDITION_FAILED, nothing run) a repository whose config has a key outside the allow-list. */
export async function assertRepositoryConfig(dir: string, timeoutMs: number): Promise<void> {
  const foreign = await foreignConfig(dir, timeoutMs);
  if (foreign.length > 0) throw foreignConfigError(dir, foreign);
}

/**
 * For the owner of a repository (the worktree service and its shared clones): removes every key
 * outside the allow-list from the config files under `within` that git reads in `dir`, so an agent
 * cannot leave a key that makes service-side git refuse the repository for good. A key read from a
 * file elsewhere (an include) goes with the include that pulled it in. Returns the keys removed, as
 * `describeConfigKey` shows them; refuses when some remain.
 */
export async function removeForeignConfig(dir: string, options: { within: string; timeoutMs: number }): Promise<string[]> {
  const removed = new Set<string>();
  // An include can pull in a file that has another include: a few rounds, each removing what it finds.
  for (let round = 0; round < 4; round++) {
    const foreign = await foreignConfig(dir, options.timeoutMs);
    if (foreign.length === 0) return [...removed];
    let progress = false;
    const seen = new Set<string>();
    for (const entry of foreign) {
      if (entry.file === null || !isInside(options.within, entry.file)) continue;
      const id = `${entry.file}\0${entry.key}`;
      if (seen.has(id)) continue;
      seen.add(id);
      // `--file` reads and writes only that file: no repository config, nothing run. Exit 5: already gone.
      // simple-git's guard counts an unset as a write of the key — the keys removed here are the very
      // ones it refuses (filter.<driver>.clean, core.fsmonitor …) — so this command, and only this
      // one, opts in to the categories the guard names for it (unsafe-operations.ts).
      const unset = ['config', '--file', entry.file, '--unset-all', entry.key];
      const optIns = Object.fromEntries(unsafeOperations(unset).map((category) => [category, true]));
      await spawnUnderPolicy(unset, { timeoutMs: options.timeoutMs, okExitCodes: [5] }, optIns);
      removed.add(describeConfigKey(entry.key));
      progress = true;
    }
    if (!progress) throw foreignConfigError(dir, foreign);
  }
  await assertRepositoryConfig(dir, options.timeoutMs);
  return [...removed];
}

function isInside(parent: string, candidate: string): boolean {
  const relative = path.relative(parent, candidate);
  return relative !== '' && !relative.startsWith('..') && !path.isAbsolute(relative);
}
