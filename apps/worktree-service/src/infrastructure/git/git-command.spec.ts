import { execFileSync } from 'node:child_process';
import { existsSync, rmSync } from 'node:fs';
import { ErrorCode, GantryError } from '@gantry/contracts';
import { GitCommandError, runGit } from './git-command.js';
import { createGitFixture, type GitFixture } from './testing/git-fixture.js';

describe('running git', () => {
  let fx: GitFixture;
  beforeEach(() => {
    fx = createGitFixture();
  });
  afterEach(() => fx.cleanup());

  it('kills git at its timeout and fails with TIMEOUT', async () => {
    // hash-object --stdin waits for input that never comes.
    const started = Date.now();
    const error = await runGit(['hash-object', '--stdin'], { timeoutMs: 300 }).then(() => null, (e: unknown) => e);
    expect(error).toBeInstanceOf(GitCommandError);
    expect((error as GantryError).code).toBe(ErrorCode.TIMEOUT);
    expect(Date.now() - started).toBeLessThan(5_000);
  });

  it('fails with git’s own words and exit code', async () => {
    const error = await runGit(['-C', fx.seed, 'rev-parse', '--verify', 'no-such-ref'], { timeoutMs: 10_000 }).then(() => null, (e: unknown) => e);
    expect(error).toBeInstanceOf(GitCommandError);
    expect((error as GantryError).code).toBe(ErrorCode.INTERNAL);
    expect((error as GantryError).details).toMatchObject({ exitCode: 128, args: ['-C', fx.seed, 'rev-parse', '--verify', 'no-such-ref'] });
    expect((error as GantryError).message).toMatch(/Needed a single revision/);
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
