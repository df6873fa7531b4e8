import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { open } from 'node:fs/promises';
import path from 'node:path';
import { ErrorCode, GantryError } from '@gantry/contracts';
import { runGit } from './git-command.js';
import { GitCommandError } from './git-process.js';
import { commandLineOverrides } from './overrides.js';
import { processesWith } from '@gantry/testing';
import { createGitFixture, plainGitEnvironment, type GitFixture } from './testing/index.js';

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

/** Waits until exactly one process has `needle` as an argument (git blocked on a FIFO does not go away). */
async function theProcessWith(needle: string): Promise<number> {
  for (;;) {
    const found = processesWith(needle);
    if (found.length === 1) return found[0]!;
    expect(found.length).toBeLessThan(2);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

function environmentOf(pid: number): Map<string, string> {
  const entries = readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0').filter(Boolean);
  return new Map(entries.map((entry) => [entry.slice(0, entry.indexOf('=')), entry.slice(entry.indexOf('=') + 1)]));
}

describe('running git', () => {
  let fx: GitFixture;
  beforeEach(() => {
    fx = createGitFixture();
  });
  afterEach(() => fx.cleanup());

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

/*
 * The seams between the policy (docs/git.md) and simple-git, which starts the processes: what the
 * git process simple-git started was given, what stops it, and what simple-git's guard refuses
 * before anything starts. The processes are observed from the outside, in /proc.
 */

describe('git as simple-git starts it', () => {
  let fx: GitFixture;
  beforeEach(() => {
    fx = createGitFixture();
  });
  afterEach(() => fx.cleanup());

  /** A program for git to run in place of upload-pack: it leaves `marker` and stops at once. */
  function stoppingScript(marker: string): string {
    const script = fx.markerScript(marker);
    writeFileSync(script, `#!/bin/sh\ntouch '${marker}'\nexit 1\n`);
    return script;
  }

  function fifo(name: string): string {
    const file = path.join(fx.dir, name);
    execFileSync('mkfifo', [file]);
    return file;
  }

  it('gets the policy: its overrides on the command line and the scrubbed environment', async () => {
    const pipe = fifo('policy-pipe');
    const identity = { name: 'Gantry', email: 'gantry@example.invalid' };
    const running = withEnv({ GIT_DIR: fx.origin, GIT_SSH_COMMAND: '/tmp/agent', EDITOR: '/tmp/agent' }, () =>
      runGit(['hash-object', '--', pipe], { cwd: fx.seed, timeoutMs: 120_000, identity }),
    );
    const pid = await theProcessWith(pipe);
    const argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean);
    const env = environmentOf(pid);
    // Let git finish: it hashes what arrives on the pipe.
    const writer = await open(pipe, 'w');
    await writer.write('hello\n');
    await writer.close();
    expect((await running).stdout.trim()).toBe('ce013625030ba8dba906f756967f9e9ca394464a');

    expect(argv.slice(1)).toEqual([...commandLineOverrides().flatMap((setting) => ['-c', setting]), 'hash-object', '--', pipe]);
    expect(argv).toContain('core.hooksPath=/dev/null');
    expect(Object.fromEntries([...env].filter(([name]) => name.startsWith('GIT_')))).toEqual({
      GIT_CONFIG_NOSYSTEM: '1',
      GIT_CONFIG_GLOBAL: '/dev/null',
      GIT_TERMINAL_PROMPT: '0',
      GIT_ALLOW_PROTOCOL: 'file:https:ssh',
      GIT_NO_REPLACE_OBJECTS: '1',
      GIT_AUTHOR_NAME: identity.name,
      GIT_AUTHOR_EMAIL: identity.email,
      GIT_COMMITTER_NAME: identity.name,
      GIT_COMMITTER_EMAIL: identity.email,
      // simple-git's: git refuses an abbreviated option (`--upload-pa` for `--upload-pack`).
      GIT_TEST_DISALLOW_ABBREVIATED_OPTIONS: 'true',
    });
    expect(env.has('EDITOR')).toBe(false);
    expect(env.get('LC_ALL')).toBe('C');
  });

  it('is killed when its time runs out, and the call fails with TIMEOUT', async () => {
    const pipe = fifo('never-written');
    const running = runGit(['hash-object', '--', pipe], { cwd: fx.seed, timeoutMs: 3_000 }).then(
      () => null,
      (e: unknown) => e,
    );
    const pid = await theProcessWith(pipe);
    const error = await running;
    expect(error).toBeInstanceOf(GantryError);
    expect((error as GantryError).code).toBe(ErrorCode.TIMEOUT);
    expect(existsSync(`/proc/${pid}`) && processesWith(pipe).includes(pid)).toBe(false);
  });

  it('is killed when the caller\'s signal aborts, and the call fails with the signal\'s reason; once aborted, git is not started', async () => {
    const pipe = fifo('aborted-pipe');
    const lost = new AbortController();
    const reason = new GantryError(ErrorCode.UNAVAILABLE, 'the lock held for this command was lost');
    // A deadline far beyond the test's: only the abort can end this git.
    const running = runGit(['hash-object', '--', pipe], { cwd: fx.seed, timeoutMs: 600_000, signal: lost.signal }).then(
      () => null,
      (e: unknown) => e,
    );
    const pid = await theProcessWith(pipe);
    lost.abort(reason);
    expect(await running).toBe(reason);
    expect(existsSync(`/proc/${pid}`) && processesWith(pipe).includes(pid)).toBe(false);

    const marker = path.join(fx.dir, 'not-started');
    expect(await runGit(['init', '--quiet', '--bare', '--', marker], { timeoutMs: 10_000, signal: lost.signal }).catch((e: unknown) => e)).toBe(reason);
    expect(existsSync(marker)).toBe(false);
  });

  it('is stopped when it writes more than the call takes', async () => {
    fx.commit({ 'big.txt': 'x'.repeat(200_000) }, 'big');
    const error = await failure(runGit(['show', 'HEAD:big.txt'], { cwd: fx.seed, timeoutMs: 30_000, maxBufferBytes: 10_000 }));
    expect(error.code).toBe(ErrorCode.INTERNAL);
    expect(error.message).toMatch(/more than 10000 bytes/);
    expect((await runGit(['show', 'HEAD:big.txt'], { cwd: fx.seed, timeoutMs: 30_000 })).stdout).toHaveLength(200_000);
  });

  it('fails with UNAVAILABLE in a directory that does not exist', async () => {
    const error = await failure(runGit(['status'], { cwd: path.join(fx.dir, 'gone'), timeoutMs: 10_000 }));
    expect(error.code).toBe(ErrorCode.UNAVAILABLE);
  });

  it('is not started for a repository whose config has a key outside the allow-list', async () => {
    fx.git(fx.seed, 'config', 'filter.agent.clean', 'cat');
    const error = await failure(runGit(['update-ref', 'refs/heads/refused', 'HEAD'], { cwd: fx.seed, timeoutMs: 10_000 }));
    expect(error.code).toBe(ErrorCode.PRECONDITION_FAILED);
    expect(fx.sha('refs/heads/refused', fx.seed)).toBeNull();
  });

  it('is not started with arguments simple-git’s guard refuses: an upload-pack program, a config write of one', async () => {
    const marker = fx.marker('upload-pack');
    const script = stoppingScript(marker);
    const attacks = [
      ['fetch', `--upload-pack=${script}`, '--', fx.origin],
      ['ls-remote', '--upload-pack', script, '--', fx.origin],
      ['config', 'core.fsmonitor', script],
    ];
    // Plain git runs the program: the check below can fail.
    try {
      execFileSync('git', attacks[0]!, { cwd: fx.seed, env: plainGitEnvironment(), stdio: 'ignore', timeout: 30_000 });
    } catch {
      // the script is no upload-pack; what matters is that it ran
    }
    expect(existsSync(marker)).toBe(true);
    const other = fx.marker('upload-pack');
    writeFileSync(script, `#!/bin/sh\ntouch '${other}'\nexit 1\n`);
    for (const args of attacks) {
      const error = await failure(runGit(args, { cwd: fx.seed, timeoutMs: 10_000 }));
      expect(error.code).toBe(ErrorCode.INVALID_COMMAND);
      expect(error.details).toMatchObject({ unsafe: [expect.stringMatching(/^allowUnsafe/)] });
    }
    expect(existsSync(other)).toBe(false);
    expect(fx.git(fx.seed, 'config', '--list')).not.toMatch(/fsmonitor/);
  });

  it('refuses an abbreviated option the guard would not recognise (git itself refuses it, by simple-git’s setting)', async () => {
    const marker = fx.marker('abbreviated');
    const script = stoppingScript(marker);
    const args = ['ls-remote', `--upload-pa=${script}`, '--', fx.origin];
    try {
      execFileSync('git', args, { cwd: fx.seed, env: plainGitEnvironment(), stdio: 'ignore', timeout: 30_000 });
    } catch {
      // as above
    }
    expect(existsSync(marker)).toBe(true);
    const other = fx.marker('abbreviated');
    writeFileSync(script, `#!/bin/sh\ntouch '${other}'\nexit 1\n`);
    const error = await failure(runGit(args, { cwd: fx.seed, timeoutMs: 10_000 }));
    expect(JSON.stringify(error.details)).toMatch(/abbreviated/);
    expect(existsSync(other)).toBe(false);
  });
});
