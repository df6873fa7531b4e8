import { execFile } from 'node:child_process';
import { chmod, mkdir, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { StandInCommit } from './stand-in-script.js';

const identity = ['-c', 'user.name=Gantry stand-in agent', '-c', 'user.email=stand-in@gantry.invalid', '-c', 'commit.gpgsign=false'];

/** The stand-in's own git work in its worktree: real files, real commits, never a push. */
export class StandInGit {
  constructor(private readonly dir: string) {}

  async commit(commit: StandInCommit): Promise<string> {
    for (const [path, content] of Object.entries(commit.files)) {
      await mkdir(dirname(join(this.dir, path)), { recursive: true });
      await writeFile(join(this.dir, path), content);
    }
    // One `git add` and one `git rm` for all the files, as an agent would.
    if (Object.keys(commit.files).length > 0) await this.git(['add', '--', ...Object.keys(commit.files)]);
    if (commit.delete.length > 0) await this.git(['rm', '-q', '--', ...commit.delete]);
    await this.git([...identity, 'commit', '-q', '-m', commit.message]);
    return (await this.git(['rev-parse', 'HEAD'])).trim();
  }

  /** Moves the branch (and the worktree) to `revision`, as an agent that started over from another branch would. */
  async resetTo(revision: string): Promise<void> {
    await this.git(['reset', '-q', '--hard', revision, '--']);
  }

  /**
   * What a hostile agent can do to the repository it works in: write its config (the shared
   * clone's) and files under its git directory — hooks, attributes — that git would act on.
   */
  async tamper(config: Record<string, string>, files: Record<string, string>): Promise<void> {
    for (const [key, value] of Object.entries(config)) await this.git(['config', '--', key, value]);
    const common = (await this.git(['rev-parse', '--path-format=absolute', '--git-common-dir'])).trim();
    for (const [path, content] of Object.entries(files)) {
      await mkdir(dirname(join(common, path)), { recursive: true });
      await writeFile(join(common, path), content);
      if (path.startsWith('hooks/')) await chmod(join(common, path), 0o755);
    }
  }

  private git(args: string[]): Promise<string> {
    return new Promise((resolve, reject) => {
      execFile('git', ['-c', 'protocol.ext.allow=never', ...args], { cwd: this.dir, encoding: 'utf8' }, (error, stdout, stderr) =>
        error ? reject(new Error(`git ${args.find((a) => !a.startsWith('-'))} failed: ${stderr.trim() || error.message}`)) : resolve(stdout),
      );
    });
  }
}
