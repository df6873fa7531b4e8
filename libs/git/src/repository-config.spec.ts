import { execFileSync } from 'node:child_process';
import { closeSync, existsSync, openSync, readFileSync, renameSync, rmSync, statSync, writeFileSync, writeSync } from 'node:fs';
import path from 'node:path';
import { ErrorCode, GantryError } from '@gantry/contracts';
import { runGit } from './git-command.js';
import { CREDENTIAL_HELPER_VARIABLE } from './overrides.js';
import { assertRepositoryConfig, describeConfigKey, removeForeignConfig } from './repository-config.js';
import { configCheckCounts } from './remembered-checks.js';
import { createGitFixture, type GitFixture } from './testing/index.js';

describe('the repository config check', () => {
  let fx: GitFixture;
  beforeEach(() => {
    fx = createGitFixture();
  });
  afterEach(() => fx.cleanup());

  it('accepts what git itself writes: a clone, a bare clone with an origin, a worktree, an identity', async () => {
    fx.git(fx.seed, 'config', 'user.name', 'An Agent');
    fx.git(fx.seed, 'config', 'user.email', 'agent@example.invalid');
    fx.git(fx.seed, 'config', 'advice.detachedHead', 'false');
    const bare = path.join(fx.dir, 'clone.git');
    fx.git(fx.dir, 'init', '-q', '--bare', bare);
    fx.git(bare, 'remote', 'add', 'origin', fx.origin);
    fx.git(bare, 'fetch', '-q', 'origin', '+refs/heads/*:refs/remotes/origin/*');
    const worktree = path.join(fx.dir, 'worktree');
    fx.git(bare, 'worktree', 'add', '-q', '--no-track', '-b', 'feature/x', worktree, 'origin/main');
    for (const dir of [fx.seed, bare, worktree]) await assertRepositoryConfig(dir, 10_000);
  });

  it('names the keys it refuses without their subsections, which may hold URLs with credentials', async () => {
    fx.git(fx.seed, 'config', 'url.https://agent:s3cret@evil.example/.insteadOf', 'https://github.com/');
    fx.git(fx.seed, 'config', 'core.pager', 'less');
    const error = await assertRepositoryConfig(fx.seed, 10_000).then(
      () => null,
      (e: unknown) => e as GantryError,
    );
    expect(error).toBeInstanceOf(GantryError);
    expect(error!.code).toBe(ErrorCode.PRECONDITION_FAILED);
    expect([...((error!.details as { keys: string[] }).keys)].sort()).toEqual(['core.pager', 'url.<…>.insteadof']);
    expect(JSON.stringify({ message: error!.message, details: error!.details })).not.toMatch(/s3cret|evil\.example/);
    expect(describeConfigKey('filter.lfs.clean')).toBe('filter.<…>.clean');
    expect(describeConfigKey('core.fsmonitor')).toBe('core.fsmonitor');
  });

  it('lets the owner of a repository remove what an agent wrote — included files too — and keeps the rest', async () => {
    const bare = path.join(fx.dir, 'clone.git');
    fx.git(fx.dir, 'init', '-q', '--bare', bare);
    fx.git(bare, 'remote', 'add', 'origin', fx.origin);
    fx.git(bare, 'fetch', '-q', 'origin', '+refs/heads/*:refs/remotes/origin/*');
    const worktree = path.join(fx.dir, 'worktree');
    fx.git(bare, 'worktree', 'add', '-q', '--no-track', '-b', 'feature/x', worktree, 'origin/main');
    const included = path.join(bare, 'agent-included');
    writeFileSync(included, '[core]\n\tfsmonitor = /tmp/agent\n');
    const outside = path.join(fx.dir, 'outside-config');
    writeFileSync(outside, '[diff "x"]\n\ttextconv = /tmp/agent\n');
    // From the worktree, as an agent would: everything lands in the clone's config.
    fx.git(worktree, 'config', 'filter.agent.clean', '/tmp/agent');
    fx.git(worktree, 'config', 'url./tmp/elsewhere.git.insteadOf', fx.origin);
    fx.git(worktree, 'config', '--add', 'url./tmp/elsewhere.git.insteadOf', 'https://example.com/');
    fx.git(worktree, 'config', 'include.path', included);
    fx.git(worktree, 'config', 'includeIf.gitdir:/.path', outside);
    fx.git(worktree, 'config', 'user.name', 'An Agent');
    const before = readFileSync(path.join(bare, 'config'), 'utf8');
    expect(before).toContain('agent');

    const removed = await removeForeignConfig(worktree, { within: bare, timeoutMs: 10_000 });
    // The included file inside the clone is edited too; the one outside is dropped with its include.
    expect(removed.sort()).toEqual(['core.fsmonitor', 'filter.<…>.clean', 'include.path', 'includeif.<…>.path', 'url.<…>.insteadof'].sort());
    await assertRepositoryConfig(worktree, 10_000);
    expect(fx.git(bare, 'config', '--get', 'remote.origin.url')).toBe(fx.origin);
    expect(fx.git(bare, 'config', '--file', path.join(bare, 'config'), '--get', 'user.name')).toBe('An Agent');
    // Files outside the repository are not the owner's to edit.
    expect(readFileSync(outside, 'utf8')).toContain('textconv');
    expect(readFileSync(included, 'utf8')).not.toContain('fsmonitor');
  });

  it('refuses, rather than edits, a key that lives outside the owner’s directory', async () => {
    fx.git(fx.seed, 'config', 'core.fsmonitor', '/tmp/agent');
    const error = await removeForeignConfig(fx.seed, { within: path.join(fx.dir, 'somewhere-else'), timeoutMs: 10_000 }).then(
      () => null,
      (e: unknown) => e as GantryError,
    );
    expect(error?.code).toBe(ErrorCode.PRECONDITION_FAILED);
    expect(fx.git(fx.seed, 'config', '--get', 'core.fsmonitor')).toBe('/tmp/agent');
  });

  it('uses the credential helper the operator configured, never one of the repository', async () => {
    const marker = fx.marker('operator-helper');
    const saved = process.env[CREDENTIAL_HELPER_VARIABLE];
    process.env[CREDENTIAL_HELPER_VARIABLE] = `!f() { touch '${marker}'; echo username=gantry; echo password=from-operator; }; f`;
    try {
      const filled = await runGit(['credential', 'fill'], { cwd: fx.seed, timeoutMs: 10_000, input: 'protocol=https\nhost=example.com\n\n' });
      expect(filled.stdout).toContain('password=from-operator');
      expect(existsSync(marker)).toBe(true);
    } finally {
      if (saved === undefined) delete process.env[CREDENTIAL_HELPER_VARIABLE];
      else process.env[CREDENTIAL_HELPER_VARIABLE] = saved;
    }
  });
});

describe('a config check that passed is remembered while the files it read stay the same', () => {
  // Files changed in the last 2 s are never trusted (a write in the same clock tick could keep a
  // file's change time), so the repositories are made first and the tests wait once for them to settle.
  let fx: GitFixture;
  const clones: Record<string, { bare: string; worktree: string }> = {};
  const names = ['agent-writes', 'in-place', 'gitfile', 'commondir', 'head', 'worktree-config', 'fresh'] as const;
  const hostile = () => path.join(fx.dir, 'hostile.git');

  beforeAll(async () => {
    fx = createGitFixture();
    for (const name of names) {
      const bare = path.join(fx.dir, `${name}.git`);
      fx.git(fx.dir, 'init', '-q', '--bare', bare);
      fx.git(bare, 'fetch', '-q', fx.origin, '+refs/heads/*:refs/remotes/origin/*');
      const worktree = path.join(fx.dir, `${name}-worktree`);
      fx.git(bare, 'worktree', 'add', '-q', '--no-track', '-b', 'feature/x', worktree, 'origin/main');
      clones[name] = { bare, worktree };
    }
    // A repository whose config an agent wrote, with a worktree of its own.
    fx.git(fx.dir, 'init', '-q', '--bare', hostile());
    fx.git(hostile(), 'fetch', '-q', fx.origin, '+refs/heads/*:refs/remotes/origin/*');
    fx.git(hostile(), 'worktree', 'add', '-q', '--no-track', '-b', 'feature/x', path.join(fx.dir, 'hostile-worktree'), 'origin/main');
    fx.git(hostile(), 'config', 'core.fsmonitor', fx.markerScript(fx.marker('fsmonitor')));
    await new Promise((resolve) => setTimeout(resolve, 2_100));
  });
  afterAll(() => fx.cleanup());

  /** Runs a git command through the policy and says how its config check went. */
  async function status(dir: string): Promise<{ outcome: 'ran' | string; check: 'listed' | 'remembered' }> {
    const before = configCheckCounts();
    const outcome = await runGit(['rev-parse', '--absolute-git-dir'], { cwd: dir, timeoutMs: 10_000 }).then(
      () => 'ran',
      (error: unknown) => (error instanceof GantryError ? error.code : String(error)),
    );
    const after = configCheckCounts();
    expect(after.listed + after.remembered).toBe(before.listed + before.remembered + 1);
    return { outcome, check: after.listed > before.listed ? 'listed' : 'remembered' };
  }

  it('is not run again in a worktree or a bare clone whose files did not change, and is run again once an agent writes the config', async () => {
    const { bare, worktree } = clones['agent-writes']!;
    expect(await status(worktree)).toEqual({ outcome: 'ran', check: 'listed' });
    expect(await status(worktree)).toEqual({ outcome: 'ran', check: 'remembered' });
    expect((await runGit(['rev-parse', '--is-bare-repository'], { cwd: bare, timeoutMs: 10_000 })).stdout.trim()).toBe('true');
    expect(await status(worktree)).toEqual({ outcome: 'ran', check: 'remembered' });
    // As an agent would, from its worktree: git writes the clone's config anew (a new file).
    fx.git(worktree, 'config', 'core.fsmonitor', fx.markerScript(fx.marker('agent')));
    expect(await status(worktree)).toEqual({ outcome: ErrorCode.PRECONDITION_FAILED, check: 'listed' });
    expect(await status(worktree)).toEqual({ outcome: ErrorCode.PRECONDITION_FAILED, check: 'listed' });
  });

  it('sees a config rewritten in place at the same size with its modification time set back', async () => {
    const { bare, worktree } = clones['in-place']!;
    expect(await status(worktree)).toEqual({ outcome: 'ran', check: 'listed' });
    expect(await status(worktree)).toEqual({ outcome: 'ran', check: 'remembered' });
    const config = path.join(bare, 'config');
    const { mtimeNs, ino, size } = statSync(config, { bigint: true });
    const text = readFileSync(config, 'utf8');
    // core.pager (outside the allow-list) in the place of core.filemode, at the same length.
    expect(text).toContain('\tfilemode = true\n');
    const handle = openSync(config, 'r+');
    writeSync(handle, text.replace('\tfilemode = true\n', '\tpager = less  \n'), 0);
    closeSync(handle);
    // Its modification time set back to the nanosecond (utimes in Node takes seconds as a float).
    const ns = mtimeNs % 1_000_000_000n;
    execFileSync('touch', ['-m', `--date=@${mtimeNs / 1_000_000_000n}.${String(ns).padStart(9, '0')}`, config]);
    expect(statSync(config, { bigint: true })).toMatchObject({ ino, size, mtimeNs });
    expect(await status(worktree)).toEqual({ outcome: ErrorCode.PRECONDITION_FAILED, check: 'listed' });
  });

  it('sees a worktree’s .git file pointed at another repository', async () => {
    const { worktree } = clones.gitfile!;
    expect(await status(worktree)).toEqual({ outcome: 'ran', check: 'listed' });
    expect(await status(worktree)).toEqual({ outcome: 'ran', check: 'remembered' });
    writeFileSync(path.join(worktree, '.git'), `gitdir: ${path.join(hostile(), 'worktrees', 'hostile-worktree')}\n`);
    expect(await status(worktree)).toEqual({ outcome: ErrorCode.PRECONDITION_FAILED, check: 'listed' });
  });

  it('sees the worktree’s commondir pointed at another repository', async () => {
    const { bare, worktree } = clones.commondir!;
    expect(await status(worktree)).toEqual({ outcome: 'ran', check: 'listed' });
    expect(await status(worktree)).toEqual({ outcome: 'ran', check: 'remembered' });
    writeFileSync(path.join(bare, 'worktrees', 'commondir-worktree', 'commondir'), `${hostile()}\n`);
    expect(await status(worktree)).toEqual({ outcome: ErrorCode.PRECONDITION_FAILED, check: 'listed' });
  });

  it('checks again when the repository stops looking like one (its HEAD gone), where git would look in the parent directories', async () => {
    const { bare } = clones.head!;
    expect(await status(bare)).toMatchObject({ check: 'listed' });
    expect(await status(bare)).toMatchObject({ check: 'remembered' });
    rmSync(path.join(bare, 'HEAD'));
    expect((await status(bare)).check).toBe('listed');
  });

  it('does not remember a repository with per-worktree config, nor one whose files changed in the last moments', async () => {
    const { worktree } = clones['worktree-config']!;
    fx.git(worktree, 'config', 'core.repositoryFormatVersion', '1');
    fx.git(worktree, 'config', 'extensions.worktreeConfig', 'true');
    await new Promise((resolve) => setTimeout(resolve, 2_100));
    expect(await status(worktree)).toEqual({ outcome: 'ran', check: 'listed' });
    expect(await status(worktree)).toEqual({ outcome: 'ran', check: 'listed' });

    const fresh = clones.fresh!;
    fx.git(fresh.worktree, 'config', 'user.name', 'An Agent');
    expect(await status(fresh.worktree)).toEqual({ outcome: 'ran', check: 'listed' });
    expect(await status(fresh.worktree)).toEqual({ outcome: 'ran', check: 'listed' });
  });

  it('is remembered for a clone with a .git directory too, and not across that directory swapped for a .git file', async () => {
    expect(await status(fx.seed)).toEqual({ outcome: 'ran', check: 'listed' });
    expect(await status(fx.seed)).toEqual({ outcome: 'ran', check: 'remembered' });
    renameSync(path.join(fx.seed, '.git'), path.join(fx.dir, 'seed-git'));
    writeFileSync(path.join(fx.seed, '.git'), `gitdir: ${path.join(hostile(), 'worktrees', 'hostile-worktree')}\n`);
    expect(await status(fx.seed)).toEqual({ outcome: ErrorCode.PRECONDITION_FAILED, check: 'listed' });
  });
});
