import { createHash, randomUUID } from 'node:crypto';
import { mkdir, rename, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { canonicalRepositoryUrl } from '@gantry/contracts';
import { assertBranchName, assertRepositoryUrl, runGit } from '@gantry/git';

/**
 * GitHub says a pull request conflicts (`mergeable_state: dirty`) but not where. The files come from
 * git itself: the base and head branches are fetched into a bare repository of this service's own
 * (one per repository: per canonical spelling of its clone URL, docs/worktrees.md) and merged in memory with `git merge-tree --write-tree --name-only`, which
 * exits 1 and lists the conflicted paths when the merge conflicts. Nothing is checked out.
 *
 * Several look-ups use one bare repository at once: the reconciler's runs of one process, and the
 * replicas on one host, which share the directory (`GANTRY_PR_GIT_DIR`, docs/pr-service.md). So each
 * look-up fetches into refs of its own (`refs/gantry/<look-up>/base` and `/head`) and deletes them
 * afterwards: none waits for another, none fails on another's ref lock, and none merges another's
 * branches.
 */
export class ConflictingFiles {
  constructor(private readonly options: { gitDir: string; timeoutMs: number }) {}

  async between(cloneUrl: string, baseBranch: string, headBranch: string): Promise<string[]> {
    const timeoutMs = this.options.timeoutMs;
    assertRepositoryUrl(cloneUrl);
    await assertBranchName(baseBranch);
    await assertBranchName(headBranch);
    const repo = await this.repository(cloneUrl);
    const own = `refs/gantry/${randomUUID()}`;
    try {
      await runGit(['fetch', '-q', '--no-tags', '--no-write-fetch-head', '--force', '--', cloneUrl, `+refs/heads/${baseBranch}:${own}/base`, `+refs/heads/${headBranch}:${own}/head`], {
        cwd: repo,
        timeoutMs,
      });
      const merged = await runGit(['merge-tree', '--write-tree', '--name-only', '--no-messages', `${own}/base`, `${own}/head`], {
        cwd: repo,
        timeoutMs,
        okExitCodes: [1],
      });
      if (merged.exitCode === 0) return [];
      // The first line is the tree git would write; the conflicted paths follow, one a line.
      const files = merged.stdout.split('\n').slice(1).map((l) => l.trim()).filter((l) => l !== '');
      return [...new Set(files)];
    } finally {
      // A ref left behind (the deletion failed, the process died) only keeps its commits; no look-up reads it again.
      await runGit(['update-ref', '--stdin'], { cwd: repo, timeoutMs, input: `delete ${own}/base\ndelete ${own}/head\n` }).catch(() => undefined);
    }
  }

  /**
   * The bare repository of a clone URL — one for every spelling of it (`…/shop`, `…/shop.git/`) —
   * made whole or not at all: made aside and moved into place (a replica may make it at the same time).
   */
  private async repository(cloneUrl: string): Promise<string> {
    const repo = join(this.options.gitDir, createHash('sha256').update(canonicalRepositoryUrl(cloneUrl)).digest('hex').slice(0, 24) + '.git');
    if (await isFile(join(repo, 'HEAD'))) return repo;
    await mkdir(this.options.gitDir, { recursive: true });
    const aside = `${repo}.${randomUUID()}.new`;
    try {
      await runGit(['init', '-q', '--bare', '--', aside], { timeoutMs: this.options.timeoutMs });
      await rename(aside, repo).catch(async (error: NodeJS.ErrnoException) => {
        // Another look-up (of this process or a replica) moved its repository into place first.
        if ((error.code !== 'ENOTEMPTY' && error.code !== 'EEXIST') || !(await isFile(join(repo, 'HEAD')))) throw error;
      });
    } finally {
      await rm(aside, { recursive: true, force: true });
    }
    return repo;
  }
}

async function isFile(path: string): Promise<boolean> {
  try {
    return (await stat(path)).isFile();
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw error;
  }
}
