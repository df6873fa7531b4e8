import { mkdtempSync, readdirSync, readFileSync, rmSync, type Dirent } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { runGit, type GitResult } from '@gantry/git';

/*
 * A hosted repository: a bare git repository on disk. Every change GitHub makes to a repository
 * (a merge, a squash, a rebase, a deleted branch) is made here with git itself, so a conflict is a
 * real conflict and a merge commit is a real commit a client can fetch.
 */

const TIMEOUT_MS = 60_000;

export interface Identity {
  name: string;
  email: string;
}

export interface MergeTreeResult {
  /** The tree of the merge result (with conflict markers when there are conflicts). */
  tree: string;
  /** Paths with conflicts, empty when the merge is clean. */
  conflicts: string[];
}

export interface CommitInfo {
  sha: string;
  tree: string;
  author: { name: string; email: string; date: string };
  committer: { name: string; email: string; date: string };
  message: string;
}

/** A full commit name: what it names never changes, so neither does an answer about it. */
const SHA = /^[0-9a-f]{40}$/;
/** Answers kept per repository (oldest forgotten first). */
const REMEMBERED_ANSWERS = 2_000;

export class BareRepository {
  /**
   * Answers about commits named by SHA (a PR's commit count and diff stats, a commit's message):
   * commits do not change, and a PR is rendered on every read of it, which ran two git processes
   * each time.
   */
  private readonly answers = new Map<string, Promise<unknown>>();

  constructor(readonly gitDir: string) {}

  /** `compute()`'s answer, remembered under `key` when every one of `shas` is a full SHA. */
  private remembered<T>(key: string, shas: string[], compute: () => Promise<T>): Promise<T> {
    if (!shas.every((sha) => SHA.test(sha))) return compute();
    let answer = this.answers.get(key) as Promise<T> | undefined;
    if (!answer) {
      answer = compute();
      this.answers.set(key, answer);
      if (this.answers.size > REMEMBERED_ANSWERS) this.answers.delete(this.answers.keys().next().value!);
      answer.catch(() => this.answers.delete(key));
    }
    // Each caller gets a copy of its own: an answer put into a webhook body must not change the one kept.
    return answer.then((value) => structuredClone(value));
  }

  static async init(gitDir: string, defaultBranch: string): Promise<BareRepository> {
    await mkdir(path.dirname(gitDir), { recursive: true });
    await runGit(['init', '-q', '--bare', `--initial-branch=${defaultBranch}`, '--', gitDir], { timeoutMs: TIMEOUT_MS });
    return new BareRepository(gitDir);
  }

  private git(args: string[], options: { input?: string; okExitCodes?: number[]; identity?: Identity } = {}): Promise<GitResult> {
    return runGit(args, { cwd: this.gitDir, timeoutMs: TIMEOUT_MS, ...options });
  }

  /**
   * The branches and their commits, read from the ref files (loose refs override packed-refs) rather
   * than by running git: this runs several times a second to notice pushes, and git updates these
   * files atomically (lock file + rename).
   */
  readBranches(): Map<string, string> {
    const branches = new Map<string, string>();
    try {
      for (const line of readFileSync(path.join(this.gitDir, 'packed-refs'), 'utf8').split('\n')) {
        const match = /^([0-9a-f]{40}) refs\/heads\/(.+)$/.exec(line);
        if (match) branches.set(match[2]!, match[1]!);
      }
    } catch {
      // no packed-refs yet
    }
    const walk = (dir: string, prefix: string): void => {
      let entries: Dirent[];
      try {
        // With the entries' types: no stat of each (this runs for every repository ten times a second).
        entries = readdirSync(dir, { withFileTypes: true });
      } catch {
        return;
      }
      for (const dirent of entries) {
        const entry = dirent.name;
        if (entry.endsWith('.lock')) continue;
        const full = path.join(dir, entry);
        if (dirent.isDirectory()) {
          walk(full, `${prefix}${entry}/`);
          continue;
        }
        try {
          const content = readFileSync(full, 'utf8').trim();
          if (/^[0-9a-f]{40}$/.test(content)) branches.set(`${prefix}${entry}`, content);
        } catch {
          // removed meanwhile: a deleted branch (packed entries were removed with it)
        }
      }
    };
    walk(path.join(this.gitDir, 'refs', 'heads'), '');
    return branches;
  }

  /** The commit `ref` names (branch, SHA, tag), or null. */
  async resolveCommit(ref: string): Promise<string | null> {
    if (ref.startsWith('-')) return null;
    const result = await this.git(['rev-parse', '--verify', '--quiet', '--end-of-options', `${ref}^{commit}`], { okExitCodes: [1, 128] });
    const sha = result.stdout.trim();
    return result.exitCode === 0 && /^[0-9a-f]{40}$/.test(sha) ? sha : null;
  }

  isAncestor(ancestor: string, descendant: string): Promise<boolean> {
    return this.remembered(`is-ancestor ${ancestor} ${descendant}`, [ancestor, descendant], () => this.computeIsAncestor(ancestor, descendant));
  }

  private async computeIsAncestor(ancestor: string, descendant: string): Promise<boolean> {
    const result = await this.git(['merge-base', '--is-ancestor', ancestor, descendant], { okExitCodes: [1] });
    return result.exitCode === 0;
  }

  /** Author, committer, message and tree of a commit (for webhook bodies that embed the commit). */
  commitInfo(sha: string): Promise<CommitInfo> {
    return this.remembered(`commit-info ${sha}`, [sha], () => this.computeCommitInfo(sha));
  }

  private async computeCommitInfo(sha: string): Promise<CommitInfo> {
    const { stdout } = await this.git(['show', '-s', '--format=%T%x1f%an%x1f%ae%x1f%aI%x1f%cn%x1f%ce%x1f%cI%x1f%B', sha]);
    const [tree, authorName, authorEmail, authorDate, committerName, committerEmail, committerDate, ...message] = stdout.split('\x1f');
    return {
      sha,
      tree: tree!,
      author: { name: authorName!, email: authorEmail!, date: authorDate! },
      committer: { name: committerName!, email: committerEmail!, date: committerDate! },
      message: message.join('\x1f').replace(/\n+$/, ''),
    };
  }

  /** Paths a commit added, removed and modified (against its first parent). */
  filesChanged(sha: string): Promise<{ added: string[]; removed: string[]; modified: string[] }> {
    return this.remembered(`files-changed ${sha}`, [sha], () => this.computeFilesChanged(sha));
  }

  private async computeFilesChanged(sha: string): Promise<{ added: string[]; removed: string[]; modified: string[] }> {
    const { stdout } = await this.git(['diff-tree', '--root', '--no-commit-id', '--name-status', '-r', '-z', sha]);
    const parts = stdout.split('\0').filter(Boolean);
    const changed = { added: [] as string[], removed: [] as string[], modified: [] as string[] };
    for (let i = 0; i + 1 < parts.length; i += 2) {
      const [status, file] = [parts[i]!, parts[i + 1]!];
      if (status.startsWith('A')) changed.added.push(file);
      else if (status.startsWith('D')) changed.removed.push(file);
      else changed.modified.push(file);
    }
    return changed;
  }

  /** Commits reachable from `head` and not from `base`, oldest first, with their subjects. */
  commitsBetween(base: string, head: string): Promise<{ sha: string; subject: string; body: string }[]> {
    return this.remembered(`commits-between ${base} ${head}`, [base, head], () => this.computeCommitsBetween(base, head));
  }

  private async computeCommitsBetween(base: string, head: string): Promise<{ sha: string; subject: string; body: string }[]> {
    const { stdout } = await this.git(['log', '--reverse', '--format=%H%x1f%s%x1f%b%x1e', `${base}..${head}`]);
    return stdout
      .split('\x1e')
      .map((record) => record.trim())
      .filter(Boolean)
      .map((record) => {
        const [sha, subject, body] = record.split('\x1f');
        return { sha: sha!, subject: subject ?? '', body: (body ?? '').trim() };
      });
  }

  changedFiles(base: string, head: string): Promise<{ additions: number; deletions: number; files: number }> {
    return this.remembered(`changed-files ${base} ${head}`, [base, head], () => this.computeChangedFiles(base, head));
  }

  private async computeChangedFiles(base: string, head: string): Promise<{ additions: number; deletions: number; files: number }> {
    const { stdout } = await this.git(['diff', '--numstat', `${base}...${head}`]);
    let additions = 0;
    let deletions = 0;
    let files = 0;
    for (const line of stdout.split('\n').filter(Boolean)) {
      const [a, d] = line.split('\t');
      additions += Number(a) || 0;
      deletions += Number(d) || 0;
      files += 1;
    }
    return { additions, deletions, files };
  }

  /** A three-way merge of `head` into `base` computed without a work tree (git merge-tree). */
  async mergeTree(base: string, head: string): Promise<MergeTreeResult> {
    const result = await this.git(['merge-tree', '--write-tree', '--name-only', '-z', base, head], { okExitCodes: [1] });
    // -z output: <tree>\0[<conflicted path>\0...]\0<messages>
    const parts = result.stdout.split('\0');
    const tree = parts[0]!;
    const conflicts: string[] = [];
    if (result.exitCode === 1) {
      for (const part of parts.slice(1)) {
        if (part === '') break;
        if (!conflicts.includes(part)) conflicts.push(part);
      }
    }
    return { tree, conflicts };
  }

  async commitTree(tree: string, parents: string[], message: string, identity: Identity): Promise<string> {
    const args = ['commit-tree', tree, ...parents.flatMap((p) => ['-p', p]), '-F', '-'];
    const { stdout } = await this.git(args, { input: message, identity });
    return stdout.trim();
  }

  /**
   * Moves `ref` to `next`; with `expectedOld`, atomically from that value (git's compare-and-swap):
   * false when the ref moved meanwhile (someone pushed).
   */
  async updateRef(ref: string, next: string, expectedOld?: string | null): Promise<boolean> {
    // null: the ref must not exist yet; undefined: move it whatever it points at.
    const old = expectedOld === undefined ? [] : [expectedOld ?? '0'.repeat(40)];
    const result = await this.git(['update-ref', '-m', 'github-fake', ref, next, ...old], { okExitCodes: [128] });
    return result.exitCode === 0;
  }

  async deleteRef(ref: string, expectedOld: string): Promise<boolean> {
    const result = await this.git(['update-ref', '-d', ref, expectedOld], { okExitCodes: [128] });
    return result.exitCode === 0;
  }

  /**
   * Replays the commits of `head` that `base` lacks onto `base`, one by one (what GitHub's "rebase
   * and merge" does), keeping each commit's author. Returns null when a commit does not apply. Uses a
   * temporary work tree: git 2.39's merge-tree cannot take an explicit merge base.
   */
  async rebase(base: string, head: string, committer: Identity): Promise<string | null> {
    const commits = (await this.git(['rev-list', '--reverse', '--no-merges', `${base}..${head}`])).stdout.split('\n').filter(Boolean);
    if (commits.length === 0) return base;
    const workTree = mkdtempSync(path.join(tmpdir(), 'github-fake-rebase-'));
    try {
      await this.git(['worktree', 'add', '--detach', '--force', '--', workTree, base]);
      const cherryPick = await runGit(['cherry-pick', '--allow-empty', '--keep-redundant-commits', ...commits], {
        cwd: workTree,
        timeoutMs: TIMEOUT_MS,
        okExitCodes: [1],
        identity: committer,
      });
      if (cherryPick.exitCode !== 0) return null;
      return (await runGit(['rev-parse', 'HEAD'], { cwd: workTree, timeoutMs: TIMEOUT_MS })).stdout.trim();
    } finally {
      await this.git(['worktree', 'remove', '--force', '--', workTree], { okExitCodes: [128] }).catch(() => undefined);
      rmSync(workTree, { recursive: true, force: true });
      await this.git(['worktree', 'prune']).catch(() => undefined);
    }
  }

  /**
   * Writes `files` (path → content, null deletes) on top of `parent` (or as a root commit) and returns
   * the new commit; the branch is not moved.
   */
  async commitFiles(parent: string | null, files: Record<string, string | null>, message: string, identity: Identity): Promise<string> {
    // Without an index (runGit keeps GIT_INDEX_FILE out, rightly): blobs with hash-object, trees with mktree.
    const treeEntries = new Map<string, string>();
    if (parent) {
      const { stdout } = await this.git(['ls-tree', '-r', '-z', '--full-tree', parent]);
      for (const entry of stdout.split('\0').filter(Boolean)) {
        const tab = entry.indexOf('\t');
        treeEntries.set(entry.slice(tab + 1), entry.slice(0, tab));
      }
    }
    for (const [file, content] of Object.entries(files)) {
      if (content === null) {
        treeEntries.delete(file);
        continue;
      }
      const blob = (await this.git(['hash-object', '-w', '--stdin'], { input: content })).stdout.trim();
      treeEntries.set(file, `100644 blob ${blob}`);
    }
    const tree = await this.mkTreeRecursive(treeEntries);
    return this.commitTree(tree, parent ? [parent] : [], message, identity);
  }

  /** Builds nested trees with `git mktree` from flat `path → "<mode> <type> <oid>"` entries. */
  private async mkTreeRecursive(entries: Map<string, string>): Promise<string> {
    const children = new Map<string, Map<string, string>>();
    const lines: string[] = [];
    for (const [file, meta] of entries) {
      const slash = file.indexOf('/');
      if (slash === -1) {
        lines.push(`${meta}\t${file}`);
        continue;
      }
      const dir = file.slice(0, slash);
      if (!children.has(dir)) children.set(dir, new Map());
      children.get(dir)!.set(file.slice(slash + 1), meta);
    }
    for (const [dir, sub] of children) lines.push(`040000 tree ${await this.mkTreeRecursive(sub)}\t${dir}`);
    const { stdout } = await this.git(['mktree', '-z'], { input: lines.map((l) => `${l}\0`).join('') });
    return stdout.trim();
  }
}
