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

  /**
   * Starts a runner (`runner-<name>`, with `env`) and a hanging stand-in agent (`standIn` added to its
   * script), cuts the job service off once the agent has reported, and sends the runner SIGTERM.
   */
  async function stopWhileSilent(name: string, env: Record<string, string>, standIn: Record<string, unknown> = {}) {
    const proxy = proxyOf();
    const runnerId = `runner-${name}`;
    const runner = await system.startRunner(runnerId, { env: { GANTRY_SHUTDOWN_GRACE_MS: String(SHUTDOWN_GRACE_MS), ...env } });
    const record = system.recordFile(name);
    const jobId = await system.enqueue({
      branch: `feat/${name}`,
      maxAttempts: 3,
      payload: { standIn: { behaviour: 'hang', heartbeatMs: 50, recordArgvTo: record, ...standIn } },
    });
    await eventually(async () => (await system.events(jobId)).some((e) => e.type === 'ImplementationLogged'), { what: 'the agent\'s first report recorded', timeoutMs: 60_000 });
    const pid = (await system.agentStarts(record))[0]!.pid;

    proxy.blackhole();
    try {
      const stoppingAt = Date.now();
      const code = await system.stopRunner(runnerId);
      const tookMs = Date.now() - stoppingAt;
      const lines = logRecordsOf(runner.output());
      return { code, tookMs, pid, lines, leftToExpire: lines.filter((l) => l.jobId === jobId && l.message === 'the claim could not be handed back; its lease will expire') };
    } finally {
      proxy.restore();
    }
  }

  it('stops within its grace, exits 0, and says the claim is left to its lease', async () => {
    // A job lease far longer than the stop's grace: a hand-back asked until the lease's end would outlast the stop.
    const stop = await stopWhileSilent('silent-stop', { GANTRY_JOB_LEASE_MS: '120000' });

    expect(stop.code).toBe(0);
    expect(stop.tookMs).toBeLessThan(SHUTDOWN_GRACE_MS);
    expect(alive(stop.pid)).toBe(false);
    expect(stop.leftToExpire).toHaveLength(1);
    expect(stop.lines.filter((l) => /offer handling failed/.test(String(l.message)))).toEqual([]);
  }, 300_000);

  it('with the default graces and an agent that ignores SIGTERM, still exits 0 within the stop limit, leaving the claim to its lease', async () => {
    // The documented defaults: runner grace 15 s, agent kill grace 10 s, command timeout 10 s, stop limit 30 s.
    // Their sum with one hand-back try (35 s) is past the limit: the hand-back gets only what is left of it.
    const stop = await stopWhileSilent(
      'silent-stop-defaults',
      {
        GANTRY_JOB_LEASE_MS: '120000',
        // Long enough for an unanswered renewal to be sent again within it at the default command timeout.
        GANTRY_WORKTREE_LEASE_MS: '60000',
        GANTRY_RUNNER_SHUTDOWN_GRACE_MS: '15000',
        GANTRY_AGENT_KILL_GRACE_MS: '10000',
        GANTRY_RUNNER_COMMAND_TIMEOUT_MS: '10000',
      },
      { ignoreSigterm: true },
    );

    expect(stop.lines.filter((l) => l.message === 'shutdown took too long; exiting')).toEqual([]);
    expect(stop.code).toBe(0);
    expect(stop.tookMs).toBeLessThan(SHUTDOWN_GRACE_MS);
    expect(alive(stop.pid)).toBe(false);
    expect(stop.leftToExpire).toHaveLength(1);
    expect(stop.leftToExpire[0]!.stopping).toBe(true);
  }, 300_000);
});
