import { execFile } from 'node:child_process';
import { mkdir, readdir, rmdir, stat, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const runnerRoot = join(dirname(fileURLToPath(import.meta.url)), '../../..');
export const standInBin = join(runnerRoot, 'bin/stand-in-claude');
const dist = join(runnerRoot, 'dist');
const stamp = join(dist, '.stand-in-build-stamp');
const lock = join(dist, '.stand-in-build-lock');

/**
 * Compiles the runner (as `nx run runner:build` does) when its sources are newer than the last
 * build, so tests can run the stand-in agent as the separate process it is. Test files run in
 * parallel workers: a lock directory makes one build and the others wait for it.
 */
export async function ensureStandInBuilt(): Promise<string> {
  await mkdir(dist, { recursive: true });
  await acquire();
  try {
    if (!(await isFresh())) {
      await swc();
      await writeFile(stamp, new Date().toISOString());
    }
  } finally {
    await rmdir(lock);
  }
  return standInBin;
}

async function acquire(): Promise<void> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    try {
      await mkdir(lock);
      return;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      // A lock left by a killed test run would block forever: take it over after a minute.
      const age = Date.now() - (await stat(lock).catch(() => ({ mtimeMs: Date.now() }))).mtimeMs;
      if (age > 60_000 || Date.now() > deadline) {
        await rmdir(lock).catch(() => undefined);
        continue;
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
}

async function isFresh(): Promise<boolean> {
  const built = await stat(stamp).catch(() => null);
  if (!built) return false;
  return (await newestSourceMtime(join(runnerRoot, 'src'))) < built.mtimeMs;
}

async function newestSourceMtime(dir: string): Promise<number> {
  let newest = 0;
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) newest = Math.max(newest, await newestSourceMtime(path));
    else if (entry.name.endsWith('.ts') && !entry.name.endsWith('.spec.ts')) newest = Math.max(newest, (await stat(path)).mtimeMs);
  }
  return newest;
}

function swc(): Promise<void> {
  const bin = join(runnerRoot, '../../node_modules/.bin/swc');
  return new Promise((resolve, reject) => {
    execFile(
      bin,
      ['src', '-d', 'dist', '--strip-leading-paths', '--config-file', '../../.swcrc', '-q'],
      { cwd: runnerRoot },
      (error, _stdout, stderr) => (error ? reject(new Error(`building the runner failed: ${stderr || error.message}`)) : resolve()),
    );
  });
}
