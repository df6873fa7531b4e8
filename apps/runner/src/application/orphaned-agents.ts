import { readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { ErrorCode, GantryError, type VerificationFacts } from '@gantry/contracts';
import { assertRepositoryUrl } from '@gantry/git';
import { processGroupRunning } from '../infrastructure/agent/process-group.js';

export const AGENT_PID_FILE = 'agent.pid';
/** What a run's scratch directory says about the claim it belongs to (written at the claim, completed at the worktree lease). */
export const RUN_RECORD_FILE = 'run.json';

export interface RunRecord {
  jobId: string;
  leaseToken: number;
  /** The claim's attempt and kind (absent in a record written before they were kept): what its log lines carry. */
  attempt?: number;
  kind?: string;
  worktreeLease: { leaseId: string; token: number } | null;
  /**
   * The push the run is making, written before it starts and again with its outcome (`pushed`) once
   * the origin took it: a runner killed before it reported the push finds it here.
   */
  push?: RecordedPush | null;
}

export interface RecordedPush {
  worktreeDir: string;
  repositoryUrl: string;
  branch: string;
  headSha: string;
  facts: VerificationFacts;
  /** Set once the push returned: whether it sent the commit (false: the origin had it already). */
  pushed?: boolean;
}

export interface OrphanedRun {
  scratch: string;
  /** Null when the directory holds no readable run record. */
  run: RunRecord | null;
  pid: number | null;
  /** The agent was found alive and stopped. */
  killed: boolean;
  /**
   * Nothing of the agent is left. False when a process of its group outlived its SIGKILL for the whole
   * kill grace (uninterruptible sleep): the claim is settled all the same, and the settling says so.
   */
  groupGone: boolean;
}

/** An agent of an earlier run not known to be gone, and the claim it worked under (null: its directory holds no run record). */
export interface AgentLeft {
  scratch: string;
  pid: number | null;
  jobId: string | null;
  leaseToken: number | null;
}

/**
 * The stop's deadline came while the agents of an earlier run were being stopped: `left` names those
 * not known to be gone (the one being waited for, and those of the directories not reached yet).
 */
export class OrphanedAgentsLeft extends GantryError {
  constructor(
    readonly left: AgentLeft[],
    /** The directories whose agents were stopped (or had none) before the deadline came. */
    readonly stopped: OrphanedRun[],
  ) {
    super(ErrorCode.TIMEOUT, `stopping the agents an earlier run of this runner left was given up at its deadline; ${left.length} not known to be gone`, { left });
    this.name = 'OrphanedAgentsLeft';
  }
}

/** Records the agent's pid in its job's scratch directory, so a restarted runner can find it. */
export async function recordAgentPid(scratch: string, pid: number): Promise<void> {
  await writeFile(join(scratch, AGENT_PID_FILE), `${pid}\n`, { mode: 0o600 });
}

/**
 * Writes the run record over the last. The record is a file on disk for ids, fences and the push's
 * target, not for secrets: a push's `repositoryUrl` must pass the repository URL rules, which refuse
 * credentials in it (an https URL's user info, an ssh URL's password), so a URL carrying them is
 * refused (INVALID_COMMAND, the URL not quoted) and the record on disk stays as it was. Such a URL
 * cannot reach here from a job or a lease (both are held to the same rules) nor from
 * GANTRY_REPOSITORY_URL (refused at start); this keeps it so whatever path a URL takes. Git gets a
 * repository's credentials from a credential helper, never from its URL.
 */
export async function recordRun(scratch: string, run: RunRecord): Promise<void> {
  if (run.push) assertRepositoryUrl(run.push.repositoryUrl);
  await writeFile(join(scratch, RUN_RECORD_FILE), JSON.stringify(run), { mode: 0o600 });
}

/**
 * A runner killed with SIGKILL leaves its agents running (they have their own process groups) and
 * its scratch directories behind. Started again under the same runner id, it stops those agents —
 * only a process whose command line still names that job's scratch directory, so a reused pid is
 * never touched — waits until their process groups are gone, and hands back what each directory
 * says about its claim. The caller settles the claims, then removes the directories (`removeRun`).
 * The pid is recorded only once the agent was spawned: a runner killed in between left none, so
 * without a recorded agent the processes naming the directory are looked for (`/proc`) and their
 * groups stopped all the same — otherwise that agent would go on writing into a worktree its claim's
 * settlement gives back to the next job. Each group is waited for `graceMs` at most, and no longer than
 * until `abandon` aborts (the runner's stop deadline): then it throws OrphanedAgentsLeft, naming the
 * agents not known to be gone and the claims they worked under (docs/jobs.md, "Stopping a runner").
 */
export async function stopOrphanedAgents(scratchDir: string, graceMs = 5_000, abandon?: AbortSignal): Promise<OrphanedRun[]> {
  const entries = await readdir(scratchDir, { withFileTypes: true }).catch((error: NodeJS.ErrnoException) => {
    if (error.code === 'ENOENT') return [];
    throw error;
  });
  const scratches = entries.filter((entry) => entry.isDirectory()).map((entry) => join(scratchDir, entry.name)).sort();
  const found: OrphanedRun[] = [];
  for (const [i, scratch] of scratches.entries()) {
    const pid = await recordedPid(scratch);
    const recorded = pid !== null && (await commandLineNames(pid, scratch));
    const groups = recorded ? [pid] : await groupsNaming(scratch);
    let killed = false;
    let groupGone = true;
    try {
      for (const group of groups) {
        const stopped = await killGroupAndWait(group, graceMs, abandon);
        killed = stopped.killed || killed;
        groupGone = stopped.gone && groupGone;
      }
    } catch (error) {
      if (!abandon?.aborted) throw error;
      const waitedFor = { scratch, pid: recorded ? pid : (groups[0] ?? pid) };
      const notReached = await Promise.all(scratches.slice(i + 1).map(async (other) => ({ scratch: other, pid: await recordedPid(other) })));
      const left = await Promise.all([waitedFor, ...notReached].map(async (agent) => ({ ...agent, ...claimOf(await readRun(agent.scratch)) })));
      throw new OrphanedAgentsLeft(left, found);
    }
    found.push({ scratch, run: await readRun(scratch), pid: recorded ? pid : (groups[0] ?? pid), killed, groupGone });
  }
  return found;
}

export async function removeRun(scratch: string): Promise<void> {
  await rm(scratch, { recursive: true, force: true });
}

async function recordedPid(scratch: string): Promise<number | null> {
  const pidText = (await readFile(join(scratch, AGENT_PID_FILE), 'utf8').catch(() => '')).trim();
  return Number.isInteger(Number(pidText)) && Number(pidText) > 1 ? Number(pidText) : null;
}

function claimOf(run: RunRecord | null): { jobId: string | null; leaseToken: number | null } {
  return { jobId: run?.jobId ?? null, leaseToken: run?.leaseToken ?? null };
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

/** The process groups of the processes whose command line names `scratch`, this process's own group excepted. */
async function groupsNaming(scratch: string): Promise<number[]> {
  const own = await groupOf(process.pid);
  const groups = new Set<number>();
  for (const entry of await readdir('/proc').catch(() => [] as string[])) {
    if (!/^\d+$/.test(entry) || !(await commandLineNames(Number(entry), scratch))) continue;
    const group = await groupOf(Number(entry));
    if (group !== null && group !== own) groups.add(group);
  }
  return [...groups];
}

async function groupOf(pid: number): Promise<number | null> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => null);
  if (stat === null) return null;
  // After the command name's closing parenthesis: state, ppid, pgrp, …
  const group = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[2]);
  return Number.isInteger(group) && group > 1 ? group : null;
}

/**
 * SIGKILL to the agent's process group (or the agent alone), then waits until nothing of it is left,
 * for `graceMs` at most; a process in uninterruptible sleep outlives its SIGKILL for as long as that
 * lasts (`gone: false`). Throws when `abandon` aborts (the stop's deadline) before.
 */
async function killGroupAndWait(pid: number, graceMs: number, abandon?: AbortSignal): Promise<{ killed: boolean; gone: boolean }> {
  let target = -pid;
  try {
    process.kill(target, 'SIGKILL');
  } catch {
    target = pid;
    try {
      process.kill(target, 'SIGKILL');
    } catch {
      return { killed: false, gone: true };
    }
  }
  const deadline = Date.now() + graceMs;
  while (processGroupRunning(pid) && Date.now() < deadline) {
    // Rejects at once when the deadline aborts it.
    await delay(25, undefined, { signal: abandon });
  }
  return { killed: true, gone: !processGroupRunning(pid) };
}
