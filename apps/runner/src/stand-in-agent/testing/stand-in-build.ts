import { execFile } from 'node:child_process';
import { mkdir, readdir, readFile, rmdir, stat } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const runnerRoot = join(dirname(fileURLToPath(import.meta.url)), '../../..');
export const standInBin = join(runnerRoot, 'bin/stand-in-claude');
const dist = join(runnerRoot, 'dist');
const lock = join(dist, '.stand-in-build-lock');
/** What the build makes and the tests run: the runner and the stand-in agent, each one bundled file. */
const entries = [join(dist, 'main.js'), join(dist, 'stand-in-agent/main.js')];

/**
 * Builds the runner with its own build target (`nx run runner:build`: swc, then the bundle step)
 * when its sources are newer than what was built, so tests run the stand-in agent as the separate
 * process it is, built as it ships. Test files run in parallel workers: a lock directory makes one
 * build and the others wait for it.
 */
export async function ensureStandInBuilt(): Promise<string> {
  await mkdir(dist, { recursive: true });
  await acquire();
  try {
    if (!(await isFresh())) await build();
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
  const built = await Promise.all(entries.map((entry) => stat(entry).catch(() => null)));
  if (built.some((b) => b === null)) return false;
  return (await newestSourceMtime(join(runnerRoot, 'src'))) < Math.min(...built.map((b) => b!.mtimeMs));
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

/** Runs the command of the runner project's build target, from the project's directory, as Nx would. */
async function build(): Promise<void> {
  const project = JSON.parse(await readFile(join(runnerRoot, 'project.json'), 'utf8')) as { targets: { build: { options: { command: string } } } };
  const bin = join(runnerRoot, '../../node_modules/.bin');
  return new Promise((resolve, reject) => {
    execFile(
      'sh',
      ['-c', project.targets.build.options.command],
      { cwd: runnerRoot, env: { ...process.env, PATH: `${bin}:${process.env.PATH ?? ''}` } },
      (error, _stdout, stderr) => (error ? reject(new Error(`building the runner failed: ${stderr || error.message}`)) : resolve()),
    );
  });
}
