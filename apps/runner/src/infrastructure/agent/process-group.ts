import { readdirSync, readFileSync } from 'node:fs';

/**
 * Whether any process of the group `pgid` still runs. `kill(-pgid, 0)` would also count zombies —
 * processes that have exited and only wait for their new parent (init) to reap them — and those can
 * no longer write anywhere. So the group is read from `/proc` (Linux, like the rest of the runner's
 * process handling): a member in any state but Z (zombie) or X (dead) is running.
 */
export function processGroupRunning(pgid: number): boolean {
  // No member at all, zombie or not — the usual answer once an agent has exited and been reaped —
  // needs no scan of /proc, which reads a file per process of the host in one blocking loop.
  if (!groupHasMembers(pgid)) return false;
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return true; // no /proc to tell zombies apart: a member is a member
  }
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
    } catch {
      continue; // gone meanwhile
    }
    // After the command name's closing parenthesis: state (field 3), ppid, pgrp (field 5), …
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (Number(fields[2]) === pgid && fields[0] !== 'Z' && fields[0] !== 'X') return true;
  }
  return false;
}

/** Whether `kill(-pgid, 0)` finds any process in the group (EPERM: there is one, not ours to signal). */
function groupHasMembers(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}
