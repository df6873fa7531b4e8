import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { eventually } from '@gantry/testing';
import { E2eSystem } from './e2e-system.js';
import { git } from './origin-repository.js';

/*
 * A retry starts clean (docs/worktrees.md, "What a lease starts from"): the job service, the
 * worktree service and a runner as processes, the stand-in agent, a real bare origin with a push
 * log. Attempt 1 commits without reporting anything and crashes; attempt 2 gets the same worktree.
 */
describe('a retried job starts from the origin, not from the failed attempt', () => {
  const system = new E2eSystem();

  beforeAll(async () => {
    await system.start();
    await system.startRunner('runner-retry');
  }, 60_000);
  afterAll(() => system.stop(), 60_000);

  const rescueBranches = async (): Promise<{ branch: string; subjects: string[] }[]> => {
    const reposDir = join(system.worktreeRoot, 'repos');
    const clone = join(reposDir, readdirSync(reposDir).find((name) => name.endsWith('.git'))!);
    const refs = await git(clone, ['for-each-ref', '--format=%(refname:short)', 'refs/heads/gantry/rescue/']);
    const branches = refs === '' ? [] : refs.split('\n');
    return Promise.all(branches.map(async (branch) => ({ branch, subjects: (await git(clone, ['log', '--format=%s', '-3', branch])).split('\n') })));
  };

  it('attempt 1 commits without logging and fails; attempt 2 starts at the origin’s base, and only its own commits are pushed', async () => {
    const main = (await system.origin.sha('main'))!;
    const branch = 'feat/retry-clean';
    const record = system.recordFile('retry-clean');
    const jobId = await system.enqueue({
      maxAttempts: 2,
      branch,
      payload: {
        standIn: {
          behaviour: 'commit',
          files: { 'src/verified.ts': 'export const verified = true;\n' },
          commitMessage: 'attempt 2: verified work',
          recordArgvTo: record,
          byAttempt: { '1': { behaviour: 'crash_after_commit', files: { 'src/unverified.ts': 'never reported\n' }, commitMessage: 'attempt 1: unverified work' } },
        },
      },
    });

    const job = await system.terminal(jobId, 90_000);
    expect(job).toMatchObject({ status: 'DONE', attempt: 2, baseSha: main, headSha: await system.origin.sha(branch) });
    expect(await system.agentStarts(record)).toHaveLength(2);

    // Each attempt was given a base the origin has: main, where the job's branch starts.
    const started = (await system.events(jobId)).filter((e) => e.type === 'JobStarted').map((e) => e.data.baseSha);
    expect(started).toEqual([main, main]);

    // The origin got the branch once, holding attempt 2's commit and nothing of attempt 1.
    expect(await system.origin.log(branch)).toEqual([expect.stringMatching(/^[0-9a-f]{40} attempt 2: verified work$/)]);
    expect(await system.origin.fileAt(branch, 'src/unverified.ts')).toBeNull();
    expect(await system.origin.fileAt(branch, 'src/verified.ts')).toBe('export const verified = true;');
    const pushes = (await system.origin.pushes()).filter((p) => p.ref === `refs/heads/${branch}`);
    expect(pushes).toEqual([{ ref: `refs/heads/${branch}`, oldSha: '0'.repeat(40), newSha: job.headSha }]);

    // Attempt 1's commit is not lost: it waits on a rescue branch of the shared clone, named in the lease's events.
    const rescued = await rescueBranches();
    expect(rescued.filter((r) => r.subjects[0] === 'attempt 1: unverified work')).toHaveLength(1);
    const leases = await system.leasesReleased(jobId);
    expect(leases.map((l) => l.baseSha)).toEqual([main, main]);
  }, 120_000);

  it('a later job on that branch starts from what the origin has of it, not from a failed job’s leftovers', async () => {
    const branch = 'feat/retry-clean';
    const pushedTip = (await system.origin.sha(branch))!;
    // A job that fails for good after committing (one attempt) leaves its commit in the worktree's branch …
    const failed = await system.enqueue({
      maxAttempts: 1,
      branch,
      payload: { standIn: { behaviour: 'crash_after_commit', files: { 'src/left-over.ts': 'x\n' }, commitMessage: 'failed job: left over' } },
    });
    expect((await system.terminal(failed, 60_000)).status).toBe('FAILED');
    await system.leasesReleased(failed);

    // … and the next job on the branch starts at the origin's tip of it and pushes on top of it alone.
    const next = await system.enqueue({
      branch,
      payload: { standIn: { behaviour: 'commit', files: { 'src/next.ts': 'next\n' }, commitMessage: 'next job' } },
    });
    const job = await system.terminal(next, 60_000);
    expect(job).toMatchObject({ status: 'DONE', baseSha: pushedTip });
    expect((await system.origin.log(branch, pushedTip)).map((l) => l.slice(41))).toEqual(['next job']);
    expect(await system.origin.fileAt(branch, 'src/left-over.ts')).toBeNull();
    await eventually(async () => (await rescueBranches()).some((r) => r.subjects[0] === 'failed job: left over'), { what: 'the failed job’s commit rescued' });
  }, 120_000);
});
