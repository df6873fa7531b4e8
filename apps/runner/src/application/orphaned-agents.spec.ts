import { spawn } from 'node:child_process';
import { access, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ErrorCode, GantryError } from '@gantry/contracts';
import { freezeProcessGroup } from '@gantry/testing';
import { processGroupRunning } from '../infrastructure/agent/process-group.js';
import { OrphanedAgentsLeft, recordAgentPid, recordRun, removeRun, RUN_RECORD_FILE, stopOrphanedAgents, type RecordedPush } from './orphaned-agents.js';

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('agents left behind by a runner killed with SIGKILL', () => {
  let root: string;
  const started: number[] = [];

  beforeEach(async () => {
    root = await mkdtemp(join(tmpdir(), 'gantry-orphans-'));
  });
  afterEach(async () => {
    for (const pid of started.splice(0)) {
      try {
        process.kill(-pid, 'SIGKILL');
      } catch {
        // gone
      }
    }
    await rm(root, { recursive: true, force: true });
  });

  /** An "agent" in its own process group whose argv names its scratch directory, as the real command line does. */
  function agent(argv: string[]): number {
    const child = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)', '--', ...argv], { detached: true, stdio: 'ignore' });
    child.unref();
    started.push(child.pid!);
    return child.pid!;
  }

  it('stops the agent of each scratch directory, with what it started, and hands back the claim the directory belongs to', async () => {
    const scratch = join(root, 'job-1-1');
    await mkdir(scratch);
    const pid = agent(['--mcp-config', join(scratch, 'mcp-config.json')]);
    await recordAgentPid(scratch, pid);
    const run = { jobId: 'job-00000000-0000-4000-8000-000000000001', leaseToken: 3, worktreeLease: { leaseId: '0b7a4c3e-2f7d-4b8e-9a51-6c2d1e0f9a11', token: 2 } };
    await recordRun(scratch, run);
    const found = await stopOrphanedAgents(root);
    expect(found).toEqual([{ scratch, run, pid, killed: true, groupGone: true }]);
    // the group is gone once the call returns: nothing of the agent can write any more (a zombie cannot)
    expect(processGroupRunning(pid)).toBe(false);
    await removeRun(scratch);
    await expect(access(scratch)).rejects.toThrow();
  });

  it('waits for an agent that outlives its SIGKILL (frozen, as in uninterruptible sleep) only until the stop\'s deadline, then names what it left and whose claim it is', async () => {
    const scratch = join(root, 'job-6-1');
    await mkdir(scratch);
    const pid = agent(['--mcp-config', join(scratch, 'mcp-config.json')]);
    await recordAgentPid(scratch, pid);
    const run = { jobId: 'job-00000000-0000-4000-8000-000000000006', leaseToken: 4, worktreeLease: null };
    await recordRun(scratch, run);
    // Looked at after it (in the order of their names), so not yet when the deadline comes: named too.
    const next = join(root, 'job-7-1');
    await mkdir(next);
    const nextRun = { jobId: 'job-00000000-0000-4000-8000-000000000007', leaseToken: 1, worktreeLease: null };
    await recordRun(next, nextRun);
    const frozen = await freezeProcessGroup(pid);
    try {
      const deadline = new AbortController();
      setTimeout(() => deadline.abort(), 500);
      const began = Date.now();
      // A kill grace far beyond the deadline: the wait must end at the deadline, not at its grace.
      const error = await stopOrphanedAgents(root, 20_000, deadline.signal).then(
        () => null,
        (e: unknown) => e,
      );
      expect(Date.now() - began).toBeLessThan(5_000);
      expect(error).toBeInstanceOf(OrphanedAgentsLeft);
      expect(error).toMatchObject({ code: ErrorCode.TIMEOUT, message: expect.stringMatching(/given up at its deadline/) });
      expect((error as OrphanedAgentsLeft).left).toEqual([
        { scratch, pid, jobId: run.jobId, leaseToken: run.leaseToken },
        { scratch: next, pid: null, jobId: nextRun.jobId, leaseToken: nextRun.leaseToken },
      ]);
      // Still there (frozen) when the call gave up: it was not taken for gone.
      expect(processGroupRunning(pid)).toBe(true);
    } finally {
      await frozen.thaw();
    }
  }, 60_000);

  it('hands back an agent that outlives its SIGKILL for the whole kill grace (frozen) while the runner is not stopping, saying that its group is not gone', async () => {
    const scratch = join(root, 'job-8-1');
    await mkdir(scratch);
    const pid = agent(['--mcp-config', join(scratch, 'mcp-config.json')]);
    await recordAgentPid(scratch, pid);
    const run = { jobId: 'job-00000000-0000-4000-8000-000000000008', leaseToken: 2, attempt: 1, kind: 'TASK_IMPLEMENTATION', worktreeLease: null };
    await recordRun(scratch, run);
    const frozen = await freezeProcessGroup(pid);
    try {
      const began = Date.now();
      expect(await stopOrphanedAgents(root, 300)).toEqual([{ scratch, run, pid, killed: true, groupGone: false }]);
      expect(Date.now() - began).toBeLessThan(5_000);
      expect(processGroupRunning(pid)).toBe(true);
    } finally {
      await frozen.thaw();
    }
  }, 60_000);

  it("keeps credentials out of the run record: a push to a URL carrying them is refused and the record on disk stays as it was", async () => {
    const scratch = join(root, 'job-5-1');
    await mkdir(scratch);
    const run = { jobId: 'job-00000000-0000-4000-8000-000000000005', leaseToken: 1, worktreeLease: { leaseId: '0b7a4c3e-2f7d-4b8e-9a51-6c2d1e0f9a15', token: 1 } };
    await recordRun(scratch, run);
    const push = { worktreeDir: '/w/job-5', branch: 'gantry/p/task-5', headSha: 'a'.repeat(40), facts: {} as RecordedPush['facts'] };
    for (const repositoryUrl of [
      'https://bot:ghp_runRecordSpecToken000000001@git.example.com/app.git',
      'https://ghp_runRecordSpecToken000000001@git.example.com/app.git',
      'ssh://git:runRecordSpecPassword1@git.example.com/app.git',
    ]) {
      const refused = await recordRun(scratch, { ...run, push: { ...push, repositoryUrl } }).then(
        () => null,
        (error: unknown) => error as GantryError,
      );
      expect(refused).toBeInstanceOf(GantryError);
      expect(refused!.code).toBe(ErrorCode.INVALID_COMMAND);
      expect(refused!.message).not.toMatch(/runRecordSpec/);
    }
    const onDisk = await readFile(join(scratch, RUN_RECORD_FILE), 'utf8');
    expect(onDisk).not.toMatch(/runRecordSpec/);
    expect(JSON.parse(onDisk)).toEqual(run);
    // a URL without credentials is recorded as it is, and read back by the next start
    const clean = { ...run, push: { ...push, repositoryUrl: 'https://git.example.com/app.git' } };
    await recordRun(scratch, clean);
    expect(await stopOrphanedAgents(root)).toEqual([{ scratch, run: clean, pid: null, killed: false, groupGone: true }]);
  });

  it('stops an agent whose pid was never recorded (the runner died right after spawning it), found by its command line', async () => {
    const scratch = join(root, 'job-4-1');
    await mkdir(scratch);
    const pid = agent(['--mcp-config', join(scratch, 'mcp-config.json')]);
    const stranger = agent(['--mcp-config', join(root, 'job-4-10', 'mcp-config.json')]);
    expect(await stopOrphanedAgents(root)).toEqual([{ scratch, run: null, pid, killed: true, groupGone: true }]);
    expect(processGroupRunning(pid)).toBe(false);
    // another directory's name that merely starts the same is not this one's
    expect(alive(stranger)).toBe(true);
  });

  it('never kills a process that reused the pid (its command line does not name the scratch directory)', async () => {
    const scratch = join(root, 'job-2-1');
    await mkdir(scratch);
    const stranger = agent(['--mcp-config', '/somewhere/else/mcp-config.json']);
    await recordAgentPid(scratch, stranger);
    expect(await stopOrphanedAgents(root)).toEqual([{ scratch, run: null, pid: stranger, killed: false, groupGone: true }]);
    await new Promise((r) => setTimeout(r, 100));
    expect(alive(stranger)).toBe(true);
  });

  it('hands back scratch directories without an agent too, and finds nothing when the directory does not exist', async () => {
    const scratch = join(root, 'job-3-1');
    await mkdir(scratch);
    await writeFile(join(scratch, 'payload.json'), '{}');
    expect(await stopOrphanedAgents(root)).toEqual([{ scratch, run: null, pid: null, killed: false, groupGone: true }]);
    expect(await stopOrphanedAgents(join(root, 'missing'))).toEqual([]);
  });
});
