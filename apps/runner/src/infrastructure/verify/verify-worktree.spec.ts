import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { ErrorCode } from '@gantry/contracts';
import { createGitFixture, type GitFixture } from '@gantry/git/testing';
import { finishFacts } from './finish-facts.js';
import { verifyWorktree } from './verify-worktree.js';

describe('verifying a worktree against its base_sha (real git)', () => {
  let repo: GitFixture;
  let base: string;

  beforeEach(async () => {
    repo = createGitFixture();
    await repo.commit({ 'src/app.ts': 'export const app = 1;\n', 'docs/old.md': 'obsolete\n' }, 'main: app');
    await repo.pushToMain('HEAD');
    await repo.git(repo.seed, 'checkout', '-q', '-b', 'feat/story-1');
    base = await repo.head();
  });
  afterEach(() => repo.cleanup());

  it('new commits with a net diff on top of base are ALIGNED and nothing is on the target yet', async () => {
    const commit = await repo.commit({ 'src/feature.ts': 'export const feature = true;\n' }, 'feat: feature');
    const report = await verifyWorktree({ worktreeDir: repo.seed, baseSha: base, target: 'origin/main' });
    expect(report).toMatchObject({
      result: 'ALIGNED',
      baseSha: base,
      headSha: commit,
      newCommits: [commit],
      netDiff: [{ status: 'A', path: 'src/feature.ts' }],
      netDiffStat: { filesChanged: 1, insertions: 1, deletions: 0 },
      descendsFromBase: true,
      branchMerged: false,
      netChangeOnTarget: false,
      diffIdenticalToMergedBranch: false,
      conflictsWithTarget: false,
      planOnTarget: null,
      workAlreadyOnTarget: false,
      uncommittedPaths: [],
    });
  });

  it('a branch where nothing happened is EMPTY and, without a plan, not proven to be on the target', async () => {
    const report = await verifyWorktree({ worktreeDir: repo.seed, baseSha: base, target: 'origin/main' });
    expect(report).toMatchObject({ result: 'EMPTY', newCommits: [], netDiff: [], branchMerged: false, workAlreadyOnTarget: false });
  });

  it('a branch where nothing happened is EMPTY with the work on the target when the plan is already there', async () => {
    const report = await verifyWorktree({
      worktreeDir: repo.seed,
      baseSha: base,
      target: 'origin/main',
      expectedChanges: [{ path: 'src/app.ts', contains: 'export const app' }],
    });
    expect(report.result).toBe('EMPTY');
    expect(report.planOnTarget).toMatchObject({ kind: 'already_done', commit: base });
    expect(report.workAlreadyOnTarget).toBe(true);
    expect(finishFacts(report, { failure: null, cancelled: false })).toMatchObject({
      verifyResult: 'EMPTY',
      newCommit: false,
      netDiff: { filesChanged: 0, insertions: 0, deletions: 0 },
      workAlreadyOnTarget: true,
    });
  });

  it('a delete-only commit is a net diff, not EMPTY', async () => {
    const commit = await repo.commit({ 'docs/old.md': null }, 'chore: drop obsolete doc');
    const report = await verifyWorktree({ worktreeDir: repo.seed, baseSha: base, target: 'origin/main' });
    expect(report.result).toBe('ALIGNED');
    expect(report.newCommits).toEqual([commit]);
    expect(report.netDiff).toEqual([{ status: 'D', path: 'docs/old.md' }]);
    expect(report.netDiffStat).toEqual({ filesChanged: 1, insertions: 0, deletions: 1 });
    expect(finishFacts(report, { failure: null, cancelled: false })).toEqual({
      verifyResult: 'ALIGNED',
      newCommit: true,
      netDiff: { filesChanged: 1, insertions: 0, deletions: 1 },
      workAlreadyOnTarget: false,
      diffIdenticalToMergedBranch: false,
      failure: null,
      cancelled: false,
      headSha: commit,
      planCheck: 'NO_EXPECTED_CHANGES',
    });
  });

  it('held against the plan: an unrelated deletion instead of the planned file is DIVERGENT, kept with its head', async () => {
    const commit = await repo.commit({ 'docs/old.md': null }, 'chore: drop an unrelated doc');
    const report = await verifyWorktree({ worktreeDir: repo.seed, baseSha: base, target: 'origin/main', expectedChanges: [{ path: 'src/planned.ts', contains: 'planned' }] });
    expect(report).toMatchObject({ result: 'DIVERGENT', planCheck: 'NONE_PRESENT', headSha: commit, plan: { expected: 1, present: 0, madeByBranch: 0 } });
    expect(finishFacts(report, { failure: null, cancelled: false })).toMatchObject({ verifyResult: 'DIVERGENT', headSha: commit, planCheck: 'NONE_PRESENT' });
  });

  it('held against the plan: all planned changes → ALIGNED, some → PARTIAL', async () => {
    await repo.commit({ 'src/planned.ts': 'export const planned = 1;\n' }, 'feat: planned');
    const plan = [{ path: 'src/planned.ts', contains: 'planned' }, { path: 'src/second.ts' }];
    const some = await verifyWorktree({ worktreeDir: repo.seed, baseSha: base, target: 'origin/main', expectedChanges: plan });
    expect(some).toMatchObject({ result: 'PARTIAL', planCheck: 'SOME_PRESENT' });
    await repo.commit({ 'src/second.ts': 'two\n' }, 'feat: second');
    const all = await verifyWorktree({ worktreeDir: repo.seed, baseSha: base, target: 'origin/main', expectedChanges: plan });
    expect(all).toMatchObject({ result: 'ALIGNED', planCheck: 'ALL_PRESENT', plan: { expected: 2, present: 2, madeByBranch: 2 } });
  });

  it('a change and its revert leave no net diff and are EMPTY despite two commits', async () => {
    await repo.commit({ 'src/tmp.ts': 'x\n' }, 'add tmp');
    await repo.git(repo.seed, 'revert', '--no-edit', 'HEAD');
    const report = await verifyWorktree({ worktreeDir: repo.seed, baseSha: base, target: 'origin/main' });
    expect(report.newCommits).toHaveLength(2);
    expect(report.netDiff).toEqual([]);
    expect(report.result).toBe('EMPTY');
  });

  it('a branch already merged into the target is reported as merged and on the target', async () => {
    await repo.commit({ 'src/feature.ts': 'export const feature = true;\n' }, 'feat: feature');
    await repo.pushToMain('HEAD');
    const report = await verifyWorktree({ worktreeDir: repo.seed, baseSha: base, target: 'origin/main' });
    expect(report).toMatchObject({
      branchMerged: true,
      netChangeOnTarget: true,
      diffIdenticalToMergedBranch: true,
      workAlreadyOnTarget: true,
      conflictsWithTarget: false,
    });
  });

  it('a branch merged with a merge commit, after which the target moved on, is merged', async () => {
    await repo.commit({ 'src/feature.ts': 'export const feature = true;\n' }, 'feat: feature');
    await repo.git(repo.seed, 'checkout', '-q', '-b', 'integration', 'origin/main');
    await repo.commit({ 'src/unrelated.ts': 'export const unrelated = 1;\n' }, 'main: unrelated');
    await repo.git(repo.seed, 'merge', '-q', '--no-ff', '-m', 'Merge feat/story-1', 'feat/story-1');
    await repo.commit({ 'src/later.ts': 'export const later = 1;\n' }, 'main: later');
    await repo.pushToMain('integration');
    await repo.git(repo.seed, 'checkout', '-q', 'feat/story-1');
    const report = await verifyWorktree({ worktreeDir: repo.seed, baseSha: base, target: 'origin/main' });
    expect(report).toMatchObject({ branchMerged: true, diffIdenticalToMergedBranch: true, workAlreadyOnTarget: true });
  });

  it('a branch whose commits were squash-merged has a diff identical to a merged branch', async () => {
    await repo.commit({ 'src/feature.ts': 'export const feature = 1;\n' }, 'feat: part one');
    await repo.commit({ 'src/feature.ts': 'export const feature = 2;\n', 'docs/old.md': null }, 'feat: part two');
    await repo.git(repo.seed, 'checkout', '-q', '-b', 'squashed', 'origin/main');
    await repo.git(repo.seed, 'merge', '-q', '--squash', 'feat/story-1');
    await repo.git(repo.seed, 'commit', '-q', '-m', 'feat: story 1 (#12)');
    await repo.commit({ 'src/later.ts': 'export const later = 1;\n' }, 'main: later');
    await repo.pushToMain('squashed');
    await repo.git(repo.seed, 'checkout', '-q', 'feat/story-1');
    const report = await verifyWorktree({ worktreeDir: repo.seed, baseSha: base, target: 'origin/main' });
    expect(report).toMatchObject({
      result: 'ALIGNED',
      branchMerged: false,
      diffIdenticalToMergedBranch: true,
      netChangeOnTarget: true,
      workAlreadyOnTarget: true,
    });
  });

  it('a branch of which only one commit reached the target is not on the target', async () => {
    const first = await repo.commit({ 'src/one.ts': 'export const one = 1;\n' }, 'feat: one');
    await repo.commit({ 'src/two.ts': 'export const two = 2;\n' }, 'feat: two');
    await repo.git(repo.seed, 'checkout', '-q', '-b', 'picked', 'origin/main');
    await repo.git(repo.seed, 'cherry-pick', '-x', first);
    await repo.pushToMain('picked');
    await repo.git(repo.seed, 'checkout', '-q', 'feat/story-1');
    const report = await verifyWorktree({ worktreeDir: repo.seed, baseSha: base, target: 'origin/main' });
    expect(report).toMatchObject({
      result: 'ALIGNED',
      branchMerged: false,
      diffIdenticalToMergedBranch: false,
      netChangeOnTarget: false,
      workAlreadyOnTarget: false,
    });
  });

  it('work cherry-picked onto the target already is on the target although the branch is not merged', async () => {
    const commit = await repo.commit({ 'src/feature.ts': 'export const feature = true;\n' }, 'feat: feature');
    await repo.git(repo.seed, 'checkout', '-q', '-b', 'hotfix', 'origin/main');
    await repo.git(repo.seed, 'cherry-pick', '-x', commit);
    await repo.pushToMain('hotfix');
    expect(await repo.git(repo.seed, 'rev-parse', 'origin/main')).not.toBe(commit);
    await repo.git(repo.seed, 'checkout', '-q', 'feat/story-1');
    const report = await verifyWorktree({ worktreeDir: repo.seed, baseSha: base, target: 'origin/main' });
    expect(report).toMatchObject({
      result: 'ALIGNED',
      branchMerged: false,
      netChangeOnTarget: true,
      workAlreadyOnTarget: true,
    });
  });

  it('a branch left on an old line identical to work already merged is DIVERGENT and on the target', async () => {
    const mainBefore = await repo.head();
    const oldWork = await repo.commit({ 'src/old-feature.ts': 'export const old = 1;\n' }, 'feat: old feature');
    // The old branch was squash-merged into main; the job then started from main's tip.
    await repo.git(repo.seed, 'checkout', '-q', '-b', 'squash', mainBefore);
    await repo.commit({ 'src/old-feature.ts': 'export const old = 1;\n' }, 'feat: old feature (squashed)');
    await repo.pushToMain('squash');
    const jobBase = await repo.head();
    // The worktree ends on the old branch's commit, which does not descend from the job's base.
    await repo.git(repo.seed, 'checkout', '-q', '--detach', oldWork);
    const report = await verifyWorktree({ worktreeDir: repo.seed, baseSha: jobBase, target: 'origin/main' });
    expect(report).toMatchObject({
      result: 'DIVERGENT',
      descendsFromBase: false,
      netDiff: [{ status: 'A', path: 'src/old-feature.ts' }],
      netChangeOnTarget: true,
      diffIdenticalToMergedBranch: true,
      workAlreadyOnTarget: true,
    });
  });

  it('a divergent branch whose diff is not on the target is DIVERGENT and not on the target', async () => {
    const mainBefore = await repo.head();
    const stray = await repo.commit({ 'src/stray.ts': 'export const stray = 1;\n' }, 'stray work');
    await repo.git(repo.seed, 'checkout', '-q', '-b', 'other', mainBefore);
    await repo.commit({ 'src/other.ts': 'export const other = 1;\n' }, 'other work');
    await repo.pushToMain('other');
    const jobBase = await repo.head();
    await repo.git(repo.seed, 'checkout', '-q', '--detach', stray);
    const report = await verifyWorktree({ worktreeDir: repo.seed, baseSha: jobBase, target: 'origin/main' });
    expect(report).toMatchObject({
      result: 'DIVERGENT',
      netChangeOnTarget: false,
      branchMerged: false,
      diffIdenticalToMergedBranch: false,
      workAlreadyOnTarget: false,
    });
  });

  it('a conflict with the target is reported but stays ALIGNED: it is the pull request’s merge conflict', async () => {
    await repo.commit({ 'src/app.ts': 'export const app = 2;\n' }, 'feat: app 2');
    await repo.git(repo.seed, 'checkout', '-q', '-b', 'elsewhere', 'origin/main');
    await repo.commit({ 'src/app.ts': 'export const app = 3;\n' }, 'main: app 3');
    await repo.pushToMain('elsewhere');
    await repo.git(repo.seed, 'checkout', '-q', 'feat/story-1');
    const report = await verifyWorktree({ worktreeDir: repo.seed, baseSha: base, target: 'origin/main' });
    expect(report).toMatchObject({ result: 'ALIGNED', conflictsWithTarget: true, netChangeOnTarget: false });
  });

  it('partial completion reported by the agent makes new work PARTIAL', async () => {
    await repo.commit({ 'src/half.ts': 'export const half = 0.5;\n' }, 'feat: half');
    const report = await verifyWorktree({ worktreeDir: repo.seed, baseSha: base, target: 'origin/main', partialCompletion: true });
    expect(report.result).toBe('PARTIAL');
  });

  it('a plan found partly on the target makes the rest of the work PARTIAL', async () => {
    await repo.commit({ 'src/rest.ts': 'export const rest = 1;\n' }, 'feat: the rest');
    const report = await verifyWorktree({
      worktreeDir: repo.seed,
      baseSha: base,
      target: 'origin/main',
      expectedChanges: [{ path: 'src/app.ts' }, { path: 'src/rest.ts' }],
    });
    expect(report.planOnTarget).toMatchObject({ kind: 'partial', missing: [{ path: 'src/rest.ts' }] });
    expect(report.result).toBe('PARTIAL');
    expect(report.workAlreadyOnTarget).toBe(false);
  });

  it('lists what the agent left uncommitted, which a push would not carry', async () => {
    await repo.commit({ 'src/feature.ts': 'export const feature = true;\n' }, 'feat: feature');
    const { writeFile } = await import('node:fs/promises');
    await writeFile(join(repo.seed, 'src/app.ts'), 'export const app = 99;\n');
    await writeFile(join(repo.seed, 'scratch.txt'), 'notes\n');
    const report = await verifyWorktree({ worktreeDir: repo.seed, baseSha: base, target: 'origin/main' });
    expect(report.uncommittedPaths.sort()).toEqual(['scratch.txt', 'src/app.ts']);
  });

  it('refuses a base that is not a full SHA', async () => {
    await expect(verifyWorktree({ worktreeDir: repo.seed, baseSha: 'HEAD~1', target: 'origin/main' })).rejects.toMatchObject({
      code: ErrorCode.INVALID_COMMAND,
    });
  });

  it('an unknown base commit is NOT_FOUND', async () => {
    await expect(
      verifyWorktree({ worktreeDir: repo.seed, baseSha: 'f'.repeat(40), target: 'origin/main' }),
    ).rejects.toMatchObject({ code: ErrorCode.NOT_FOUND });
  });

  it('a target that looks like an option is not a commit and is never read as an option', async () => {
    const output = join(repo.dir, 'injected');
    await expect(
      verifyWorktree({ worktreeDir: repo.seed, baseSha: base, target: `--output=${output}` }),
    ).rejects.toMatchObject({ code: ErrorCode.NOT_FOUND });
    expect(existsSync(output)).toBe(false);
  });

  it('a target of two lines is refused before git runs', async () => {
    await expect(verifyWorktree({ worktreeDir: repo.seed, baseSha: base, target: 'origin/main\nHEAD' })).rejects.toMatchObject({
      code: ErrorCode.INVALID_COMMAND,
    });
  });

  it('the net diff and its counts are what git diff --name-status and --shortstat print, binary files and odd names included', async () => {
    await repo.commit(
      {
        'src/feature.ts': 'one\ntwo\nthree\n',
        'src/app.ts': 'export const app = 2;\nexport const more = 3;\n',
        'docs/old.md': null,
        'assets/logo.bin': 'PNG\0\x01\x02binary',
        'a colon: in a name.txt': 'c\n',
        'tab\there.txt': 't\n',
      },
      'feat: a mixed change',
    );
    const report = await verifyWorktree({ worktreeDir: repo.seed, baseSha: base, target: 'origin/main' });
    const nameStatus = (await repo.git(repo.seed, 'diff', '--name-status', '-z', '--no-renames', `${base}...HEAD`, '--')).split('\0').filter((f) => f !== '');
    const expected = [];
    for (let i = 0; i + 1 < nameStatus.length; i += 2) expected.push({ status: nameStatus[i], path: nameStatus[i + 1] });
    expect(report.netDiff).toEqual(expected);
    expect(report.netDiff.map((e) => e.path)).toEqual(expect.arrayContaining(['a colon: in a name.txt', 'tab\there.txt', 'assets/logo.bin']));
    const shortStat = await repo.git(repo.seed, 'diff', '--shortstat', '--no-renames', `${base}...HEAD`, '--');
    expect(shortStat).toContain('6 files changed, 7 insertions(+), 2 deletions(-)');
    expect(report.netDiffStat).toEqual({ filesChanged: 6, insertions: 7, deletions: 2 });
  });
});
