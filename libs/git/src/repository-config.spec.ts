import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { ErrorCode, GantryError } from '@gantry/contracts';
import { runGit } from './git-command.js';
import { CREDENTIAL_HELPER_VARIABLE } from './overrides.js';
import { assertRepositoryConfig, describeConfigKey, removeForeignConfig } from './repository-config.js';
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
