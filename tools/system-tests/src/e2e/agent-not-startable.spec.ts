import { join } from 'node:path';
import { eventually } from '@gantry/testing';
import { E2eSystem } from './e2e-system.js';

/*
 * A runner whose agent CLI cannot be started (not installed, not executable, a wrong
 * GANTRY_AGENT_BIN) cannot run any job: that is the runner's failure, not the job's (docs/jobs.md,
 * "Attempts"). It must not spend the attempts of the jobs it takes, nor keep taking them.
 */
describe('a runner whose agent cannot be started', () => {
  const system = new E2eSystem();

  beforeAll(() => system.start(), 60_000);
  afterAll(() => system.stop(), 60_000);

  it('gives the claim back without spending its attempt, takes no more work, and another runner completes the job', async () => {
    const broken = await system.startRunner('runner-nobin', { env: { GANTRY_AGENT_BIN: join(system.root, 'no-such-agent') } });
    const record = system.recordFile('nobin');
    const jobId = await system.enqueue({
      branch: 'feat/nobin-1',
      maxAttempts: 1,
      payload: { standIn: { behaviour: 'commit', recordArgvTo: record, files: { 'src/nobin.ts': 'nobin\n' } } },
    });
    const rolledBack = await eventually(async () => (await system.events(jobId)).find((e) => e.type === 'JobClaimRolledBack')?.data ?? null, {
      what: 'the claim given back',
      timeoutMs: 30_000,
    }).catch(async (error: Error) => {
      throw new Error(`${error.message}; ${await system.describeJob(jobId)}\nrunner output:\n${broken.output().slice(-3000)}`);
    });
    expect(rolledBack).toMatchObject({ cause: 'RUNNER', outcome: 'REQUEUED', nextAttempt: 1 });
    expect(String(rolledBack.reason)).toMatch(/could not be started/);
    expect(await system.job(jobId)).toMatchObject({ status: 'QUEUED', attempt: 1 });
    await eventually(async () => (await system.health('runner-nobin')).status === 503, { what: 'the runner unhealthy', timeoutMs: 15_000 });
    // The job waits for a runner that can run it; this one claims it no more.
    await system.startRunner('runner-works');
    const job = await system.terminal(jobId, 60_000);
    expect(job).toMatchObject({ status: 'DONE', attempt: 1 });
    expect(await system.agentStarts(record)).toHaveLength(1);
    expect((await system.events(jobId)).filter((e) => e.type === 'JobClaimRolledBack')).toHaveLength(1);
    await system.stopRunner('runner-nobin');
    await system.stopRunner('runner-works');
  }, 120_000);
});
