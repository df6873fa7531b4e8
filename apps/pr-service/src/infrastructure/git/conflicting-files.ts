import { createHash } from 'node:crypto';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { assertBranchName, assertRepositoryUrl, runGit } from '@gantry/git';

/**
 * GitHub says a pull request conflicts (`mergeable_state: dirty`) but not where. The files come from
 * git itself: the base and head branches are fetched into a bare repository of this service's own
 * (one per clone URL) and merged in memory with `git merge-tree --write-tree --name-only`, which
 * exits 1 and lists the conflicted paths when the merge conflicts. Nothing is checked out.
 */
export class ConflictingFiles {
  /**
   * The work under way on each bare repository. Every pull request of a repository uses the same
   * refs there: two at once would fight over them (git's ref lock) or merge one's base with the
   * other's head, naming the wrong files. So they take turns.
   */
  private readonly turns = new Map<string, Promise<unknown>>();

  constructor(private readonly options: { gitDir: string; timeoutMs: number }) {}

  async between(cloneUrl: string, baseBranch: string, headBranch: string): Promise<string[]> {
    const repo = join(this.options.gitDir, createHash('sha256').update(cloneUrl).digest('hex').slice(0, 24) + '.git');
    const previous = this.turns.get(repo) ?? Promise.resolve();
    const turn = previous.catch(() => undefined).then(() => this.inTurn(repo, cloneUrl, baseBranch, headBranch));
    this.turns.set(repo, turn);
    try {
      return await turn;
    } finally {
      if (this.turns.get(repo) === turn) this.turns.delete(repo);
    }
  }

  private async inTurn(repo: string, cloneUrl: string, baseBranch: string, headBranch: string): Promise<string[]> {
    const timeoutMs = this.options.timeoutMs;
    assertRepositoryUrl(cloneUrl);
    await assertBranchName(baseBranch);
    await assertBranchName(headBranch);
    await mkdir(repo, { recursive: true });
    await runGit(['init', '-q', '--bare', '--', repo], { timeoutMs });
    await runGit(['fetch', '-q', '--no-tags', '--force', '--', cloneUrl, `+refs/heads/${baseBranch}:refs/gantry/base`, `+refs/heads/${headBranch}:refs/gantry/head`], {
      cwd: repo,
      timeoutMs,
    });
    const merged = await runGit(['merge-tree', '--write-tree', '--name-only', '--no-messages', 'refs/gantry/base', 'refs/gantry/head'], {
      cwd: repo,
      timeoutMs,
      okExitCodes: [1],
    });
    if (merged.exitCode === 0) return [];
    // The first line is the tree git would write; the conflicted paths follow, one a line.
    const files = merged.stdout.split('\n').slice(1).map((l) => l.trim()).filter((l) => l !== '');
    return [...new Set(files)];
  }
}
