import { execFileSync } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { ErrorCode, GantryError } from '@gantry/contracts';
import { runGit } from './git-command.js';
import { GitCommandError } from './git-process.js';
import { createGitFixture, type GitFixture } from './testing/index.js';

async function failure(promise: Promise<unknown>): Promise<GantryError> {
  const error = await promise.then(
    () => new Error('expected a failure, but git succeeded'),
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(GantryError);
  return error as GantryError;
}

function withEnv<T>(vars: Record<string, string>, run: () => Promise<T>): Promise<T> {
  const saved = { ...process.env };
  Object.assign(process.env, vars);
  return run().finally(() => {
    process.env = saved;
  });
}

describe('running git', () => {
  let fx: GitFixture;
  beforeEach(() => {
    fx = createGitFixture();
  });
  afterEach(() => fx.cleanup());

  it('kills git at its timeout and fails with TIMEOUT', async () => {
    // A named pipe nobody writes to: git blocks reading it.
    const fifo = path.join(fx.dir, 'never-written');
    execFileSync('mkfifo', [fifo]);
    const error = await failure(runGit(['hash-object', '--', fifo], { cwd: fx.seed, timeoutMs: 300 }));
    expect(error).toBeInstanceOf(GitCommandError);
    expect(error.code).toBe(ErrorCode.TIMEOUT);
  });

  it('fails with git’s own words and exit code', async () => {
    const error = await failure(runGit(['rev-parse', '--verify', 'no-such-ref'], { cwd: fx.seed, timeoutMs: 10_000 }));
    expect(error).toBeInstanceOf(GitCommandError);
    expect(error.code).toBe(ErrorCode.INTERNAL);
    expect(error.details).toMatchObject({ exitCode: 128, args: ['rev-parse', '--verify', 'no-such-ref'] });
    expect(error.message).toMatch(/Needed a single revision/);
  });

  it('runs in the given directory and feeds stdin', async () => {
    const result = await runGit(['hash-object', '--stdin'], { timeoutMs: 10_000, cwd: fx.seed, input: 'hello\n' });
    expect(result.stdout.trim()).toBe('ce013625030ba8dba906f756967f9e9ca394464a');
  });

  it('treats the exit codes it was told about as answers', async () => {
    const result = await runGit(['rev-parse', '--verify', '--quiet', 'no-such-ref'], { cwd: fx.seed, timeoutMs: 10_000, okExitCodes: [1] });
    expect(result.exitCode).toBe(1);
  });

  it('commits as the identity it is given', async () => {
    const tree = (await runGit(['write-tree'], { cwd: fx.seed, timeoutMs: 10_000 })).stdout.trim();
    const commit = await runGit(['commit-tree', tree, '-m', 'x'], { cwd: fx.seed, timeoutMs: 10_000, identity: { name: 'Gantry', email: 'gantry@example.invalid' } });
    expect(fx.git(fx.seed, 'log', '-1', '--format=%an <%ae> / %cn <%ce>', commit.stdout.trim())).toBe('Gantry <gantry@example.invalid> / Gantry <gantry@example.invalid>');
  });

  it('refuses options before the subcommand — the policy alone sets them — and runs nothing', async () => {
    const marker = fx.marker('alias');
    for (const args of [
      ['-c', `alias.x=!touch ${marker}`, 'x'],
      ['-C', fx.origin, 'status'],
      ['--git-dir', fx.origin, 'log'],
      ['--exec-path=/tmp', 'status'],
      [],
    ]) {
      const error = await failure(runGit(args, { cwd: fx.seed, timeoutMs: 10_000 }));
      expect(error.code).toBe(ErrorCode.INVALID_COMMAND);
    }
    expect(existsSync(marker)).toBe(false);
  });

  it('ignores an inherited GIT_DIR that would point it at another repository', async () => {
    const result = await withEnv({ GIT_DIR: fx.origin }, () => runGit(['rev-parse', '--absolute-git-dir'], { cwd: fx.seed, timeoutMs: 10_000 }));
    expect(result.stdout.trim()).toBe(`${fx.seed}/.git`);
  });

  it('reads no global or system config, whatever the environment names', async () => {
    const marker = fx.marker('global-alias');
    const global = path.join(fx.dir, 'global-gitconfig');
    writeFileSync(global, `[core]\n\tfsmonitor = touch ${marker}; false\n[alias]\n\tst = !touch ${marker}\n`);
    // Plain git with that environment does read it: the check below can fail.
    execFileSync('git', ['status', '--porcelain'], { cwd: fx.seed, env: { ...process.env, GIT_CONFIG_GLOBAL: global }, stdio: 'ignore' });
    expect(existsSync(marker)).toBe(true);
    const other = fx.marker('global-alias');
    writeFileSync(global, `[core]\n\tfsmonitor = touch ${other}; false\n`);
    await withEnv({ GIT_CONFIG_GLOBAL: global, GIT_CONFIG_SYSTEM: global, GIT_CONFIG_NOSYSTEM: '' }, async () => {
      await runGit(['status', '--porcelain'], { cwd: fx.seed, timeoutMs: 10_000 });
      const listed = await runGit(['config', '--list', '--show-scope'], { cwd: fx.seed, timeoutMs: 10_000 });
      expect(listed.stdout).not.toMatch(/^(global|system)\t/m);
    });
    expect(existsSync(other)).toBe(false);
  });

  it('drops inherited variables that name programs (GIT_EXTERNAL_DIFF, GIT_SSH_COMMAND, GIT_CONFIG_PARAMETERS, EDITOR …)', async () => {
    const marker = fx.marker('env');
    const script = fx.markerScript(marker);
    fx.git(fx.seed, 'checkout', '-q', '-b', 'env');
    const base = fx.sha('HEAD', fx.seed)!;
    const head = fx.commit({ 'a.txt': 'a\n' }, 'a');
    const hostile = {
      GIT_EXTERNAL_DIFF: script,
      GIT_SSH_COMMAND: script,
      GIT_CONFIG_PARAMETERS: `'core.fsmonitor'='${script}'`,
      GIT_CONFIG_COUNT: '1',
      GIT_CONFIG_KEY_0: 'core.fsmonitor',
      GIT_CONFIG_VALUE_0: script,
      EDITOR: script,
      GIT_EDITOR: script,
    };
    // Plain git honours them: the check below can fail.
    execFileSync('git', ['diff', base, head], { cwd: fx.seed, env: { ...process.env, ...hostile }, stdio: 'ignore' });
    expect(existsSync(marker)).toBe(true);
    const other = fx.marker('env');
    const otherScript = fx.markerScript(other);
    const again = Object.fromEntries(Object.entries(hostile).map(([k, v]) => [k, v.replace(script, otherScript)]));
    await withEnv(again, async () => {
      await runGit(['diff', base, head], { cwd: fx.seed, timeoutMs: 10_000 });
      await runGit(['status', '--porcelain'], { cwd: fx.seed, timeoutMs: 10_000 });
      await runGit(['ls-remote', '--', 'ssh://git.example.invalid/x.git'], { cwd: fx.seed, timeoutMs: 20_000 }).catch(() => undefined);
    });
    expect(existsSync(other)).toBe(false);
  });

  it('cannot use the ext or fd transports, even when the repository allows them', async () => {
    const marker = fx.marker('ext');
    fx.git(fx.seed, 'config', 'protocol.ext.allow', 'always');
    // Plain git with that config runs the command: the check below can fail.
    try {
      fx.git(fx.seed, 'ls-remote', '--', `ext::sh -c touch% ${marker}`);
    } catch {
      // the "remote" is not a git server; what matters is whether the command ran
    }
    expect(existsSync(marker)).toBe(true);
    fx.git(fx.seed, 'config', '--unset', 'protocol.ext.allow');
    const other = fx.marker('ext');
    for (const url of [`ext::sh -c touch% ${other}`, 'fd::0']) {
      const error = await failure(runGit(['ls-remote', '--', url], { cwd: fx.seed, timeoutMs: 20_000 }));
      expect(JSON.stringify(error.details)).toMatch(/transport '(ext|fd)' not allowed/);
    }
    expect(existsSync(other)).toBe(false);
  });
});
