import { execFile } from 'node:child_process';
import { chmod, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';

const identity = ['-c', 'user.name=Gantry E2E', '-c', 'user.email=e2e@gantry.invalid', '-c', 'commit.gpgsign=false'];

export function git(cwd: string, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile('git', ['-c', 'protocol.ext.allow=never', ...identity, ...args], { cwd, encoding: 'utf8' }, (error, stdout, stderr) =>
      error ? reject(new Error(`git ${args.join(' ')} failed: ${stderr || error.message}`)) : resolve(stdout.trim()),
    );
  });
}

export interface PushRecord {
  ref: string;
  oldSha: string;
  newSha: string;
}

/**
 * A real local bare origin with `main`, a scratch clone to prepare branches in (as people and merged
 * pull requests would), and a post-receive hook that records every push the origin accepts.
 */
export class OriginRepository {
  private constructor(
    readonly root: string,
    readonly url: string,
    private readonly clone: string,
    private readonly pushLog: string,
  ) {}

  static async create(root: string): Promise<OriginRepository> {
    await mkdir(root, { recursive: true });
    const url = join(root, 'origin.git');
    const clone = join(root, 'people');
    const pushLog = join(root, 'pushes.log');
    await git(root, ['init', '-q', '--bare', '--initial-branch=main', url]);
    const hook = join(url, 'hooks', 'post-receive');
    await writeFile(hook, `#!/bin/sh\nwhile read old new ref; do echo "$old $new $ref" >> "${pushLog}"; done\n`);
    await chmod(hook, 0o755);
    await git(root, ['clone', '-q', url, clone]);
    const origin = new OriginRepository(root, url, clone, pushLog);
    await origin.commit({ 'README.md': '# shop\n', 'src/app.ts': 'export const app = 1;\n', 'docs/old.md': 'obsolete\n' }, 'initial commit');
    await git(clone, ['push', '-q', 'origin', 'HEAD:refs/heads/main']);
    await writeFile(pushLog, '');
    return origin;
  }

  private async commit(files: Record<string, string | null>, message: string): Promise<string> {
    // One `git rm` and one `git add` for all the files: each git process costs milliseconds.
    const removed = Object.keys(files).filter((path) => files[path] === null);
    const written = Object.keys(files).filter((path) => files[path] !== null);
    if (removed.length > 0) await git(this.clone, ['rm', '-q', '--', ...removed]);
    for (const path of written) {
      await mkdir(dirname(join(this.clone, path)), { recursive: true });
      await writeFile(join(this.clone, path), files[path]!);
    }
    if (written.length > 0) await git(this.clone, ['add', '--', ...written]);
    await git(this.clone, ['commit', '-q', '--allow-empty', '-m', message]);
    return git(this.clone, ['rev-parse', 'HEAD']);
  }

  /** A commit on main, pushed: work that reached the target branch. Returns its SHA. */
  async commitToMain(files: Record<string, string | null>, message: string): Promise<string> {
    await git(this.clone, ['fetch', '-q', 'origin']);
    await git(this.clone, ['checkout', '-q', '-B', 'main', 'origin/main']);
    const sha = await this.commit(files, message);
    await git(this.clone, ['push', '-q', 'origin', 'HEAD:refs/heads/main']);
    return sha;
  }

  /** A branch off main with one commit, pushed. Returns its tip. */
  async branchWith(branch: string, files: Record<string, string | null>, message: string): Promise<string> {
    await git(this.clone, ['fetch', '-q', 'origin']);
    await git(this.clone, ['checkout', '-q', '-B', branch, 'origin/main']);
    const sha = await this.commit(files, message);
    await git(this.clone, ['push', '-q', 'origin', `HEAD:refs/heads/${branch}`]);
    return sha;
  }

  /** Squash-merges `branch` into main on the origin, as a merged pull request does. Returns main's new tip. */
  async squashMerge(branch: string): Promise<string> {
    await git(this.clone, ['fetch', '-q', 'origin']);
    await git(this.clone, ['checkout', '-q', '-B', 'main', 'origin/main']);
    await git(this.clone, ['merge', '-q', '--squash', `origin/${branch}`]);
    await git(this.clone, ['commit', '-q', '-m', `Merge ${branch} (squash)`]);
    await git(this.clone, ['push', '-q', 'origin', 'HEAD:refs/heads/main']);
    return git(this.clone, ['rev-parse', 'HEAD']);
  }

  async sha(ref: string): Promise<string | null> {
    const out = await git(this.url, ['for-each-ref', '--format=%(objectname)', `refs/heads/${ref}`]);
    return out === '' ? null : out;
  }

  /** Commits on the origin's `ref` that `since` does not have, newest first. */
  async log(ref: string, since = 'main'): Promise<string[]> {
    const out = await git(this.url, ['log', '--format=%H %s', `${since}..refs/heads/${ref}`, '--']);
    return out === '' ? [] : out.split('\n');
  }

  async fileAt(ref: string, path: string): Promise<string | null> {
    return git(this.url, ['show', `refs/heads/${ref}:${path}`]).catch(() => null);
  }

  /** Every push the origin accepted, in order. */
  async pushes(): Promise<PushRecord[]> {
    const text = await readFile(this.pushLog, 'utf8');
    return text
      .split('\n')
      .filter((l) => l.trim() !== '')
      .map((l) => {
        const [oldSha, newSha, ref] = l.split(' ');
        return { oldSha: oldSha!, newSha: newSha!, ref: ref! };
      });
  }

  /** Makes the origin refuse pushes to branches matching the pattern (a protected branch). */
  async refusePushesTo(branchPrefix: string): Promise<void> {
    const hook = join(this.url, 'hooks', 'pre-receive');
    await writeFile(
      hook,
      `#!/bin/sh\nwhile read old new ref; do case "$ref" in refs/heads/${branchPrefix}*) echo "branch is protected: pushes to ${branchPrefix}* are refused" >&2; exit 1;; esac; done\n`,
    );
    await chmod(hook, 0o755);
  }

  async remove(): Promise<void> {
    await rm(this.root, { recursive: true, force: true });
  }
}
