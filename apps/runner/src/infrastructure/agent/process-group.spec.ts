import { spawn } from 'node:child_process';
import { processGroupRunning } from './process-group.js';

/*
 * A group whose only member is a zombie: B makes its own group, forks C, which exits and is never
 * reaped (B does not wait), then B moves to its parent's group. kill(-group, 0) still finds C there.
 */
const ZOMBIE_GROUP = `
if (fork() == 0) {
  setpgrp(0, 0);
  exit 0 if fork() == 0;
  select(undef, undef, undef, 0.2);
  setpgrp(0, getppid());
  $| = 1;
  print "$$\\n";
  sleep 30;
  exit 0;
}
sleep 30;
`;

describe('whether a process group still runs', () => {
  it('a group with a running member runs; a group no process is in does not', async () => {
    const child = spawn('sleep', ['30'], { detached: true, stdio: 'ignore' });
    try {
      expect(processGroupRunning(child.pid!)).toBe(true);
    } finally {
      process.kill(-child.pid!, 'SIGKILL');
    }
    await new Promise((resolve) => child.once('exit', resolve));
    expect(processGroupRunning(child.pid!)).toBe(false);
  });

  it('a group whose only member is a zombie does not run, although kill(-group, 0) finds it', async () => {
    const parent = spawn('perl', ['-e', ZOMBIE_GROUP], { detached: true, stdio: ['ignore', 'pipe', 'inherit'] });
    try {
      const group = Number(await new Promise<string>((resolve) => parent.stdout!.once('data', (chunk: Buffer) => resolve(chunk.toString().trim()))));
      expect(() => process.kill(-group, 0)).not.toThrow();
      expect(processGroupRunning(group)).toBe(false);
      expect(processGroupRunning(parent.pid!)).toBe(true);
    } finally {
      process.kill(-parent.pid!, 'SIGKILL');
    }
  });
});
