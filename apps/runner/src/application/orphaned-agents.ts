import { readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { processGroupRunning } from '../infrastructure/agent/process-group.js';

export const AGENT_PID_FILE = 'agent.pid';
/** What a run's scratch directory says about the claim it belongs to (written at the claim, completed at the worktree lease). */
export const RUN_RECORD_FILE = 'run.json';

export interface RunRecord {
  jobId: string;
  leaseToken: number;
  worktreeLease: { leaseId: string; token: number } | null;
}

export interface OrphanedRun {
  scratch: string;
  /** Null when the directory holds no readable run record. */
  run: RunRecord | null;
  pid: number | null;
  /** The agent was found alive and stopped. */
  killed: boolean;
}

/** Records the agent's pid in its job's scratch directory, so a restarted runner can find it. */
export async function recordAgentPid(scratch: string, pid: number): Promise<void> {
  await writeFile(join(scratch, AGENT_PID_FILE), `${pid}\n`, { mode: 0o600 });
}

export async function recordRun(scratch: string, run: RunRecord): Promise<void> {
  await writeFile(join(scratch, RUN_RECORD_FILE), JSON.stringify(run), { mode: 0o600 });
}

/**
 * A runner killed with SIGKILL leaves its agents running (they have their own process groups) and
 * its scratch directories behind. Started again under the same runner id, it stops those agents —
 * only a process whose command line still names that job's scratch directory, so a reused pid is
 * never touched — waits until their process groups are gone, and hands back what each directory
 * says about its claim. The caller settles the claims, then removes the directories (`removeRun`).
 */
export async function stopOrphanedAgents(scratchDir: string, graceMs = 5_000): Promise<OrphanedRun[]> {
  const entries = await readdir(scratchDir, { withFileTypes: true }).catch((error: NodeJS.ErrnoException) => {
    if (error.code === 'ENOENT') return [];
    throw error;
  });
  const found: OrphanedRun[] = [];
  for (const entry of entries) {
    if (!entry.isDirectory()) continue;
    const scratch = join(scratchDir, entry.name);
    const pidText = (await readFile(join(scratch, AGENT_PID_FILE), 'utf8').catch(() => '')).trim();
    const pid = Number.isInteger(Number(pidText)) && Number(pidText) > 1 ? Number(pidText) : null;
    const killed = pid !== null && (await commandLineNames(pid, scratch)) && (await killGroupAndWait(pid, graceMs));
    found.push({ scratch, run: await readRun(scratch), pid, killed });
  }
  return found;
}

export async function removeRun(scratch: string): Promise<void> {
  await rm(scratch, { recursive: true, force: true });
}

async function readRun(scratch: string): Promise<RunRecord | null> {
  try {
    const run = JSON.parse(await readFile(join(scratch, RUN_RECORD_FILE), 'utf8')) as RunRecord;
    return typeof run.jobId === 'string' && Number.isInteger(run.leaseToken) ? run : null;
  } catch {
    return null;
  }
}

async function commandLineNames(pid: number, scratch: string): Promise<boolean> {
  const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => null);
  return cmdline !== null && cmdline.split('\0').some((arg) => arg.startsWith(`${scratch}/`));
}

/** SIGKILL to the agent's process group (or the agent alone), then waits until nothing of it is left. */
async function killGroupAndWait(pid: number, graceMs: number): Promise<boolean> {
  let target = -pid;
  try {
    process.kill(target, 'SIGKILL');
  } catch {
    target = pid;
    try {
      process.kill(target, 'SIGKILL');
    } catch {
      return false;
    }
  }
  const deadline = Date.now() + graceMs;
  while (processGroupRunning(pid) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 25));
  return true;
}
