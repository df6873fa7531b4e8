import { execFile } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
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
      await this.git(['add', '--', path]);
    }
    for (const path of commit.delete) await this.git(['rm', '-q', '--', path]);
    await this.git([...identity, 'commit', '-q', '-m', commit.message]);
    return (await this.git(['rev-parse', 'HEAD'])).trim();
  }

  /** Moves the branch (and the worktree) to `revision`, as an agent that started over from another branch would. */
  async resetTo(revision: string): Promise<void> {
    await this.git(['reset', '-q', '--hard', revision, '--']);
  }

  private git(args: string[]): Promise<string> {
    return new Promise((resolve, reject) => {
      execFile('git', ['-c', 'protocol.ext.allow=never', ...args], { cwd: this.dir, encoding: 'utf8' }, (error, stdout, stderr) =>
        error ? reject(new Error(`git ${args.find((a) => !a.startsWith('-'))} failed: ${stderr.trim() || error.message}`)) : resolve(stdout),
      );
    });
  }
}
