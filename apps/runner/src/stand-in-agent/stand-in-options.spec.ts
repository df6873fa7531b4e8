import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { agentEnvironment, runAgent } from '../infrastructure/agent/agent-process.js';
import { createGitFixture, type GitFixture } from '@gantry/git/testing';
import { verifyWorktree } from '../infrastructure/verify/verify-worktree.js';
import { StandInJob } from './testing/stand-in-job.js';

describe('stand-in options the end-to-end tests rely on', () => {
  let repo: GitFixture;
  let job: StandInJob | undefined;
  let scratch: string;

  beforeEach(async () => {
    repo = createGitFixture();
    scratch = await mkdtemp(join(tmpdir(), 'stand-in-options-'));
  });
  afterEach(async () => {
    await job?.dispose();
    job = undefined;
    await repo.cleanup();
    await rm(scratch, { recursive: true, force: true });
  });

  it('recordArgvTo: appends the exact argv it was started with, its pid and its directory, each tool call before it is made, and when it exited', async () => {
    const record = join(scratch, 'argv.jsonl');
    job = await StandInJob.prepare({ worktreeDir: repo.seed, standIn: { behaviour: 'nothing', recordArgvTo: record } });
    const result = await runAgent({ command: job.command, cwd: repo.seed, timeoutMs: 20_000 });
    expect(result.exitCode).toBe(0);
    const lines = (await readFile(record, 'utf8')).trim().split('\n').map((l) => JSON.parse(l));
    expect(lines).toHaveLength(5);
    expect(lines[0]).toMatchObject({ argv: job.command.args, pid: result.pid, cwd: repo.seed });
    expect(lines.slice(1, 4)).toEqual(['log_implementation', 'log_test_result', 'update_job_status'].map((calling) => ({ calling, pid: result.pid, at: expect.any(String) })));
    expect(lines[4]).toMatchObject({ exit: 0, pid: result.pid });
    expect(Date.parse(lines[4].at)).toBeGreaterThanOrEqual(Date.parse(lines[0].at));
  });

  it('waitForFile: no tool call before the file exists, then the work as scripted', async () => {
    const record = join(scratch, 'gated.jsonl');
    const gate = join(scratch, 'gate');
    job = await StandInJob.prepare({ worktreeDir: repo.seed, standIn: { behaviour: 'nothing', recordArgvTo: record, waitForFile: gate } });
    const run = runAgent({ command: job.command, cwd: repo.seed, timeoutMs: 20_000 });
    const started = async () => (await readFile(record, 'utf8').catch(() => '')).trim() !== '';
    while (!(await started())) await new Promise((r) => setTimeout(r, 20));
    // started and waiting at the gate: nothing reported
    await new Promise((r) => setTimeout(r, 300));
    expect(job.reporter.methods()).toEqual([]);
    await writeFile(gate, '');
    expect((await run).exitCode).toBe(0);
    expect(job.reporter.methods()).toEqual(['logImplementation', 'logTestResult', 'updateJobStatus']);
  });

  it('resetTo: moves the branch to another revision before the work, which verify calls DIVERGENT', async () => {
    await repo.git(repo.seed, 'checkout', '-q', '-b', 'feat/other');
    await repo.commit({ 'other.ts': 'other\n' }, 'other work');
    await repo.git(repo.seed, 'push', '-q', 'origin', 'feat/other');
    await repo.git(repo.seed, 'checkout', '-q', 'main');
    await repo.commit({ 'main.ts': 'main moved on\n' }, 'main moves');
    await repo.pushToMain('HEAD');
    await repo.git(repo.seed, 'checkout', '-q', '-b', 'feat/job');
    const base = await repo.head();
    job = await StandInJob.prepare({ worktreeDir: repo.seed, standIn: { behaviour: 'nothing', resetTo: 'origin/feat/other' } });
    const result = await runAgent({ command: job.command, cwd: repo.seed, timeoutMs: 20_000 });
    expect(result.exitCode).toBe(0);
    const report = await verifyWorktree({ worktreeDir: repo.seed, baseSha: base, target: 'origin/main' });
    expect(report.result).toBe('DIVERGENT');
    expect(report.diffIdenticalToMergedBranch).toBe(false);
  });

  it('byAttempt: attempt 1 commits without reporting and crashes, attempt 2 of the same job does its own script', async () => {
    const standIn = {
      behaviour: 'commit',
      files: { 'second.ts': 'second\n' },
      byAttempt: { '1': { behaviour: 'crash_after_commit', files: { 'first.ts': 'first\n' }, commitMessage: 'attempt 1, never reported', exitCode: 4 } },
    };
    job = await StandInJob.prepare({ worktreeDir: repo.seed, standIn, attempt: 1 });
    const first = await runAgent({ command: job.command, cwd: repo.seed, timeoutMs: 20_000 });
    expect(first.exitCode).toBe(4);
    expect(job.reporter.methods()).toEqual([]);
    expect(await repo.git(repo.seed, 'log', '-1', '--format=%s')).toBe('attempt 1, never reported');
    await job.dispose();

    job = await StandInJob.prepare({ worktreeDir: repo.seed, standIn, attempt: 2 });
    const second = await runAgent({ command: job.command, cwd: repo.seed, timeoutMs: 20_000 });
    expect(second.exitCode).toBe(0);
    expect(job.reporter.methods()).toEqual(['logImplementation', 'logCommit', 'logTestResult', 'updateJobStatus']);
    expect(await repo.git(repo.seed, 'log', '-1', '--format=%s')).toBe('stand-in: commit');
  });

  it('an agent environment with ANTHROPIC_API_KEY=expired fails like an expired login whatever the payload says', async () => {
    job = await StandInJob.prepare({ worktreeDir: repo.seed, standIn: { behaviour: 'commit', files: { 'a.ts': 'a\n' } } });
    const result = await runAgent({ command: job.command, cwd: repo.seed, timeoutMs: 20_000, env: agentEnvironment({ ANTHROPIC_API_KEY: 'expired' }) });
    expect(result).toMatchObject({ exitCode: 3, tokenExpired: true });
    expect(job.reporter.methods()).toEqual([]);
    expect(await repo.git(repo.seed, 'log', '--oneline')).not.toContain('stand-in');
  });
});
