import { execFileSync } from 'node:child_process';
import { existsSync, rmSync } from 'node:fs';
import { ErrorCode, GantryError } from '@gantry/contracts';
import { GitCommandError, runGit } from './git-command.js';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

interface GitFixture {
  dir: string;
  seed: string;
  origin: string;
  cleanup(): void;
}

/** A repository with one commit and a bare origin, in a temporary directory. */
function createGitFixture(): GitFixture {
  const dir = mkdtempSync(path.join(tmpdir(), 'gantry-git-'));
  const seed = path.join(dir, 'seed');
  const origin = path.join(dir, 'origin.git');
  execFileSync('git', ['init', '-q', '--initial-branch=main', seed]);
  execFileSync('git', ['-C', seed, '-c', 'user.name=t', '-c', 'user.email=t@localhost', 'commit', '-q', '--allow-empty', '-m', 'first']);
  execFileSync('git', ['init', '-q', '--bare', origin]);
  return { dir, seed, origin, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

describe('running git', () => {
  let fx: GitFixture;
  beforeEach(() => {
    fx = createGitFixture();
  });
  afterEach(() => fx.cleanup());

  it('kills git at its timeout and fails with TIMEOUT', async () => {
    // An alias of ours that never ends (its output goes elsewhere, so only git holds the pipes).
    const error = await runGit(['-c', 'alias.wait=!sleep 30 >/dev/null 2>&1 </dev/null', 'wait'], { timeoutMs: 300 }).then(
      () => null,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(GitCommandError);
    expect((error as GantryError).code).toBe(ErrorCode.TIMEOUT);
  });

  it('fails with git’s own words and exit code', async () => {
    const error = await runGit(['-C', fx.seed, 'rev-parse', '--verify', 'no-such-ref'], { timeoutMs: 10_000 }).then(() => null, (e: unknown) => e);
    expect(error).toBeInstanceOf(GitCommandError);
    expect((error as GantryError).code).toBe(ErrorCode.INTERNAL);
    expect((error as GantryError).details).toMatchObject({ exitCode: 128, args: ['-C', fx.seed, 'rev-parse', '--verify', 'no-such-ref'] });
    expect((error as GantryError).message).toMatch(/Needed a single revision/);
  });

  it('runs in the given directory and feeds stdin', async () => {
    const result = await runGit(['hash-object', '--stdin'], { timeoutMs: 10_000, cwd: fx.seed, input: 'hello\n' });
    expect(result.stdout.trim()).toBe('ce013625030ba8dba906f756967f9e9ca394464a');
  });

  it('treats the exit codes it was told about as answers', async () => {
    const result = await runGit(['-C', fx.seed, 'rev-parse', '--verify', '--quiet', 'no-such-ref'], { timeoutMs: 10_000, okExitCodes: [1] });
    expect(result.exitCode).toBe(1);
  });

  it('ignores an inherited GIT_DIR that would point it at another repository', async () => {
    const saved = process.env.GIT_DIR;
    process.env.GIT_DIR = fx.origin;
    try {
      const result = await runGit(['-C', fx.seed, 'rev-parse', '--absolute-git-dir'], { timeoutMs: 10_000 });
      expect(result.stdout.trim()).toBe(`${fx.seed}/.git`);
    } finally {
      if (saved === undefined) delete process.env.GIT_DIR;
      else process.env.GIT_DIR = saved;
    }
  });

  it('does not run a repository’s configured fsmonitor or hooks', async () => {
    const marker = `${fx.dir}/fsmonitor-ran`;
    execFileSync('git', ['-C', fx.seed, 'config', 'core.fsmonitor', `touch ${marker}; false`]);
    // Plain git does run it: the check below can fail.
    execFileSync('git', ['-C', fx.seed, 'status', '--porcelain'], { stdio: 'ignore' });
    expect(existsSync(marker)).toBe(true);
    rmSync(marker);
    await runGit(['-C', fx.seed, 'status', '--porcelain'], { timeoutMs: 10_000 });
    expect(existsSync(marker)).toBe(false);
  });
});
