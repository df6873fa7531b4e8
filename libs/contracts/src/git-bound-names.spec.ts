import { execFileSync } from 'node:child_process';
// The whole package index: importing it registers every context's contracts.
import { BaseRefSchema, BranchNameSchema, branchNameProblem, contractRegistry, GitRefSchema } from './index.js';

/*
 * Every name a command hands on to git — a branch, a base ref, a target branch — is held at the door
 * to one rule, branchNameProblem (docs/git.md, "Branch names"): what git's `check-ref-format --branch`
 * refuses, control characters, `HEAD` and a leading `-`. And whatever a door accepts, every event and
 * view that later holds it reads back (GitRefSchema, the schema of names as stored).
 */

/** A request field that names a git branch or ref, by its key. */
const GIT_BOUND_KEY = /^(branch|baseRef|targetBranch|baseBranch)$/;

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

function stringPaths(value: unknown, path: (string | number)[] = []): (string | number)[][] {
  if (typeof value === 'string') return [path];
  if (Array.isArray(value)) return value.flatMap((v, i) => stringPaths(v, [...path, i]));
  if (value !== null && typeof value === 'object') return Object.entries(value).flatMap(([k, v]) => stringPaths(v, [...path, k]));
  return [];
}

function withValue(example: unknown, path: (string | number)[], value: string): Json {
  const copy = structuredClone(example) as Json;
  let at = copy as Record<string | number, Json>;
  for (const key of path.slice(0, -1)) at = at[key] as Record<string | number, Json>;
  at[path.at(-1)!] = value;
  return copy;
}

/** Each example's git-bound fields, once per (contract, path). */
function gitBoundFields<T extends { examples: { valid: readonly unknown[] } }>(contracts: readonly T[], label: (c: T) => string) {
  const fields: [string, T, unknown, (string | number)[]][] = [];
  for (const contract of contracts) {
    const seen = new Set<string>();
    for (const example of contract.examples.valid) {
      for (const path of stringPaths(example)) {
        const key = path.join('.');
        if (!GIT_BOUND_KEY.test(String(path.at(-1))) || seen.has(key)) continue;
        seen.add(key);
        fields.push([`${label(contract)} ${key}`, contract, example, path]);
      }
    }
  }
  return fields;
}

/** Names git refuses (check-ref-format --branch), one per rule, and every control character. */
const REFUSED_BY_GIT = [
  'story/x.lock', 'x.lock/y', '.hidden', 'story/.hidden', 'story/', 'story.', 'story//x', '/story', 'story@{1}', '@{-1}',
  'a..b', 'a b', 'a~1', 'a^', 'a:b', 'a?', 'a*', 'a[b', 'a\\b', '-x', '--upload-pack=touch /tmp/pwned',
  ...Array.from({ length: 0x20 }, (_, code) => `story${String.fromCharCode(code)}x`),
  'story\u007fx',
];
/** Refused though git takes them: names that mean something else to git. */
const REFUSED_BY_GANTRY = ['HEAD', '@', ''];
/** Names git takes that an older, looser door took too, or that only a blank beyond ASCII sets apart. */
const ACCEPTED = ['main', 'story/ST-1208', 'release-1.2', 'user@host', 'é/ü', 'story/a\u00a0b', 'story/a\u3000b', 'story/a\u2028b'];

function gitTakes(name: string): boolean {
  try {
    execFileSync('git', ['check-ref-format', '--branch', name], { stdio: 'pipe' });
    return true;
  } catch {
    return false;
  }
}

describe('the one rule for a git branch name (branchNameProblem)', () => {
  it('refuses what git check-ref-format --branch refuses, and takes what it takes', () => {
    // A NUL cannot be an argument at all: git never sees one.
    const askable = REFUSED_BY_GIT.filter((name) => !name.includes('\u0000'));
    expect(askable.filter(gitTakes)).toEqual([]);
    expect(ACCEPTED.filter((name) => !gitTakes(name))).toEqual([]);
    expect(REFUSED_BY_GIT.filter((name) => branchNameProblem(name) === null)).toEqual([]);
    expect(REFUSED_BY_GANTRY.filter((name) => branchNameProblem(name) === null)).toEqual([]);
    expect(ACCEPTED.filter((name) => branchNameProblem(name) !== null)).toEqual([]);
  });
});

describe('every command field that names a git branch or ref is held to it at the door', () => {
  const fields = gitBoundFields(contractRegistry.commands(), (c) => `${c.context}.${c.name}`);

  it('finds the fields: enqueue_job, create_sprint_run, the products, the runner reports, acquire_worktree and the pull-request commands', () => {
    expect(fields.map(([name]) => name)).toEqual(
      expect.arrayContaining([
        'jobs.enqueue_job branch', 'jobs.enqueue_job baseRef', 'jobs.create_sprint_run branch', 'jobs.register_product targetBranch',
        'jobs.update_product changes.targetBranch', 'jobs.start_job branch', 'jobs.log_implementation branch', 'jobs.report_push branch',
        'worktrees.acquire_worktree branch', 'worktrees.acquire_worktree baseRef', 'prs.mark_pr_ready_for_review branch', 'prs.get_pull_request branch',
      ]),
    );
  });

  it.each(fields)('%s refuses every name git or Gantry refuses, with an issue at the field', (_name, contract, example, path) => {
    const taken = [...REFUSED_BY_GIT, ...REFUSED_BY_GANTRY].filter((name) => {
      const parsed = contract.request.safeParse(withValue(example, path, name));
      return parsed.success || !parsed.error.issues.some((issue) => issue.path.join('.') === path.join('.'));
    });
    expect(taken).toEqual([]);
  });

  it.each(fields)('%s takes a name git takes', (_name, contract, example, path) => {
    expect(ACCEPTED.filter((name) => !contract.request.safeParse(withValue(example, path, name)).success)).toEqual([]);
  });
});

describe('what a door accepts, the events and views that hold it read back', () => {
  const fields = gitBoundFields(contractRegistry.events(), (c) => `${c.context}.${c.type}`);

  it('finds the fields', () => {
    expect(fields.length).toBeGreaterThan(5);
  });

  it.each(fields)('%s reads every name a door takes', (_name, contract, example, path) => {
    expect(ACCEPTED.filter((name) => !contract.data.safeParse(withValue(example, path, name)).success)).toEqual([]);
  });

  it('GitRefSchema, the schema of names as stored, takes every branch and base ref a door takes, and what older doors took', () => {
    expect(ACCEPTED.filter((name) => !BranchNameSchema.safeParse(name).success || !GitRefSchema.safeParse(name).success)).toEqual([]);
    expect(BaseRefSchema.safeParse('a'.repeat(40)).success && GitRefSchema.safeParse('a'.repeat(40)).success).toBe(true);
    // Held by logs from before the doors were strict: a NUL is stored as U+FFFD.
    const older = ['story/x.lock', 'story/', '.hidden', 'story@{1}', 'HEAD', '@', 'story\u0001x', 'story\uFFFDx', 'story\u007fx'];
    expect(older.filter((name) => !GitRefSchema.safeParse(name).success)).toEqual([]);
  });
});
