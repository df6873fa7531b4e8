import { readdirSync, readFileSync } from 'node:fs';

/**
 * Whether any process of the group `pgid` still runs. `kill(-pgid, 0)` would also count zombies —
 * processes that have exited and only wait for their new parent (init) to reap them — and those can
 * no longer write anywhere. So the group is read from `/proc` (Linux, like the rest of the runner's
 * process handling): a member in any state but Z (zombie) or X (dead) is running.
 */
export function processGroupRunning(pgid: number): boolean {
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return signalable(-pgid);
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

function signalable(target: number): boolean {
  try {
    process.kill(target, 0);
    return true;
  } catch {
    return false;
  }
}
