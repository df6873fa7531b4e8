import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, lstatSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

/*
 * Real git repositories for the tests: a bare origin with real commits, pushed from a seed clone.
 * Git runs with an empty global config so the machine's settings cannot change the outcome.
 */

export interface GitFixture {
  dir: string;
  origin: string;
  seed: string;
  root: string;
  /** Commit `files` in the seed on `branch` and push it to the origin; returns the new SHA. */
  pushCommit(branch: string, files: Record<string, string>, message?: string): string;
  cleanup(): void;
}

export function isolateGitConfig(dir: string): void {
  const config = path.join(dir, 'gitconfig');
  writeFileSync(config, '');
  process.env.GIT_CONFIG_GLOBAL = config;
  process.env.GIT_CONFIG_NOSYSTEM = '1';
}

export function git(cwd: string, ...args: string[]): string {
  return execFileSync('git', ['-c', 'user.name=Test', '-c', 'user.email=test@example.invalid', '-c', 'commit.gpgsign=false', ...args], {
    cwd,
    encoding: 'utf8',
    env: { ...process.env, GIT_TERMINAL_PROMPT: '0' },
    stdio: ['ignore', 'pipe', 'pipe'],
  }).trim();
}

export function createGitFixture(): GitFixture {
  const dir = mkdtempSync(path.join(tmpdir(), 'gantry-git-'));
  isolateGitConfig(dir);
  const origin = path.join(dir, 'origin.git');
  const seed = path.join(dir, 'seed');
  git(dir, 'init', '--quiet', '--bare', '--initial-branch=main', origin);
  git(dir, 'init', '--quiet', '--initial-branch=main', seed);
  git(seed, 'remote', 'add', 'origin', origin);
  const fixture: GitFixture = {
    dir,
    origin,
    seed,
    root: path.join(dir, 'root'),
    pushCommit(branch, files, message = `change ${Object.keys(files).join(', ')}`) {
      const exists = git(seed, 'branch', '--list', branch) !== '';
      if (exists) git(seed, 'checkout', '--quiet', branch);
      else git(seed, 'checkout', '--quiet', '-b', branch);
      for (const [name, content] of Object.entries(files)) writeFileSync(path.join(seed, name), content);
      git(seed, 'add', '--all');
      git(seed, 'commit', '--quiet', '-m', message);
      git(seed, 'push', '--quiet', 'origin', `HEAD:refs/heads/${branch}`);
      return git(seed, 'rev-parse', 'HEAD');
    },
    cleanup() {
      rmSync(dir, { recursive: true, force: true });
    },
  };
  fixture.pushCommit('main', { 'README.md': 'one\n' }, 'initial commit');
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
