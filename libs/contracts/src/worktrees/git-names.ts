import { z } from 'zod';
import { canonicalHash } from '../hashing.js';

/*
 * Names that end up as git arguments. They are checked here, in the contract, so that a hostile
 * value is refused at the edge with INVALID_COMMAND; the git layer checks them again before use.
 */

const MAX_BRANCH_LENGTH = 255;
const MAX_URL_LENGTH = 2048;

/** Why `name` is not a branch name git's `check-ref-format --branch` would accept, or null. */
export function branchNameProblem(name: string): string | null {
  if (name.length === 0) return 'branch name is empty';
  if (name.length > MAX_BRANCH_LENGTH) return `branch name is longer than ${MAX_BRANCH_LENGTH} characters`;
  // A leading '-' would be read as an option by git.
  if (name.startsWith('-')) return 'branch name must not start with "-"';
  if (name === '@') return 'branch name must not be "@"';
  if (name === 'HEAD') return 'branch name must not be "HEAD"';
  // eslint-disable-next-line no-control-regex -- refusing control characters is the point of this pattern
  if (/[\x00-\x20\x7f~^:?*[\\]/.test(name)) {
    return 'branch name must not contain control characters, spaces or any of ~ ^ : ? * [ \\';
  }
  if (name.includes('..')) return 'branch name must not contain ".."';
  if (name.includes('@{')) return 'branch name must not contain "@{"';
  if (name.includes('//')) return 'branch name must not contain "//"';
  if (name.startsWith('/')) return 'branch name must not start with "/"';
  if (name.endsWith('/')) return 'branch name must not end with "/"';
  if (name.endsWith('.')) return 'branch name must not end with "."';
  for (const component of name.split('/')) {
    if (component.startsWith('.')) return 'no part of a branch name may start with "."';
    if (component.endsWith('.lock')) return 'no part of a branch name may end with ".lock"';
  }
  return null;
}

/** A base ref: a branch or tag name (same rules as a branch) or a full commit SHA. */
export function baseRefProblem(ref: string): string | null {
  if (/^[0-9a-f]{40}$/.test(ref) || /^[0-9a-f]{64}$/.test(ref)) return null;
  const problem = branchNameProblem(ref);
  return problem ? problem.replace('branch name', 'base ref') : null;
}

/**
 * Why `url` is not an acceptable repository URL, or null. Accepted: https://, ssh://,
 * scp-like `user@host:path`, file:// and absolute local paths. Refused: any transport helper
 * (`<transport>::<address>`, e.g. `ext::` and `fd::`, which run commands), a leading '-',
 * whitespace and control characters, credentials in an https URL (the URL is stored in the
 * event log), and every other scheme.
 */
export function repositoryUrlProblem(url: string): string | null {
  if (url.length === 0) return 'repository URL is empty';
  if (url.length > MAX_URL_LENGTH) return `repository URL is longer than ${MAX_URL_LENGTH} characters`;
  if (url.startsWith('-')) return 'repository URL must not start with "-"';
  // eslint-disable-next-line no-control-regex -- refusing control characters is the point of this pattern
  if (/[\x00-\x20\x7f]/.test(url)) return 'repository URL must not contain whitespace or control characters';
  if (url.includes('::')) return 'repository URL must not name a transport helper ("::"), such as ext:: or fd::';

  if (url.startsWith('/')) {
    if (url.split('/').includes('..')) return 'a local repository path must not contain ".." segments';
    return null;
  }

  const scheme = /^([A-Za-z][A-Za-z0-9+.-]*):\/\//.exec(url)?.[1]?.toLowerCase();
  if (scheme !== undefined) {
    let parsed: URL;
    try {
      parsed = new URL(url);
    } catch {
      return 'repository URL is not a valid URL';
    }
    switch (scheme) {
      case 'https':
        if (parsed.username || parsed.password) {
          return 'an https repository URL must not carry credentials (use a credential helper)';
        }
        if (!parsed.hostname || parsed.hostname.startsWith('-')) return 'repository URL has no valid host';
        if (parsed.pathname.length <= 1) return 'repository URL has no path';
        return null;
      case 'ssh':
        if (parsed.password) return 'an ssh repository URL must not carry a password';
        if (!parsed.hostname || parsed.hostname.startsWith('-')) return 'repository URL has no valid host';
        if (safeDecode(parsed.username).startsWith('-')) return 'ssh user must not start with "-"';
        if (parsed.pathname.length <= 1) return 'repository URL has no path';
        return null;
      case 'file':
        if (parsed.host !== '') return 'a file:// repository URL must name a local absolute path (file:///...)';
        if (url.slice('file://'.length).split('/').some((part) => safeDecode(part) === '..')) {
          return 'a local repository path must not contain ".." segments';
        }
        return null;
      default:
        return `repository URL scheme "${scheme}" is not allowed (use https, ssh, file or a local path)`;
    }
  }

  // scp-like syntax: [user@]host:path (git treats it as ssh).
  const scp = /^(?:([A-Za-z0-9._][A-Za-z0-9._-]*)@)?([A-Za-z0-9][A-Za-z0-9.-]*):(.+)$/.exec(url);
  if (scp) {
    const path = scp[3]!;
    if (path.startsWith('-')) return 'repository path must not start with "-"';
    return null;
  }
  return 'repository URL must be https://, ssh://, user@host:path, file:// or an absolute local path';
}

function safeDecode(value: string): string {
  try {
    return decodeURIComponent(value);
  } catch {
    return value;
  }
}

function refineWith(problem: (value: string) => string | null) {
  return (value: string, ctx: z.core.$RefinementCtx<string>) => {
    const message = problem(value);
    if (message) ctx.addIssue({ code: 'custom', message, input: value });
  };
}

export const BranchNameSchema = z.string().superRefine(refineWith(branchNameProblem));
/**
 * The branch of a lease: a branch name (branchNameProblem) that is not a folder of the rescue branches
 * (leasedBranchProblem).
 */
export const LeasedBranchNameSchema = z.string().superRefine(refineWith((name) => branchNameProblem(name) ?? leasedBranchProblem(name)));
export const BaseRefSchema = z.string().superRefine(refineWith(baseRefProblem));
export const RepositoryUrlSchema = z.string().superRefine(refineWith(repositoryUrlProblem));

/**
 * What a worktree serves: one repository and one branch. Lowercase letters, digits and '-',
 * so it is safe as a directory name and as a subject token.
 */
export const WorktreeKeySchema = z
  .string()
  .regex(/^[a-z0-9](?:[a-z0-9-]{0,126}[a-z0-9])?$/, 'worktree key must be lowercase letters, digits and "-" (at most 128)');
export type WorktreeKey = z.infer<typeof WorktreeKeySchema>;

function slug(value: string, max: number): string {
  const s = value
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, max)
    .replace(/-+$/, '');
  return s || 'x';
}

function repositoryBaseName(repositoryUrl: string): string {
  const trimmed = repositoryUrl.replace(/\/+$/, '').replace(/\.git$/, '');
  const last = trimmed.split(/[/:]/).pop() ?? '';
  return last;
}

const DEFAULT_PORTS: Readonly<Record<string, string>> = { https: '443', ssh: '22' };
const GITHUB_PATH = /^\/?([A-Za-z0-9][A-Za-z0-9-]*)\/([A-Za-z0-9_.-]+?)(?:\.git)?$/;

/**
 * The one spelling of a repository that names it as a key (docs/worktrees.md, "One repository, one
 * key"): two URLs with the same canonical form are one repository — one shared clone, one worktree
 * key per branch, one lock. Conservative, only what git and GitHub treat as the same repository:
 * - every URL loses its trailing `/`s (git ignores them);
 * - https and ssh URLs have their scheme and host in lowercase and lose the default port (443, 22);
 * - on github.com, where owner and name are case-insensitive and `.git` is optional, the path is in
 *   lowercase with `.git` added, and ssh as `git@github.com:owner/name.git` (the scp-like spelling
 *   GitHub hands out; GitHub reads the ssh:// spelling as the same path).
 * Nothing else is changed: on other hosts path case and `.git` may name different repositories, and
 * an scp-like `host:path` is relative to the user's home where `ssh://host/path` is not. https and ssh
 * spellings stay apart. This is a key only: git is always given the URL the caller wrote. A URL that
 * repositoryUrlProblem refuses is returned as it is.
 */
export function canonicalRepositoryUrl(url: string): string {
  if (repositoryUrlProblem(url) !== null) return url;
  if (url.startsWith('/')) return trimTrailingSlashes(url);
  const scheme = /^([A-Za-z][A-Za-z0-9+.-]*):\/\//.exec(url)?.[1]?.toLowerCase();
  if (scheme === 'file') return `file://${trimTrailingSlashes(url.slice('file://'.length))}`;
  if (scheme === 'https' || scheme === 'ssh') {
    const rest = url.slice(scheme.length + 3);
    const slash = rest.indexOf('/');
    const authority = rest.slice(0, slash);
    const at = authority.lastIndexOf('@');
    const user = at < 0 ? null : authority.slice(0, at);
    const hostPort = /^(.*?)(?::(\d*))?$/.exec(authority.slice(at + 1))!;
    const host = hostPort[1]!.toLowerCase();
    const port = hostPort[2] === undefined || hostPort[2] === '' || hostPort[2] === DEFAULT_PORTS[scheme] ? '' : `:${hostPort[2]}`;
    const pathPart = trimTrailingSlashes(rest.slice(slash));
    if (host === 'github.com' && port === '') {
      const github = GITHUB_PATH.exec(pathPart);
      if (github && scheme === 'https' && user === null) return `https://github.com/${githubPath(github)}`;
      if (github && scheme === 'ssh' && user === 'git') return `git@github.com:${githubPath(github)}`;
    }
    return `${scheme}://${user === null ? '' : `${user}@`}${host}${port}${pathPart}`;
  }
  const scp = /^(?:([^@]+)@)?([^:]+):(.+)$/.exec(url);
  if (!scp) return url;
  const [, user, rawHost, rawPath] = scp;
  const host = rawHost!.toLowerCase();
  const pathPart = trimTrailingSlashes(rawPath!);
  if (host === 'github.com' && user === 'git') {
    const github = GITHUB_PATH.exec(pathPart);
    if (github) return `git@github.com:${githubPath(github)}`;
  }
  return `${user === undefined ? '' : `${user}@`}${host}:${pathPart}`;
}

function trimTrailingSlashes(value: string): string {
  return value.replace(/(?<=.)\/+$/, '');
}

function githubPath(match: RegExpExecArray): string {
  return `${match[1]!.toLowerCase()}/${match[2]!.toLowerCase()}.git`;
}

function worktreeKeyOf(repositoryUrl: string, branch: string): WorktreeKey {
  const digest = canonicalHash({ repositoryUrl, branch }).slice(0, 12);
  return `${slug(repositoryBaseName(repositoryUrl), 40)}-${slug(branch, 60)}-${digest}`;
}

function cloneNameOf(repositoryUrl: string): string {
  const digest = canonicalHash({ repositoryUrl }).slice(0, 12);
  return `${slug(repositoryBaseName(repositoryUrl), 40)}-${digest}`;
}

/**
 * The worktree key of a (repository, branch): readable prefix plus a digest of both, the repository
 * in its canonical spelling — every spelling of one repository gets one key per branch.
 */
export function deriveWorktreeKey(repositoryUrl: string, branch: string): WorktreeKey {
  return worktreeKeyOf(canonicalRepositoryUrl(repositoryUrl), branch);
}

/** The directory name (without `.git`) of a repository's shared clone on a host: one per canonical spelling. */
export function repositoryCloneName(repositoryUrl: string): string {
  return cloneNameOf(canonicalRepositoryUrl(repositoryUrl));
}

/**
 * Keys and clones made before URLs had a canonical spelling were named after the URL as written
 * (docs/worktrees.md, "Keys from before"): the same as today's for a URL already canonical, another
 * key and clone for any other spelling. A key is such a *legacy* key when it is the old key of its
 * (URL, branch) and not today's; its leases and worktree stay in the clone named as before.
 */
export function isLegacyWorktreeKey(worktreeKey: string, repositoryUrl: string, branch: string): boolean {
  return worktreeKey !== deriveWorktreeKey(repositoryUrl, branch) && worktreeKey === legacyWorktreeKey(repositoryUrl, branch);
}

/** The key a (URL, branch) got before URLs had a canonical spelling: named after the URL as written. */
export function legacyWorktreeKey(repositoryUrl: string, branch: string): WorktreeKey {
  return worktreeKeyOf(repositoryUrl, branch);
}

/** The clone name a URL got before URLs had a canonical spelling (the clone of a legacy key). */
export function legacyRepositoryCloneName(repositoryUrl: string): string {
  return cloneNameOf(repositoryUrl);
}

/**
 * The feature branch of a code job that names none (docs/jobs.md, "Branches"): per story
 * `gantry/<product>/story-<story>` (the story's tasks share it), else per task
 * `gantry/<product>/task-<task>`, else `gantry/<product>/<jobId>`. Characters a branch name cannot
 * hold become `-`; the result passes `branchNameProblem`, or the job id's own branch is used.
 */
export function featureBranchFor(job: { productId: string; storyId: string | null; taskId: string | null; jobId: string }): string {
  const part = (value: string) => value.replace(/[^A-Za-z0-9_-]+/g, '-').replace(/^-+|-+$/g, '').slice(0, 80) || 'x';
  const scope = job.storyId !== null ? `story-${part(job.storyId)}` : job.taskId !== null ? `task-${part(job.taskId)}` : part(job.jobId);
  const name = `gantry/${part(job.productId)}/${scope}`;
  return branchNameProblem(name) === null ? name : `gantry/${part(job.jobId)}`;
}

/**
 * Why a branch cannot be leased although git would take it: `gantry` and `gantry/rescue` are the
 * folders of the rescue branches (rescueBranchName), and git keeps no branch where a folder of branches
 * is — leased, such a branch was made in the shared clone, and every later rescue of a key of that
 * repository failed ("'refs/heads/gantry' exists; cannot create …"), its release retried for ever with
 * the key's lock held (docs/worktrees.md, "What a lease starts from").
 */
export function leasedBranchProblem(name: string): string | null {
  return name === 'gantry' || name === 'gantry/rescue' ? `branch ${name} is a folder of the rescue branches (gantry/rescue/<worktree key>/<time>)` : null;
}

/**
 * Why a branch cannot be leased in a repository although git would take it and no other repository's
 * lease would be refused it: it is in the rescue folder of a key of that repository —
 * `gantry/rescue/<key>`, or a branch under it — where the key's rescue branches (rescueBranchName) are
 * made in the repository's shared clone. Leased, `gantry/rescue/<key>` was made there and every later
 * rescue of the key failed ("'refs/heads/gantry/rescue/<key>' exists; cannot create …"), its release
 * retried for ever with the key's lock held; a branch under it could be one of the key's rescue
 * branches, which the lease's sync then moved to its starting point, away from the work it saved.
 * A folder is taken for a key of the repository when it has a key's shape there
 * (`<repository name>-<branch>-<12 hex digits>`, deriveWorktreeKey): the digest cannot be checked
 * without the branch, so a name shaped so is refused whether or not its digest is one. The feature
 * branches of a product named `rescue` (`gantry/rescue/story-…`, `task-…`, `job-…`: featureBranchFor)
 * are leased as before, except in a repository whose name makes them a key's shape (a name that, as
 * a key spells it, starts such a folder: `story…`, `task…`, `job…`).
 */
export function rescueFolderProblem(repositoryUrl: string, branch: string): string | null {
  const [gantry, rescue, folder] = branch.split('/');
  if (gantry !== 'gantry' || rescue !== 'rescue' || folder === undefined || !WorktreeKeySchema.safeParse(folder).success) return null;
  const names = new Set([repositoryBaseName(canonicalRepositoryUrl(repositoryUrl)), repositoryBaseName(repositoryUrl)].map((name) => slug(name, 40)));
  for (const name of names) {
    if (new RegExp(`^${name}-[a-z0-9]+(?:-[a-z0-9]+)*-[0-9a-f]{12}$`).test(folder)) {
      return `branch ${branch} is in the rescue folder of worktree key ${folder} of this repository (gantry/rescue/<worktree key>/<time>)`;
    }
  }
  return null;
}

/** What a job names of its worktree lease: its repository, its branch and the base ref the branch starts from. */
export interface LeaseNames {
  readonly repositoryUrl: string;
  readonly branch: string;
  readonly baseRef: string;
}

/** Which of the names a lease is refused for, as a request names it and in words, and why. */
export interface LeaseNamesProblem {
  readonly name: keyof LeaseNames;
  readonly what: 'repository' | 'branch' | 'base ref';
  readonly problem: string;
}

/**
 * Why `acquire_worktree` refuses a lease of these names, or null: the one check of what a job names of
 * its worktree (docs/jobs.md, "Branches"). The worktree service's request is held to it
 * (AcquireWorktreeRequestSchema), the job service's enqueue with the names a job's claims will ask for,
 * and the runner before it asks for a job recorded before the job service held enqueues to it: a lease
 * refused so is refused on every host and at every claim alike.
 */
export function leaseNamesProblem(names: LeaseNames): LeaseNamesProblem | null {
  const repository = repositoryUrlProblem(names.repositoryUrl);
  if (repository !== null) return { name: 'repositoryUrl', what: 'repository', problem: repository };
  const branch = branchNameProblem(names.branch) ?? leasedBranchProblem(names.branch) ?? rescueFolderProblem(names.repositoryUrl, names.branch);
  if (branch !== null) return { name: 'branch', what: 'branch', problem: branch };
  const baseRef = baseRefProblem(names.baseRef);
  return baseRef === null ? null : { name: 'baseRef', what: 'base ref', problem: baseRef };
}

/** The rescue branch for a worktree's unsaved changes: `gantry/rescue/<key>/<UTC timestamp>`. */
export function rescueBranchName(worktreeKey: WorktreeKey, at: Date): string {
  const stamp = at.toISOString().replace(/[-:]/g, '').replace('.', '');
  return `gantry/rescue/${worktreeKey}/${stamp}`;
}
