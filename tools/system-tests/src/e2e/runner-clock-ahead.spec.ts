import { eventually, logRecordsOf } from '@gantry/testing';
import { E2eSystem } from './e2e-system.js';

/*
 * A runner whose wall clock is five minutes ahead of the services' (docs/jobs.md, "A runner's clock"): every lease
 * the services grant runs out before "now" by its clock. It runs a job all the same — claim, worktree, agent,
 * renewals of both leases over a few seconds, push and finish — and none of its commands is given up for a
 * lease that only its clock says is over.
 */
describe('a runner whose clock is five minutes ahead of the services\'', () => {
  const system = new E2eSystem();

  beforeAll(async () => {
    await system.start();
    await system.startRunner('runner-a', { concurrency: 1, env: { LOG_LEVEL: 'info' }, clockSkewMs: 300_000 });
  }, 120_000);
  afterAll(() => system.stop(), 60_000);

  it('runs a job to DONE, its leases renewed while the agent works', async () => {
    const record = system.recordFile('ahead');
    const jobId = await system.enqueue({
      branch: 'feat/clock-ahead',
      payload: { standIn: { behaviour: 'commit', files: { 'src/ahead.ts': 'export const ahead = true;\n' }, delayMs: 3_000, recordArgvTo: record } },
    });
    await eventually(async () => (await system.agentStarts(record)).length === 1, { what: 'the agent starting', timeoutMs: 30_000 });
    const job = await system.terminal(jobId, 30_000);
    expect(job).toMatchObject({ status: 'DONE', attempt: 1, error: null });
    const events = await system.events(jobId);
    // Renewed every second while the agent waited three: both leases, by the services' own clocks.
    expect(events.filter((e) => e.type === 'JobLeaseRenewed').length).toBeGreaterThanOrEqual(2);
    const lost = logRecordsOf(system.output('runner-a')).filter((r) => /lease (ran out|lost)|could not be handed back/.test(String(r.message)));
    expect(lost).toEqual([]);
  }, 120_000);
});
