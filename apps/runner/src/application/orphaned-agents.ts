import { readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

export const AGENT_PID_FILE = 'agent.pid';

export interface ReapedAgent {
  scratch: string;
  pid: number;
  killed: boolean;
}

/** Records the agent's pid in its job's scratch directory, so a restarted runner can find it. */
export async function recordAgentPid(scratch: string, pid: number): Promise<void> {
  await writeFile(join(scratch, AGENT_PID_FILE), `${pid}\n`, { mode: 0o600 });
}

/**
 * A runner killed with SIGKILL leaves its agents running (they have their own process groups) and
 * its scratch directories behind. Started again under the same runner id, it stops those agents —
 * only a process whose command line still names that job's scratch directory, so a reused pid is
 * never touched — and removes the directories. The claims themselves expire at the job service.
 */
export async function reapOrphanedAgents(scratchDir: string): Promise<ReapedAgent[]> {
  const entries = await readdir(scratchDir, { withFileTypes: true }).catch((error: NodeJS.ErrnoException) => {
    if (error.code === 'ENOENT') return [];
    throw error;
  });
  const reaped: ReapedAgent[] = [];
  for (const entry of entries) {
    if (!entry.isDirectory()) continue;
    const scratch = join(scratchDir, entry.name);
    const pid = Number((await readFile(join(scratch, AGENT_PID_FILE), 'utf8').catch(() => '')).trim());
    if (Number.isInteger(pid) && pid > 1) {
      const killed = (await commandLineNames(pid, scratch)) && killGroup(pid);
      reaped.push({ scratch, pid, killed });
    }
    await rm(scratch, { recursive: true, force: true });
  }
  return reaped;
}

async function commandLineNames(pid: number, scratch: string): Promise<boolean> {
  const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => null);
  return cmdline !== null && cmdline.split('\0').some((arg) => arg.startsWith(`${scratch}/`));
}

function killGroup(pid: number): boolean {
  try {
    process.kill(-pid, 'SIGKILL');
    return true;
  } catch {
    try {
      process.kill(pid, 'SIGKILL');
      return true;
    } catch {
      return false;
    }
  }
}
