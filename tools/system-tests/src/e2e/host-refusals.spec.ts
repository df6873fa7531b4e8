import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { eventually, logRecordsOf } from '@gantry/testing';
import { E2eSystem } from './e2e-system.js';

/*
 * A worktree the runner's host cannot use is the host's failure, not the job's (docs/jobs.md,
 * "Attempts", cause RUNNER): such a claim goes back without spending an attempt, and the runner takes
 * no offers for a while, longer each time its host fails again, so that a broken host does not keep
 * taking the queue's jobs. A base ref the origin does not have is the job's own failure, as before.
 */
describe('a worktree refused for a reason of the host', () => {
  const system = new E2eSystem();

  beforeAll(() => system.start(), 60_000);
  afterAll(() => system.stop(), 60_000);

  it('gives the claim back with cause RUNNER, keeps the attempt, and the runner backs off taking offers; a runner whose host works completes the job', async () => {
    // The runner's root is not the worktree service's: every worktree it is leased lies outside its root.
    const elsewhere = join(system.root, 'elsewhere');
    await mkdir(elsewhere, { recursive: true });
    const broken = await system.startRunner('runner-bad-host', { env: { GANTRY_WORKTREE_ROOT: elsewhere, GANTRY_RUNNER_BACKOFF_INITIAL_MS: '1500' } });
    const record = system.recordFile('bad-host');
    const jobIds = [
      await system.enqueue({ branch: 'feat/bad-host-1', maxAttempts: 1, payload: { standIn: { behaviour: 'commit', recordArgvTo: record, files: { 'src/a.ts': 'a\n' } } } }),
      await system.enqueue({ branch: 'feat/bad-host-2', maxAttempts: 1, payload: { standIn: { behaviour: 'commit', recordArgvTo: record, files: { 'src/b.ts': 'b\n' } } } }),
    ];
    const pauses = await eventually(
      () => {
        const found = logRecordsOf(broken.output()).filter((r) => r.message === 'this host failed a job; no offers are taken for a while');
        return found.length >= 2 ? found : null;
      },
      { what: 'the runner backing off twice', timeoutMs: 40_000 },
    ).catch((error: Error) => {
      throw new Error(`${error.message}\nrunner output:\n${broken.output().slice(-3000)}`);
    });
    // 1.5 s, then 3 s (each with up to a fifth taken off)
    expect(Number(pauses[0]!.pauseMs)).toBeLessThanOrEqual(1500);
    expect(Number(pauses[1]!.pauseMs)).toBeGreaterThan(Number(pauses[0]!.pauseMs) * 1.2);
    // No claim while a pause runs.
    const records = logRecordsOf(broken.output());
    const firstPause = records.indexOf(pauses[0]!);
    const nextClaim = records.slice(firstPause).find((r) => r.message === 'job claimed');
    if (nextClaim) expect(Date.parse(String(nextClaim.time)) - Date.parse(String(pauses[0]!.time))).toBeGreaterThanOrEqual(Number(pauses[0]!.pauseMs) - 50);

    for (const jobId of jobIds) {
      const rolledBack = (await system.events(jobId)).filter((e) => e.type === 'JobClaimRolledBack').map((e) => e.data);
      for (const data of rolledBack) expect(data).toMatchObject({ cause: 'RUNNER', outcome: 'REQUEUED', nextAttempt: 1 });
    }
    expect(await system.agentStarts(record)).toHaveLength(0);
    await system.stopRunner('runner-bad-host');

    await system.startRunner('runner-good-host');
    for (const jobId of jobIds) expect(await system.terminal(jobId, 60_000)).toMatchObject({ status: 'DONE', attempt: 1 });
    await system.stopRunner('runner-good-host');
  }, 150_000);

  it("a base ref the origin does not have is the job's failure: its attempt is spent", async () => {
    await system.startRunner('runner-job-fault', { env: { GANTRY_RUNNER_BACKOFF_INITIAL_MS: '1500' } });
    const jobId = await system.enqueue({ branch: 'feat/no-base', baseRef: 'no-such-base', maxAttempts: 1 });
    expect(await system.terminal(jobId, 60_000)).toMatchObject({ status: 'FAILED', attempt: 1 });
    const rolledBack = (await system.events(jobId)).filter((e) => e.type === 'JobClaimRolledBack').map((e) => e.data);
    expect(rolledBack).toEqual([expect.objectContaining({ cause: 'JOB', outcome: 'FAILED' })]);
    expect(String(rolledBack[0]!.reason)).toMatch(/base ref no-such-base is not a branch, tag or commit of the origin/);
    expect(logRecordsOf(system.output('runner-job-fault')).filter((r) => r.message === 'this host failed a job; no offers are taken for a while')).toHaveLength(0);
    await system.stopRunner('runner-job-fault');
  }, 120_000);
});
