import { chmod, mkdir, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { git } from './origin-repository.js';
import { E2eSystem } from './e2e-system.js';

/*
 * A hostile agent, through the runner's own run: the stand-in agent does its work and then writes
 * the shared clone's config, hooks or attributes (as an agent with full permissions in its worktree
 * can). The runner then verifies, pre-checks and pushes with service-side git. Per key: no program
 * of the agent runs (its marker file never appears), and the branch lands where the lease says —
 * the repository's URL, whatever `origin` now names — or the job fails loudly with nothing pushed.
 * Jobs run one after another: they share one clone, whose config the worktree service restores at
 * the next lease.
 */

interface HostileCase {
  label: string;
  /** `git config` the agent writes after its work; MARKER_SCRIPT and ELSEWHERE / ORIGIN are filled in. */
  gitConfig?: Record<string, string>;
  /** Files under the git common dir the agent writes after its work. */
  gitFiles?: Record<string, string>;
  /** Files the agent commits with its work (besides its source file). */
  files?: Record<string, string>;
  /** DONE: the branch lands on the origin; FAILED: the runner refused the repository. */
  expected: 'DONE' | 'FAILED';
}

const hook = (marker: string) => `#!/bin/sh\ntouch '${marker}'\ncat >/dev/null\n`;

const cases: HostileCase[] = [
  { label: 'fsmonitor', gitConfig: { 'core.fsmonitor': 'MARKER_SCRIPT' }, expected: 'FAILED' },
  { label: 'hooks', gitFiles: { 'hooks/pre-push': 'HOOK', 'hooks/reference-transaction': 'HOOK', 'hooks/post-checkout': 'HOOK' }, expected: 'DONE' },
  { label: 'hookspath', gitConfig: { 'core.hooksPath': 'MARKER_HOOKS' }, expected: 'FAILED' },
  { label: 'filter', files: { '.gitattributes': '* filter=agent\n' }, gitConfig: { 'filter.agent.clean': 'MARKER_SCRIPT', 'filter.agent.smudge': 'MARKER_SCRIPT' }, expected: 'FAILED' },
  { label: 'textconv', files: { '.gitattributes': '* diff=agent\n' }, gitConfig: { 'diff.agent.textconv': 'MARKER_SCRIPT' }, expected: 'FAILED' },
  { label: 'external-diff', gitConfig: { 'diff.external': 'MARKER_SCRIPT' }, expected: 'FAILED' },
  { label: 'diff-command', files: { '.gitattributes': '* diff=agent\n' }, gitConfig: { 'diff.agent.command': 'MARKER_SCRIPT' }, expected: 'FAILED' },
  { label: 'merge-driver', files: { '.gitattributes': '* merge=agent\n' }, gitConfig: { 'merge.agent.driver': 'MARKER_SCRIPT %O %A %B' }, expected: 'FAILED' },
  { label: 'receivepack', gitConfig: { 'remote.origin.receivepack': 'MARKER_SCRIPT' }, expected: 'FAILED' },
  { label: 'uploadpack', gitConfig: { 'remote.origin.uploadpack': 'MARKER_SCRIPT' }, expected: 'FAILED' },
  { label: 'ssh-command', gitConfig: { 'core.sshCommand': 'MARKER_SCRIPT' }, expected: 'FAILED' },
  { label: 'credential-helper', gitConfig: { 'credential.helper': '!MARKER_SCRIPT' }, expected: 'FAILED' },
  { label: 'pushurl', gitConfig: { 'remote.origin.pushurl': 'ELSEWHERE' }, expected: 'FAILED' },
  { label: 'push-instead-of', gitConfig: { 'url.ELSEWHERE.pushInsteadOf': 'ORIGIN' }, expected: 'FAILED' },
  { label: 'instead-of', gitConfig: { 'url.ELSEWHERE.insteadOf': 'ORIGIN' }, expected: 'FAILED' },
  // remote.origin.url is the clone's own key (git writes it): allowed, and irrelevant — the runner pushes to the leased URL.
  { label: 'origin-url', gitConfig: { 'remote.origin.url': 'ELSEWHERE' }, expected: 'DONE' },
];

describe('a hostile agent’s git config, hooks and attributes through the runner’s run', () => {
  const system = new E2eSystem();
  let elsewhere: string;
  let markers: string;

  beforeAll(async () => {
    await system.start();
    markers = join(system.root, 'markers');
    await mkdir(markers, { recursive: true });
    elsewhere = join(system.root, 'elsewhere.git');
    await git(system.root, ['init', '-q', '--bare', elsewhere]);
    await system.startRunner('runner-hostile');
  }, 60_000);
  afterAll(() => system.stop(), 60_000);

  async function markerScript(label: string): Promise<{ marker: string; script: string; hooks: string }> {
    const marker = join(markers, `${label}-ran`);
    const script = join(markers, `${label}.sh`);
    await writeFile(script, hook(marker));
    await chmod(script, 0o755);
    const hooks = join(markers, `${label}-hooks`);
    await mkdir(hooks, { recursive: true });
    for (const name of ['pre-push', 'reference-transaction', 'post-checkout', 'post-merge']) {
      await writeFile(join(hooks, name), hook(marker));
      await chmod(join(hooks, name), 0o755);
    }
    return { marker, script, hooks };
  }

  it.each(cases.map((c) => [c.label, c] as const))('%s: nothing of the agent runs; the branch lands on the leased repository or the job fails loudly', async (label, hostile) => {
    const { marker, script, hooks } = await markerScript(label);
    const fill = (text: string) =>
      text.replace('MARKER_SCRIPT', script).replace('MARKER_HOOKS', hooks).replace('HOOK', hook(marker)).replace('ELSEWHERE', elsewhere).replace('ORIGIN', system.origin.url);
    const fillAll = (record: Record<string, string> | undefined) =>
      Object.fromEntries(Object.entries(record ?? {}).map(([key, value]) => [fill(key), fill(value)]));
    const branch = `feat/hostile-${label}`;
    const jobId = await system.enqueue({
      branch,
      maxAttempts: 1,
      payload: {
        standIn: {
          behaviour: 'commit',
          files: { [`src/${label}.ts`]: `export const ${label.replace(/-/g, '_')} = 1;\n`, ...hostile.files },
          gitConfig: fillAll(hostile.gitConfig),
          gitFiles: fillAll(hostile.gitFiles),
        },
      },
    });
    const job = await system.terminal(jobId, 90_000);
    await system.leasesReleased(jobId);

    expect(existsSync(marker)).toBe(false);
    expect(await git(elsewhere, ['for-each-ref', '--format=%(refname)', `refs/heads/${branch}`])).toBe('');
    expect({ status: job.status }).toEqual({ status: hostile.expected });
    if (hostile.expected === 'DONE') {
      expect(await system.origin.sha(branch)).toBe(job.headSha);
    } else {
      expect(job.error).toMatch(/service-side git does not accept/);
      expect(await system.origin.sha(branch)).toBeNull();
    }
  });

  it('pre-check: what an earlier attempt’s agent left (a textconv driver and info/attributes) runs nothing before the next agent starts', async () => {
    const { marker, script } = await markerScript('precheck');
    const branch = 'feat/hostile-precheck';
    const jobId = await system.enqueue({
      branch,
      maxAttempts: 2,
      payload: {
        expectedChanges: [{ path: 'src/precheck.ts', contains: 'precheck = 1' }],
        standIn: {
          behaviour: 'commit',
          files: { 'src/precheck.ts': 'export const precheck = 1;\n' },
          byAttempt: { '1': { behaviour: 'exit_nonzero', gitConfig: { 'diff.agent.textconv': script }, gitFiles: { 'info/attributes': '* diff=agent\n' } } },
        },
      },
    });
    const job = await system.terminal(jobId, 90_000);
    expect(existsSync(marker)).toBe(false);
    expect(job).toMatchObject({ status: 'DONE', attempt: 2 });
    expect(await system.origin.sha(branch)).toBe(job.headSha);
  });
});
