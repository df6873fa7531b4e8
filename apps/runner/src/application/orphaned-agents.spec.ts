import { spawn } from 'node:child_process';
import { access, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { reapOrphanedAgents, recordAgentPid } from './orphaned-agents.js';

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function until(check: () => boolean, ms = 5000): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (check()) return true;
    await new Promise((r) => setTimeout(r, 20));
  }
  return check();
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

  it('stops the agent of each scratch directory, with what it started, and removes the directories', async () => {
    const scratch = join(root, 'job-1-1');
    await mkdir(scratch);
    const pid = agent(['--mcp-config', join(scratch, 'mcp-config.json')]);
    await recordAgentPid(scratch, pid);
    const reaped = await reapOrphanedAgents(root);
    expect(reaped).toEqual([{ scratch, pid, killed: true }]);
    expect(await until(() => !alive(pid))).toBe(true);
    await expect(access(scratch)).rejects.toThrow();
  });

  it('never kills a process that reused the pid (its command line does not name the scratch directory)', async () => {
    const scratch = join(root, 'job-2-1');
    await mkdir(scratch);
    const stranger = agent(['--mcp-config', '/somewhere/else/mcp-config.json']);
    await recordAgentPid(scratch, stranger);
    expect(await reapOrphanedAgents(root)).toEqual([{ scratch, pid: stranger, killed: false }]);
    await new Promise((r) => setTimeout(r, 100));
    expect(alive(stranger)).toBe(true);
  });

  it('removes scratch directories without an agent, and finds nothing when the directory does not exist', async () => {
    const scratch = join(root, 'job-3-1');
    await mkdir(scratch);
    await writeFile(join(scratch, 'payload.json'), '{}');
    expect(await reapOrphanedAgents(root)).toEqual([]);
    await expect(access(scratch)).rejects.toThrow();
    expect(await reapOrphanedAgents(join(root, 'missing'))).toEqual([]);
  });
});
