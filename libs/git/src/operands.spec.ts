import { ErrorCode, GantryError } from '@gantry/contracts';
import { runGit } from './git-command.js';
import { createGitFixture } from './testing/index.js';
import { assertBaseRef, assertBranchName, assertRepositoryUrl, assertSha, branchNameChecksRun, COMMITS_QUERY_ARGS, commitsQuery } from './operands.js';

async function refused(run: () => unknown): Promise<void> {
  const error = await Promise.resolve()
    .then(run)
    .then(
      () => null,
      (e: unknown) => e,
    );
  expect(error).toBeInstanceOf(GantryError);
  expect((error as GantryError).code).toBe(ErrorCode.INVALID_COMMAND);
}

describe('operands checked before git sees them', () => {
  it.each(['--upload-pack=touch /tmp/pwned', '-x', 'a..b', 'has space', 'a@{1}', 'foo.lock', '@', 'refs/heads/.hidden', 'x;touch /tmp/pwned'])(
    'refuses the branch name %j',
    async (branch) => {
      await refused(() => assertBranchName(branch));
      await refused(() => assertBaseRef(branch));
    },
  );

  it('asks git once about a name it accepted', async () => {
    const before = branchNameChecksRun();
    await assertBranchName('release/v1.2-asked-once');
    await assertBranchName('release/v1.2-asked-once');
    await assertBaseRef('release/v1.2-asked-once');
    expect(branchNameChecksRun()).toBe(before + 1);
  });

  it('does not ask git about a plain name (letters, digits, _ and - in /-separated parts), each of which git accepts', async () => {
    // A spread of plain names, edge cases first, then random ones; git's own check must accept each.
    const alphabet = 'abcXYZ019_-';
    let seed = 7;
    const random = (n: number) => (seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) % n;
    const part = () => 'aZ7'[random(3)]! + Array.from({ length: random(6) }, () => alphabet[random(alphabet.length)]).join('');
    const names = [
      'a',
      '0',
      'Z-',
      'x_',
      'a--b',
      'HEAD-x',
      'HEAD/x',
      'x/HEAD',
      'lock',
      'a/lock',
      'gantry/job-42',
      'a'.repeat(255),
      ...Array.from({ length: 60 }, () => Array.from({ length: 1 + random(4) }, part).join('/')),
    ];
    const before = branchNameChecksRun();
    for (const name of names) await assertBranchName(name);
    expect(branchNameChecksRun()).toBe(before);
    for (const name of names) {
      const checked = await runGit(['check-ref-format', '--branch', name], { timeoutMs: 10_000, okExitCodes: [1, 128] });
      expect({ name, exitCode: checked.exitCode, stdout: checked.stdout.trim() }).toEqual({ name, exitCode: 0, stdout: name });
    }
    // Anything else is still git's to judge: a dot, a part that begins with '_'.
    await assertBranchName('release/1.0');
    await assertBranchName('feature/_draft');
    expect(branchNameChecksRun()).toBe(before + 2);
  });

  it('accepts ordinary branch names and full SHAs', async () => {
    await assertBranchName('feature/checkout-2');
    await assertBaseRef('main');
    await assertBaseRef('4b825dc642cb6eb9a060e54bf8d69288fbee4904');
    assertSha('4b825dc642cb6eb9a060e54bf8d69288fbee4904');
  });

  it.each(['ext::sh -c touch% /tmp/pwned', 'fd::0', '--upload-pack=touch /tmp/pwned', '-oProxyCommand=x', 'https://user:secret@github.com/a/b.git', 'relative/path.git', '/srv/../etc'])(
    'refuses the repository URL %j',
    async (url) => {
      await refused(() => assertRepositoryUrl(url));
    },
  );

  it.each(['HEAD', 'main', '4b825dc', '--all'])('refuses %j where a full SHA is needed', async (value) => {
    await refused(() => assertSha(value));
  });

  it('asks for the commits of several names in one process, in their order, null where there is none', async () => {
    const repo = createGitFixture();
    try {
      const first = repo.commit({ 'a.txt': 'a\n' }, 'first');
      repo.git(repo.seed, 'tag', '-a', '-m', 'annotated', 'v1');
      const second = repo.commit({ 'b.txt': 'b\n' }, 'second');
      const names = ['HEAD', 'v1', 'no-such-branch', '--output=/tmp/x', 'HEAD~1', 'HEAD^{tree}', first];
      const query = commitsQuery(names);
      const { stdout } = await runGit(COMMITS_QUERY_ARGS, { cwd: repo.seed, input: query.input, timeoutMs: 10_000 });
      // The annotated tag is peeled to its commit; an option-like name is only a name that is not there.
      expect(query.answers(stdout)).toEqual([second, first, null, null, first, null, first]);
    } finally {
      repo.cleanup();
    }
  });

  it.each(['main\nHEAD', 'main\0junk'])('refuses to ask about %j, which git would not read as one name', async (name) => {
    await refused(() => commitsQuery(['HEAD', name]));
  });
});
