import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startGitHubFake, type GitHubFake } from '@gantry/github-fake';
import { Clone } from '@gantry/github-fake/testing';
import { ConflictingFiles } from './conflicting-files.js';

/*
 * The files of a conflict, worked out by git (docs/pr-service.md, PR-10), for pull requests of one
 * repository worked on at the same time (the reconciler runs several at once; a base that moved
 * makes several of them conflict together).
 */
describe('ConflictingFiles', () => {
  let github: GitHubFake;
  let clone: Clone;
  let cloneUrl: string;
  let gitDir: string;
  const branches = ['story/a', 'story/b', 'story/c', 'story/d'];
  const fileOf = (branch: string) => `src/${branch.slice('story/'.length)}.ts`;

  beforeAll(async () => {
    github = await startGitHubFake();
    const initialFiles = Object.fromEntries(branches.map((b) => [fileOf(b), 'export const x = 0;\n']));
    const created = await github.control.createRepository({ owner: 'acme', name: 'conflicts', initialFiles });
    cloneUrl = created.cloneUrl;
    clone = new Clone(cloneUrl);
    // Each branch changes its own file; main then changes every one of them: each branch conflicts in its file only.
    for (const branch of branches) clone.commitAndPush(branch, { [fileOf(branch)]: `export const x = '${branch}';\n` }, `change ${fileOf(branch)}`);
    clone.commitAndPush('main', Object.fromEntries(branches.map((b) => [fileOf(b), "export const x = 'main';\n"])), 'main changes them all');
    gitDir = mkdtempSync(join(tmpdir(), 'pr-conflicts-'));
  }, 30_000);

  afterAll(async () => {
    clone?.remove();
    await github?.close();
    if (gitDir) rmSync(gitDir, { recursive: true, force: true });
  });

  it('names the files of each pull request, even when several of one repository are worked out at once', async () => {
    const conflicts = new ConflictingFiles({ gitDir, timeoutMs: 30_000 });
    for (let round = 0; round < 3; round++) {
      const found = await Promise.all(branches.map((branch) => conflicts.between(cloneUrl, 'main', branch)));
      expect(found).toEqual(branches.map((branch) => [fileOf(branch)]));
    }
  }, 60_000);

  it('names the files of each pull request when two replicas on one host work them out in the one git directory at once', async () => {
    // Two pr-service processes on one host share GANTRY_PR_GIT_DIR (its default is the same for both);
    // each process has its own ConflictingFiles, as here.
    const replicas = [new ConflictingFiles({ gitDir, timeoutMs: 30_000 }), new ConflictingFiles({ gitDir, timeoutMs: 30_000 })];
    for (let round = 0; round < 5; round++) {
      const found = await Promise.all(branches.map((branch, i) => replicas[i % 2]!.between(cloneUrl, 'main', branch).catch((error: unknown) => String(error))));
      expect(found).toEqual(branches.map((branch) => [fileOf(branch)]));
    }
    // Each look-up's refs went with it.
    const repos = readdirSync(gitDir);
    expect(repos).toHaveLength(1);
    expect(execFileSync('git', ['for-each-ref', 'refs/gantry/'], { cwd: join(gitDir, repos[0]!), encoding: 'utf8' })).toBe('');
  }, 120_000);

  it('keeps one bare repository for the spellings of one clone URL', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'pr-conflicts-spellings-'));
    try {
      const conflicts = new ConflictingFiles({ gitDir: dir, timeoutMs: 30_000 });
      for (const url of [cloneUrl, `${cloneUrl}/`]) expect(await conflicts.between(url, 'main', 'story/a')).toEqual([fileOf('story/a')]);
      expect(readdirSync(dir)).toHaveLength(1);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});
