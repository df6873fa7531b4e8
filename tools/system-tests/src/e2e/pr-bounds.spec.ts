import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { MAX_PR_CHECK_NAME_CHARS, MAX_PR_LIST_BYTES, pullRequestIdFor } from '@gantry/contracts';
import { Clone } from '@gantry/github-fake/testing';
import { eventually } from '@gantry/testing';
import { PrSystem } from './pr-system.js';

/*
 * What GitHub shows a pull request with can be larger than one NATS message; the pr-service's
 * events about it never are (docs/pr-service.md, "How large its events and answers may be"): a
 * conflict in 5,000 files (1.2 MB of paths) and a check run with a name of a million characters are
 * recorded and acted on, with the first files and checks kept and the rest counted. Without the
 * bounds, each event was larger than the store takes: the PR never recorded either, the sprint run
 * never paused and the task never failed. And a list GitHub pages (a head's commit statuses) is read
 * to its end.
 */
describe('pull requests with more than one message carries', () => {
  /**
   * Conflicting files whose paths make 1.2 MB as JSON: 5,000 of 238 characters (git's work goes by
   * the files, the event's size by the bytes).
   */
  const FILES = 5_000;
  const system = new PrSystem();

  beforeAll(async () => {
    await system.start();
    // Two at once: the conflict's sprint run keeps one busy (its second task waits at a gate) while the next
    // test runs. The agent's timeout is the gate's patience: a loaded machine has taken over the default 60 s
    // from the second task's start to the pause, and the killed task failed the run instead.
    await system.startRunner('runner-bounds', { concurrency: 2, env: { GANTRY_AGENT_TIMEOUT_MS: '300000' } });
  }, 90_000);
  afterAll(() => system.stop(), 60_000);

  /** A task's stand-in: commits one file; with a gate, it waits there after its first report (before its commit) until the gate (a file) exists. */
  const commit = (file: string, gate?: string) => ({ standIn: { behaviour: 'commit', files: { [file]: `export const x = '${file}';\n` }, ...(gate ? { pauseUntilFile: gate } : {}) } });
  const bytesOf = (value: unknown) => Buffer.byteLength(JSON.stringify(value));

  /** Writes `count` files under src/modules/generated/ with `content` on `branch` of the clone and pushes them (git add -A: one process, not one a file). */
  function pushMany(clone: Clone, branch: string, from: string, count: number, content: string): void {
    clone.git('fetch', '-q', 'origin');
    clone.git('checkout', '-q', '-B', branch, from);
    mkdirSync(join(clone.dir, 'src/modules/generated'), { recursive: true });
    for (let i = 0; i < count; i++) writeFileSync(join(clone.dir, 'src/modules/generated', `${'generated-component-'.repeat(10)}module-${String(i).padStart(6, '0')}.ts`), content);
    clone.git('add', '-A');
    clone.git('commit', '-q', '-m', `${count} files on ${branch}`);
    clone.git('push', '-q', 'origin', `HEAD:refs/heads/${branch}`);
  }

  it('a merge conflict in 5,000 files (1.2 MB of paths) is recorded with the first files and the rest counted, and pauses the sprint run', async () => {
    const { repository, cloneUrl } = await system.product('product-huge-conflict', 'huge-conflict', { strategy: 'SPRINT', requiredChecks: [] });
    const branch = 'sprint/SP-huge';
    // The same 5,000 paths (1.2 MB as JSON) on the sprint branch and on main, each side with its own
    // content, before the run starts (the run's leases start from the origin's sprint branch).
    const clone = new Clone(cloneUrl);
    try {
      pushMany(clone, branch, 'origin/main', FILES, 'export const side = "sprint";\n');
      pushMany(clone, 'main', 'origin/main', FILES, 'export const side = "main";\n');
    } finally {
      clone.remove();
    }
    // The first task's push opens the PR, in conflict at once; the run is RUNNING when the conflict comes,
    // and no push of the second moves the head from under it (the run queues its second task only once
    // the first is done, and each task waits at its own gate until the run has paused). The first task
    // RUNNING is let through.
    const gates: Record<string, string> = { 'T-1': join(system.root, 'gate-huge-conflict-1'), 'T-2': join(system.root, 'gate-huge-conflict-2') };
    const run = await system.createSprintRun('product-huge-conflict', 'SP-huge', branch, { 'T-1': commit('src/one.ts', gates['T-1']), 'T-2': commit('src/two.ts', gates['T-2']) });
    const first = await eventually(async () => (await system.sprintJobs(run)).find((j) => j.status === 'RUNNING') ?? null, {
      what: 'a task of the run holding the branch\'s worktree',
      timeoutMs: 120_000,
    });
    writeFileSync(gates[first.taskId!]!, '');
    const paused = await system.sprintRunWhere(run, 'PAUSED', 150_000);
    for (const gate of Object.values(gates)) writeFileSync(gate, '');
    const pr = await system.prWhere(repository, branch, (p) => p.prNumber !== null, 'the PR opened');
    const conflict = await system.prWhere(repository, branch, (p) => p.phase === 'merge_conflict_paused', 'the conflict recorded');
    const kept = conflict.conflict!.conflictingFiles;
    expect(kept[0]).toBe(`src/modules/generated/${'generated-component-'.repeat(10)}module-000000.ts`);
    expect(bytesOf(kept)).toBeLessThanOrEqual(MAX_PR_LIST_BYTES);
    expect(conflict.conflict!.conflictingFilesLeftOut).toBe(FILES - kept.length);
    expect(paused.pause).toMatchObject({ reason: 'MERGE_CONFLICT', prUrl: pr.prUrl });
    expect(paused.pause!.conflictingFiles[0]).toBe(`src/modules/generated/${'generated-component-'.repeat(10)}module-000000.ts`);
    // The instructions count every file GitHub's PR shows in conflict, not only those the event kept.
    expect(paused.pause!.resumeInstructions).toContain(`and ${FILES - 20} more files`);
    const [event] = (await system.prEvents(pullRequestIdFor(repository, branch))).filter((e) => e.type === 'PullRequestMergeConflict');
    expect(event!.data).toMatchObject({ conflictingFiles: kept, conflictingFilesLeftOut: FILES - kept.length });
  }, 300_000);

  it('a failing check run with a name of a million characters fails the task of the head, its name cut', async () => {
    const { repository } = await system.product('product-huge-check', 'huge-check', { strategy: 'STORY', requiredChecks: [] });
    const branch = 'story/ST-huge';
    const job = await system.terminal(await system.enqueue({ productId: 'product-huge-check', storyId: 'ST-huge', taskId: 'T-huge', branch, payload: commit('src/huge.ts') }));
    expect(job.status).toBe('DONE');
    await system.prWhere(repository, branch, (p) => p.prNumber !== null && p.scope.done, 'the PR open with its story done');

    const name = `ci/${'matrix-'.repeat(150_000)}`;
    await system.check(repository, job.headSha!, 'failure', name);
    const red = await system.prWhere(repository, branch, (p) => p.phase === 'checks_failed', 'red checks recorded');
    expect(red.checks!.names).toEqual([`${name.slice(0, MAX_PR_CHECK_NAME_CHARS)}…`]);
    const failed = await eventually(async () => {
      const j = await system.job(job.jobId);
      return j.status === 'FAILED' ? j : null;
    }, { what: 'the job FAILED on red checks' });
    expect(failed).toMatchObject({ status: 'FAILED', taskStatus: 'IN_PROGRESS' });
    expect(failed.error!.length).toBeLessThan(MAX_PR_CHECK_NAME_CHARS + 200);
  }, 150_000);

  it('a head with more commit statuses than one page of the combined status: every page is read, and a red one on the second page keeps the PR unmerged', async () => {
    // Without required checks every reported check counts (PR-4).
    const { repository } = await system.product('product-many-statuses', 'many-statuses', { strategy: 'STORY', requiredChecks: [] });
    const branch = 'story/ST-statuses';
    const job = await system.terminal(await system.enqueue({ productId: 'product-many-statuses', storyId: 'ST-statuses', taskId: 'T-statuses', branch, payload: commit('src/statuses.ts') }));
    expect(job.status).toBe('DONE');
    const pr = await system.prWhere(repository, branch, (p) => p.prNumber !== null && p.scope.done, 'the PR open with its story done');

    await system.github.setStatus(repository, { sha: job.headSha!, context: 'ci/test', state: 'failure' });
    await system.prWhere(repository, branch, (p) => p.phase === 'checks_failed', 'red checks recorded');
    // 100 more statuses, all green: GitHub lists the newest first, 100 a page at most, so the red one is on the second page.
    for (let i = 0; i < 100; i++) await system.github.setStatus(repository, { sha: job.headSha!, context: `lint/shard-${String(i).padStart(3, '0')}`, state: 'success' });
    const reads = async () => (await system.github.requests({ method: 'GET', path: `/repos/${repository}/pulls/${pr.prNumber}` })).length;
    const before = await reads();
    await eventually(async () => (await reads()) >= before + 3, { what: 'three more reads of the PR', timeoutMs: 180_000 });
    expect(await system.pr(repository, branch)).toMatchObject({ phase: 'checks_failed', checks: { verdict: 'RED', names: ['ci/test'] }, mergeDecision: null, merged: null });
    expect(await system.github.requests({ method: 'PUT', path: `/repos/${repository}/pulls/` })).toEqual([]);
    // 19 s alone; 108 s after the two tests above on a loaded machine (the local GitHub serializes every
    // request and writes its whole state, megabytes by then, after each).
  }, 300_000);
});
