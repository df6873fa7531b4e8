import { readdirSync, readFileSync } from 'node:fs';
import { mkdir, readFile, rmdir, writeFile } from 'node:fs/promises';

/**
 * The running (not zombie) processes of this machine whose arguments include every one of
 * `needles`, read from /proc: how a test tells that a git or agent process it had blocked is gone.
 */
export function processesWith(...needles: string[]): number[] {
  const found: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const argv = readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0');
      const state = /^State:\s+(\w)/m.exec(readFileSync(`/proc/${entry}/status`, 'utf8'))?.[1];
      if (needles.every((needle) => argv.includes(needle)) && state !== 'Z') found.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

const FREEZER = '/sys/fs/cgroup/freezer';

/**
 * Freezes every process of the process group `pgid` in a freezer cgroup of its own (cgroup v1). A
 * frozen process does not die of SIGKILL until it is thawed, as a process in uninterruptible sleep (a
 * hung disk, an NFS server gone) does not: how a test makes an agent outlive its SIGKILL. `thaw()` lets
 * the processes go on (a SIGKILL sent meanwhile then ends them) and removes the cgroup. Needs root and
 * the v1 freezer at /sys/fs/cgroup/freezer: without them it throws, so the test fails rather than passes.
 */
export async function freezeProcessGroup(pgid: number): Promise<{ thaw: () => Promise<void> }> {
  const cgroup = `${FREEZER}/gantry-test-${pgid}-${process.pid}`;
  await mkdir(cgroup).catch((error: NodeJS.ErrnoException) => {
    throw new Error(`cannot freeze processes here (root and the cgroup v1 freezer at ${FREEZER} are needed): ${error.message}`);
  });
  const members = processGroupMembers(pgid);
  if (members.length === 0) throw new Error(`process group ${pgid} has no running process to freeze`);
  for (const pid of members) await writeFile(`${cgroup}/cgroup.procs`, `${pid}\n`);
  await writeFile(`${cgroup}/freezer.state`, 'FROZEN\n');
  for (let i = 0; (await readFile(`${cgroup}/freezer.state`, 'utf8')).trim() !== 'FROZEN'; i++) {
    if (i > 200) throw new Error(`process group ${pgid} did not freeze`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return {
    thaw: async () => {
      await writeFile(`${cgroup}/freezer.state`, 'THAWED\n');
      // What is still alive goes back to the root cgroup, so that this one can be removed.
      const left = (await readFile(`${cgroup}/cgroup.procs`, 'utf8')).split('\n').filter(Boolean);
      for (const pid of left) await writeFile(`${FREEZER}/cgroup.procs`, `${pid}\n`).catch(() => undefined);
      for (let i = 0; ; i++) {
        try {
          await rmdir(cgroup);
          return;
        } catch (error) {
          if (i > 200) throw error;
          await new Promise((resolve) => setTimeout(resolve, 10));
        }
      }
    },
  };
}

/** The processes of a process group that have not exited (a zombie has nothing left to freeze), from /proc. */
function processGroupMembers(pgid: number): number[] {
  const found: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(fields[2]) === pgid && fields[0] !== 'Z') found.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return found;
}
