import { mkdtemp, mkdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { git } from '../git.js';

const identity = ['-c', 'user.name=Gantry Test', '-c', 'user.email=test@gantry.invalid', '-c', 'commit.gpgsign=false'];

/** A real local bare origin with `main`, and a clone to work in: the shape a runner's worktree has. */
export class GitFixture {
  private constructor(
    readonly root: string,
    readonly origin: string,
    readonly clone: string,
  ) {}

  static async create(): Promise<GitFixture> {
    const root = await mkdtemp(join(tmpdir(), 'gantry-runner-git-'));
    const origin = join(root, 'origin.git');
    const clone = join(root, 'clone');
    await git(root, ['init', '-q', '--bare', '--initial-branch=main', origin]);
    await git(root, ['clone', '-q', origin, clone]);
    const fixture = new GitFixture(root, origin, clone);
    await fixture.commit({ 'README.md': '# product\n' }, 'initial commit');
    await git(clone, ['push', '-q', 'origin', 'HEAD:refs/heads/main']);
    await git(clone, ['fetch', '-q', 'origin']);
    return fixture;
  }

  /** Writes (or with `null` deletes) files in `dir` and commits them; returns the new HEAD. */
  async commit(files: Record<string, string | null>, message: string, dir = this.clone): Promise<string> {
    for (const [path, content] of Object.entries(files)) {
      const file = join(dir, path);
      if (content === null) {
        await git(dir, ['rm', '-q', '--', path]);
      } else {
        await mkdir(dirname(file), { recursive: true });
        await writeFile(file, content);
        await git(dir, ['add', '--', path]);
      }
    }
    await git(dir, [...identity, 'commit', '-q', '--allow-empty', '-m', message]);
    return this.head(dir);
  }

  async head(dir = this.clone): Promise<string> {
    return (await git(dir, ['rev-parse', 'HEAD'])).stdout.trim();
  }

  async run(args: string[], dir = this.clone): Promise<string> {
    return (await git(dir, [...identity, ...args])).stdout.trim();
  }

  /** Pushes `ref` to the origin's main and refreshes `origin/main`, as a merged PR would. */
  async pushToMain(ref: string, dir = this.clone): Promise<void> {
    await git(dir, ['push', '-q', 'origin', `${ref}:refs/heads/main`]);
    await git(dir, ['fetch', '-q', 'origin']);
  }

  async remove(): Promise<void> {
    await rm(this.root, { recursive: true, force: true });
  }
}
