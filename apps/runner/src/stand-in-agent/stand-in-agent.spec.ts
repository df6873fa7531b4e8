import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runAgent, type AgentRunResult } from '../infrastructure/agent/agent-process.js';
import { BearerSecret } from '../infrastructure/mcp/bearer-secret.js';
import { writeMcpConfigFile } from '../infrastructure/mcp/mcp-config-file.js';
import { createGitFixture, type GitFixture } from '@gantry/git/testing';
import { eventually } from '@gantry/testing';
import { verifyWorktree } from '../infrastructure/verify/verify-worktree.js';
import { ensureStandInBuilt } from './testing/stand-in-build.js';
import { StandInJob } from './testing/stand-in-job.js';

function runStandIn(bin: string, args: string[], cwd: string): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(bin, args, { cwd }, (error, stdout, stderr) => resolve({ code: error ? Number(error.code) : 0, stdout, stderr }));
  });
}

describe('the stand-in agent as a separate process', () => {
  let repo: GitFixture;
  let base: string;
  let job: StandInJob | undefined;

  beforeEach(async () => {
    repo = createGitFixture();
    await repo.commit({ 'docs/old.md': 'obsolete\n', 'src/app.ts': 'export const app = 1;\n' }, 'main: app');
    await repo.pushToMain('HEAD');
    await repo.git(repo.seed, 'checkout', '-q', '-b', 'feat/story-1');
    base = await repo.head();
  });
  afterEach(async () => {
    await job?.dispose();
    job = undefined;
    await repo.cleanup();
  });

  async function run(standIn: Record<string, unknown>): Promise<AgentRunResult> {
    job = await StandInJob.prepare({ worktreeDir: repo.seed, standIn });
    return runAgent({ command: job.command, cwd: repo.seed, timeoutMs: 20_000 });
  }
  const verify = () => verifyWorktree({ worktreeDir: repo.seed, baseSha: base, target: 'origin/main' });

  it('commit: one real commit per planned commit, each logged, then PASSED and DONE → ALIGNED', async () => {
    const result = await run({
      behaviour: 'commit',
      commits: [
        { files: { 'src/a.ts': 'export const a = 1;\n' }, message: 'feat: a' },
        { files: { 'src/b.ts': 'export const b = 1;\n' }, delete: ['docs/old.md'], message: 'feat: b' },
      ],
    });
    expect(result.exitCode).toBe(0);
    const report = await verify();
    expect(report.result).toBe('ALIGNED');
    expect(report.newCommits).toHaveLength(2);
    expect(job!.reporter.methods()).toEqual(['logImplementation', 'logCommit', 'logCommit', 'logTestResult', 'updateJobStatus']);
    expect(job!.reporter.calls.filter((c) => c.method === 'logCommit').map((c) => (c.input as { hash: string }).hash)).toEqual(report.newCommits);
    expect(job!.reporter.calls.at(-2)!.input).toEqual({ status: 'PASSED', summary: '3 of 3 checks passed' });
    expect(job!.server.progress()).toMatchObject({ implementationLogged: true, testResult: 'PASSED', lastStatus: 'DONE' });
  });

  it('commit with reportStatus PARTIAL reports PARTIAL, which verify turns into PARTIAL', async () => {
    await run({ behaviour: 'commit', files: { 'src/half.ts': 'half\n' }, reportStatus: 'PARTIAL' });
    const report = await verifyWorktree({
      worktreeDir: repo.seed,
      baseSha: base,
      target: 'origin/main',
      partialCompletion: job!.server.progress().lastStatus === 'PARTIAL',
    });
    expect(report.result).toBe('PARTIAL');
  });

  it('nothing: logs start and a passing test run, commits nothing → EMPTY', async () => {
    const result = await run({ behaviour: 'nothing' });
    expect(result.exitCode).toBe(0);
    expect(result.stdoutTail).toBe('Nothing to change.\n');
    expect(job!.reporter.methods()).toEqual(['logImplementation', 'logTestResult', 'updateJobStatus']);
    expect((await verify()).result).toBe('EMPTY');
  });

  it('delete_only: a commit that only deletes → ALIGNED, not EMPTY', async () => {
    await run({ behaviour: 'delete_only', delete: ['docs/old.md'] });
    const report = await verify();
    expect(report.result).toBe('ALIGNED');
    expect(report.netDiff).toEqual([{ status: 'D', path: 'docs/old.md' }]);
  });

  it('failing_tests: logs a FAILED test run and reports FAILED with the concrete error', async () => {
    const result = await run({ behaviour: 'failing_tests', files: { 'src/broken.ts': 'broken\n' } });
    expect(result.exitCode).toBe(0);
    expect(job!.reporter.calls.filter((c) => c.method !== 'logImplementation' && c.method !== 'logCommit').map((c) => c.input)).toEqual([
      { status: 'FAILED', summary: '1 of 3 checks failed: expected 2, received 3' },
      { status: 'FAILED', summary: 'tests fail', error: 'test run failed: expected 2, received 3' },
    ]);
  });

  it('pauseUntilFile: waits at the gate, and exits (not an orphan waiting for ever) once the gate’s directory is gone', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'stand-in-gate-'));
    const running = run({ behaviour: 'commit', files: { 'src/gated.ts': 'gated\n' }, pauseUntilFile: join(dir, 'gate') });
    // In its pause: its first report made, nothing after it.
    await eventually(() => job?.reporter.methods().includes('logImplementation'), { what: 'the stand-in at its gate', timeoutMs: 15_000 });
    await rm(dir, { recursive: true, force: true });
    const result = await running;
    expect(result).toMatchObject({ exitCode: 1, timedOut: false });
    expect(result.stderrTail).toContain('will never open: its directory is gone');
    expect(job!.reporter.methods()).toEqual(['logImplementation']);
  });

  it('no_logs: commits without a single MCP call', async () => {
    const result = await run({ behaviour: 'no_logs', files: { 'src/silent.ts': 'silent\n' } });
    expect(result.exitCode).toBe(0);
    expect(job!.reporter.calls).toEqual([]);
    expect((await verify()).result).toBe('ALIGNED');
  });

  it('refuses an unknown flag like the real CLI, before doing anything', async () => {
    const bin = await ensureStandInBuilt();
    const { code, stderr } = await runStandIn(bin, ['-p', 'x', '--max-turns', '40'], repo.seed);
    expect(code).toBe(1);
    expect(stderr).toBe("error: unknown option '--max-turns'\n");
  });

  it('accepts every flag of the runner’s command line for every job kind', async () => {
    for (const kind of ['IDEA_GRILL', 'IDEA_MAKE_PLAN', 'PLAN_CHAT', 'TASK_IMPLEMENTATION', 'SPRINT_IMPLEMENTATION'] as const) {
      const kindJob = await StandInJob.prepare({ worktreeDir: repo.seed, standIn: { behaviour: 'nothing' }, kind });
      try {
        const result = await runAgent({ command: kindJob.command, cwd: repo.seed, timeoutMs: 20_000 });
        expect({ kind, exitCode: result.exitCode, stderr: result.stderrTail }).toEqual({ kind, exitCode: 0, stderr: '' });
      } finally {
        await kindJob.dispose();
      }
    }
  });

  it('fails without a standIn section in the payload, and says why', async () => {
    const result = await run({ behaviour: 'commit' }).catch(() => null);
    expect(result?.exitCode).toBe(1);
    expect(result?.stderrTail).toContain('behaviour commit needs "files", "delete" or "commits"');
    const bin = await ensureStandInBuilt();
    const scratch = await mkdtemp(join(tmpdir(), 'gantry-stand-in-'));
    try {
      await writeFile(join(scratch, 'payload.json'), JSON.stringify({ taskId: 'T-1' }));
      const { code, stderr } = await runStandIn(bin, ['-p', `Read ${join(scratch, 'payload.json')}`, '--add-dir', repo.seed], repo.seed);
      expect(code).toBe(1);
      expect(stderr).toContain('the payload has no "standIn" section');
    } finally {
      await rm(scratch, { recursive: true, force: true });
    }
  });

  it('cannot report with a wrong bearer secret: the tool server refuses it and records nothing', async () => {
    job = await StandInJob.prepare({ worktreeDir: repo.seed, standIn: { behaviour: 'nothing' } });
    const mcpConfigPath = job.command.args[job.command.args.indexOf('--mcp-config') + 1]!;
    await writeMcpConfigFile(mcpConfigPath, { url: job.server.url, secret: BearerSecret.generate() });
    const result = await runAgent({ command: job.command, cwd: repo.seed, timeoutMs: 20_000 });
    expect(result.exitCode).toBe(1);
    expect(result.stderrTail).toMatch(/401|Unauthorized/);
    expect(job.reporter.calls).toEqual([]);
  });
});
