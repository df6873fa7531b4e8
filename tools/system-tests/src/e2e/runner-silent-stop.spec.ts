import { eventually, logRecordsOf } from '@gantry/testing';
import { alive, systemBehindProxy } from './e2e-system.js';

/*
 * A runner sent SIGTERM while the job service is silent (its bus blackholed: the hand-back and its
 * answer are lost): once its grace is over it stops the agent, asks once for the claim's hand-back,
 * and leaves the claim to its lease, saying so — it does not go on asking until the lease's end, past
 * its own stop's grace (docs/jobs.md, "Stopping a runner").
 */

/** The stop's own bound (`GANTRY_SHUTDOWN_GRACE_MS`), past which the process exits 1. */
const SHUTDOWN_GRACE_MS = 30_000;

describe('a runner stopped while the job service is silent', () => {
  // Only the job service reaches NATS through the proxy: the runner and the worktree service stay on it.
  const { system, proxy: proxyOf } = systemBehindProxy({ jobServiceCutToo: true });

  it('stops within its grace, exits 0, and says the claim is left to its lease', async () => {
    const proxy = proxyOf();
    const runnerId = 'runner-silent-stop';
    // A job lease far longer than the stop's grace: a hand-back asked until the lease's end would outlast the stop.
    const runner = await system.startRunner(runnerId, { env: { GANTRY_JOB_LEASE_MS: '120000', GANTRY_SHUTDOWN_GRACE_MS: String(SHUTDOWN_GRACE_MS) } });
    const record = system.recordFile('silent-stop');
    const jobId = await system.enqueue({
      branch: 'feat/silent-stop',
      maxAttempts: 3,
      payload: { standIn: { behaviour: 'hang', heartbeatMs: 50, recordArgvTo: record } },
    });
    await eventually(async () => (await system.events(jobId)).some((e) => e.type === 'ImplementationLogged'), { what: 'the agent\'s first report recorded', timeoutMs: 60_000 });
    const pid = (await system.agentStarts(record))[0]!.pid;

    proxy.blackhole();
    try {
      const stoppingAt = Date.now();
      const code = await system.stopRunner(runnerId);
      const tookMs = Date.now() - stoppingAt;

      expect(code).toBe(0);
      expect(tookMs).toBeLessThan(SHUTDOWN_GRACE_MS);
      expect(alive(pid)).toBe(false);
      const lines = logRecordsOf(runner.output());
      expect(lines.filter((l) => l.jobId === jobId && l.message === 'the claim could not be handed back; its lease will expire')).toHaveLength(1);
      expect(lines.filter((l) => /offer handling failed/.test(String(l.message)))).toEqual([]);
    } finally {
      proxy.restore();
    }
  }, 300_000);
});
