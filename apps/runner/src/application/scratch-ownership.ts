import { lstat, mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ErrorCode, GantryError } from '@gantry/contracts';

export const OWNER_FILE = 'owner.json';

interface Owner {
  runnerId: string;
  pid: number;
  /** The process's start time in clock ticks since boot (`/proc/<pid>/stat`, field 22): a reused pid has another. */
  startTicks: string;
}

/**
 * A runner's scratch folder belongs to one live runner: at start a runner clears what an earlier run
 * left there (it stops those agents), which would kill the agents of another runner using the same
 * folder. The owner is a pid with its start time, so a runner killed with SIGKILL is recognised as
 * gone at once and its successor takes over without waiting; a lock library that judges staleness by
 * a file's age (proper-lockfile and the like) would make every restart wait out that age. Linux only
 * (`/proc`), like the rest of the runner's process handling.
 */
export async function takeScratchFolder(scratchDir: string, runnerId: string, pid = process.pid): Promise<void> {
  await mkdir(scratchDir, { recursive: true, mode: 0o700 });
  await assertPrivate(scratchDir);
  const path = join(scratchDir, OWNER_FILE);
  const me: Owner = { runnerId, pid, startTicks: await startTicksOf(pid) };
  for (let tries = 0; tries < 5; tries++) {
    try {
      await writeFile(path, JSON.stringify(me), { flag: 'wx', mode: 0o600 });
      return;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
    const text = await readFile(path, 'utf8').catch(() => null);
    if (text === null) continue; // removed meanwhile: try again
    const owner = parseOwner(text);
    if (owner && owner.pid !== pid && (await startTicksOf(owner.pid).catch(() => null)) === owner.startTicks) {
      throw new GantryError(
        ErrorCode.PRECONDITION_FAILED,
        `the scratch folder ${scratchDir} belongs to runner ${owner.runnerId} (pid ${owner.pid}), which is running: give each runner its own GANTRY_RUNNER_SCRATCH_DIR`,
        { scratchDir, runnerId: owner.runnerId, pid: owner.pid },
      );
    }
    // The owner is gone (or it is this very process): move its claim aside atomically, then claim afresh.
    await rename(path, `${path}.${pid}.stale`).catch((error: NodeJS.ErrnoException) => {
      if (error.code !== 'ENOENT') throw error;
    });
  }
  throw new GantryError(ErrorCode.PRECONDITION_FAILED, `could not take the scratch folder ${scratchDir}: other runners keep claiming it`);
}

/**
 * The scratch folder holds each job's tool-server configuration with its secret, and its name under
 * the system's temporary folder is predictable (`gantry-runner-<id>`): one made beforehand by another
 * user, or open to others, would let them read those secrets or plant files. It must be a directory
 * of this process's user (not a link to one) that nobody else may write.
 */
async function assertPrivate(scratchDir: string): Promise<void> {
  const info = await lstat(scratchDir);
  const uid = process.getuid?.();
  const problem = !info.isDirectory()
    ? 'is not a directory'
    : uid !== undefined && info.uid !== uid
      ? `belongs to user ${info.uid}, not to this runner's (${uid})`
      : (info.mode & 0o022) !== 0
        ? `may be written by other users (mode ${(info.mode & 0o777).toString(8)})`
        : null;
  if (problem) {
    throw new GantryError(ErrorCode.PRECONDITION_FAILED, `the scratch folder ${scratchDir} ${problem}: it holds the jobs' secrets; remove it or set GANTRY_RUNNER_SCRATCH_DIR`, {
      scratchDir,
    });
  }
}

function parseOwner(text: string): Owner | null {
  try {
    const owner = JSON.parse(text) as Owner;
    return Number.isInteger(owner.pid) && typeof owner.startTicks === 'string' ? owner : null;
  } catch {
    return null;
  }
}

async function startTicksOf(pid: number): Promise<string> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
  // The command name (field 2) is in parentheses and may hold blanks: count fields after its closing one.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return fields[19]!;
}
