import { readdirSync, readFileSync } from 'node:fs';

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
