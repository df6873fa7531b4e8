import { execFileSync } from 'node:child_process';
import { chmodSync, cpSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

/*
 * Real git repositories for tests: a bare origin whose `main` has a first commit, and a clone of it
 * (`seed`) to work in as people — and agents — do. The fixture's git is plain git, never
 * @gantry/git: it plays the people and the agents around the services, including a hostile agent
 * that writes the repository's config, attributes and hooks. It reads no system or global config,
 * so the machine's settings cannot change an outcome.
 */

export interface GitFixture {
  /** The temporary directory holding everything below; removed by `cleanup`. */
  readonly dir: string;
  /** A bare repository, the origin: `main` has one commit (README.md). */
  readonly origin: string;
  /** A clone of the origin on `main`, to commit and push from. */
  readonly seed: string;
  /** Plain git in `cwd`, as a person or an agent runs it; the trimmed stdout. */
  git(cwd: string, ...args: string[]): string;
  /** Writes (`null`: deletes) files in `dir` (default the seed) and commits them on its current branch; returns the new HEAD. */
  commit(files: Record<string, string | null>, message?: string, dir?: string): string;
  /** Commits `files` in the seed on `branch` (created from the current HEAD if new) and pushes it to the origin; returns the new SHA. */
  pushCommit(branch: string, files: Record<string, string | null>, message?: string): string;
  /** The commit `ref` names in `repository` (default the origin), or null. */
  sha(ref: string, repository?: string): string | null;
  /** HEAD of `dir` (default the seed). */
  head(dir?: string): string;
  /** Pushes `ref` of `dir` (default the seed) to the origin's main and fetches, as a merged pull request would. */
  pushToMain(ref: string, dir?: string): void;
  /** A path under `dir` for a file a hostile program would create; nothing is there yet. */
  marker(name: string): string;
  /** A shell script under `dir` that creates `marker` (and passes its stdin through), for config values that name a program file. */
  markerScript(marker: string): string;
  cleanup(): void;
}

const IDENTITY = ['-c', 'user.name=Gantry Test', '-c', 'user.email=test@gantry.invalid', '-c', 'commit.gpgsign=false'];

/** The environment of the fixture's git: no system or global config, no prompts. */
export function plainGitEnvironment(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, GIT_CONFIG_NOSYSTEM: '1', GIT_CONFIG_GLOBAL: '/dev/null', GIT_TERMINAL_PROMPT: '0' };
  for (const name of ['GIT_DIR', 'GIT_WORK_TREE', 'GIT_INDEX_FILE', 'GIT_COMMON_DIR', 'GIT_CONFIG_PARAMETERS', 'GIT_CONFIG_COUNT']) delete env[name];
  return env;
}

/** Plain git in `cwd` (see GitFixture.git). */
export function plainGit(cwd: string, ...args: string[]): string {
  return execFileSync('git', [...IDENTITY, ...args], {
    cwd,
    encoding: 'utf8',
    env: plainGitEnvironment(),
    stdio: ['ignore', 'pipe', 'pipe'],
  }).trim();
}

export function createGitFixture(options: { prefix?: string } = {}): GitFixture {
  const dir = mkdtempSync(path.join(tmpdir(), options.prefix ?? 'gantry-git-'));
  const origin = path.join(dir, 'origin.git');
  const seed = path.join(dir, 'seed');
  plainGit(dir, 'init', '--quiet', '--bare', '--initial-branch=main', origin);
  plainGit(dir, 'init', '--quiet', '--initial-branch=main', seed);
  plainGit(seed, 'remote', 'add', 'origin', origin);
  const fixture = fixtureIn(dir);
  mkdirSync(path.join(dir, 'markers'));
  fixture.pushCommit('main', { 'README.md': 'one\n' }, 'initial commit');
  return fixture;
}

/** A prepared fixture that `copy()` hands out again, a fresh copy each time, without running git. */
export interface GitFixtureTemplate {
  /** A fixture in the state the template's `prepare` left it: the same commits (the same SHAs) in each copy. */
  copy(options?: { prefix?: string }): GitFixture;
  /** Removes the template (copies stay until their own cleanup). */
  cleanup(): void;
}

/**
 * A fixture built once (`createGitFixture`, then `prepare`) and copied file by file for each test
 * that needs one: a copy is a directory copy, where building a fixture runs about ten git processes
 * (starting one is the dearest step of a short git command: docs/git.md, "Checks remembered"). A copy is the same
 * repositories at a new place: the origin, and the seed whose `origin` remote names the copy's own
 * origin. For tests that need a fresh repository with the same first commits each time; tests that
 * need repositories with different histories build them with `createGitFixture`.
 */
export function createGitFixtureTemplate(prepare: (fixture: GitFixture) => void = () => undefined, options: { prefix?: string } = {}): GitFixtureTemplate {
  const template = createGitFixture(options);
  prepare(template);
  return {
    copy(copyOptions = {}) {
      const dir = mkdtempSync(path.join(tmpdir(), copyOptions.prefix ?? options.prefix ?? 'gantry-git-'));
      // Kept times: git's index in the seed still describes its files (only their change times differ).
      cpSync(template.dir, dir, { recursive: true, preserveTimestamps: true, verbatimSymlinks: true });
      // The seed's remote is the only absolute path inside: it names the template's origin.
      const config = path.join(dir, 'seed', '.git', 'config');
      const text = readFileSync(config, 'utf8');
      const from = `url = ${path.join(template.dir, 'origin.git')}\n`;
      if (!text.includes(from)) throw new Error(`the template's seed config does not name its origin (${config})`);
      writeFileSync(config, text.replace(from, `url = ${path.join(dir, 'origin.git')}\n`));
      return fixtureIn(dir);
    },
    cleanup: () => template.cleanup(),
  };
}

function fixtureIn(dir: string): GitFixture {
  const origin = path.join(dir, 'origin.git');
  const seed = path.join(dir, 'seed');
  let markers = 0;
  const fixture: GitFixture = {
    dir,
    origin,
    seed,
    git: plainGit,
    commit(files, message = `change ${Object.keys(files).join(', ')}`, cwd = seed) {
      // One `git rm` and one `git add` for all the files: each git process costs milliseconds.
      const removed = Object.keys(files).filter((name) => files[name] === null);
      const written = Object.keys(files).filter((name) => files[name] !== null);
      if (removed.length > 0) plainGit(cwd, 'rm', '-q', '--', ...removed);
      for (const name of written) {
        mkdirSync(path.dirname(path.join(cwd, name)), { recursive: true });
        writeFileSync(path.join(cwd, name), files[name]!);
      }
      if (written.length > 0) plainGit(cwd, 'add', '--', ...written);
      plainGit(cwd, 'commit', '--quiet', '--allow-empty', '-m', message);
      return plainGit(cwd, 'rev-parse', 'HEAD');
    },
    pushCommit(branch, files, message) {
      const exists = plainGit(seed, 'branch', '--list', branch) !== '';
      plainGit(seed, 'checkout', '--quiet', ...(exists ? [branch] : ['-b', branch]));
      const sha = fixture.commit(files, message);
      plainGit(seed, 'push', '--quiet', 'origin', `HEAD:refs/heads/${branch}`);
      return sha;
    },
    sha(ref, repository = origin) {
      try {
        return plainGit(repository, 'rev-parse', '--verify', '--quiet', '--end-of-options', `${ref}^{commit}`);
      } catch {
        return null;
      }
    },
    head(cwd = seed) {
      return plainGit(cwd, 'rev-parse', 'HEAD');
    },
    pushToMain(ref, cwd = seed) {
      plainGit(cwd, 'push', '-q', 'origin', `${ref}:refs/heads/main`);
      plainGit(cwd, 'fetch', '-q', 'origin');
    },
    marker(name) {
      return path.join(dir, 'markers', `${name}-${++markers}`);
    },
    markerScript(marker) {
      const script = path.join(dir, 'markers', `make-${path.basename(marker)}.sh`);
      mkdirSync(path.dirname(script), { recursive: true });
      writeFileSync(script, `#!/bin/sh\ntouch '${marker}'\ncat\n`);
      chmodSync(script, 0o755);
      return script;
    },
    cleanup() {
      rmSync(dir, { recursive: true, force: true });
    },
  };
  return fixture;
}

/** Every path under `dir` with its kind, size and modification time: equal snapshots = nothing touched. */
export function snapshotTree(dir: string): string[] {
  const out: string[] = [];
  const walk = (p: string) => {
    let info;
    try {
      info = lstatSync(p);
    } catch {
      return;
    }
    out.push(`${path.relative(dir, p)}|${info.isDirectory() ? 'd' : info.isSymbolicLink() ? 'l' : 'f'}|${info.size}|${info.mtimeMs}`);
    if (info.isDirectory()) for (const name of readdirSync(p).sort()) walk(path.join(p, name));
  };
  walk(dir);
  return out;
}
