import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { eventually } from '@gantry/testing';
import { alive, systemBehindProxy } from './e2e-system.js';

/*
 * A claim given back because its worktree was lost (DEPENDENCY), sent between two renewals of the job
 * lease, to a job service that then goes silent (its bus blackholed: the hand-back and its answer are
 * lost): the runner asks again under the claim's key, and when no answer comes it says the claim is
 * left to its lease and ends the run as one it lost — it does not fail the offer's handling — and the
 * job goes on to its next claim once the job service answers again (docs/jobs.md, "Leases and liveness").
 */

/** The JSON lines of a process's output. */
function logLines(output: string): Record<string, unknown>[] {
  return output.split('\n').flatMap((line) => {
    try {
      const parsed: unknown = JSON.parse(line);
      return typeof parsed === 'object' && parsed !== null ? [parsed as Record<string, unknown>] : [];
    } catch {
      return [];
    }
  });
}

describe('a worktree-loss hand-back the job service never answers', () => {
  // Only the job service reaches NATS through the proxy: the runner and the worktree service stay on it.
  const { system, proxy: proxyOf } = systemBehindProxy({ jobServiceCutToo: true });

  it('is asked again, then left to the lease with a clear log: no "offer handling failed", the run cleaned up, the job claimed again', async () => {
    const proxy = proxyOf();
    const runnerId = 'runner-silent-hand-back';
    const runner = await system.startRunner(runnerId, { env: { GANTRY_TEST_HOLD_AT: 'runner:rollback' } });
    const record = system.recordFile('silent-hand-back');
    const jobId = await system.enqueue({
      branch: 'feat/silent-hand-back',
      maxAttempts: 3,
      payload: { standIn: { behaviour: 'hang', heartbeatMs: 50, recordArgvTo: record } },
    });
    await eventually(async () => (await system.agentStarts(record)).length === 1, { what: 'the agent working', timeoutMs: 60_000 });
    const pid = (await system.agentStarts(record))[0]!.pid;

    // The worktree service frozen: no worktree renewal is answered, the lease is lost and the agent stopped.
    system.worktreeService.process.kill('SIGSTOP');
    try {
      await eventually(() => runner.output().includes('"testHold":"runner:rollback"'), { what: 'the runner about to give the claim back', timeoutMs: 60_000 });
      expect(alive(pid)).toBe(false);
    } finally {
      system.worktreeService.process.kill('SIGCONT');
    }
    // The job service goes silent, then the hand-back is sent: it and every repeat of it are lost.
    proxy.blackhole();
    runner.process.kill('SIGUSR2');
    await eventually(() => /the claim could not be handed back; its lease will expire|offer handling failed/.test(runner.output()), {
      what: 'the runner leaving the claim to its lease',
      timeoutMs: 120_000,
    });
    // The run's end is handled, not an error out of the offer's handling.
    expect(logLines(runner.output()).filter((l) => /offer handling failed/.test(String(l.message)))).toEqual([]);
    proxy.restore();

    // The job service answers again: the claim ends (expired, or handed back), and the job is claimed again.
    await eventually(async () => (await system.events(jobId)).some((e) => e.type === 'JobClaimed' && e.data.leaseToken === 2), {
      what: 'the job claimed again',
      timeoutMs: 120_000,
    });
    const ends = (await system.events(jobId)).filter((e) => e.data.leaseToken === 1 && ['JobLeaseExpired', 'JobClaimRolledBack'].includes(e.type));
    expect(ends).toHaveLength(1);
    expect(runner.output()).not.toMatch(/offer handling failed/);
    expect(runner.output()).toMatch(/the claim could not be handed back; its lease will expire/);
    expect(await (await fetch(`${runner.url}/metrics`)).text()).toMatch(/^gantry_runner_claims_left_to_expire_total 1$/m);
    // The run ended as one whose claim was lost, not with an error.
    expect(logLines(runner.output()).filter((l) => l.jobId === jobId && l.attempt === 1 && ['job lost', 'job handed back'].includes(l.message as string))).toHaveLength(1);
    // The first claim's scratch folder (its payload, its run record) is gone with its run.
    const scratch = await readdir(join(system.root, 'scratch', runnerId)).catch(() => [] as string[]);
    expect(scratch.filter((name) => name === `${jobId}-1`)).toEqual([]);
    await system.cancel(jobId);
  }, 600_000);
});
