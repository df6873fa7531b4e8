import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { eventually, freezeProcessGroup, logRecordsOf, type RunningApp } from '@gantry/testing';
import { alive, E2eSystem, systemBehindProxy } from './e2e-system.js';

/*
 * A runner's stop ends within the process's stop limit (`GANTRY_SHUTDOWN_GRACE_MS`), whatever NATS and
 * the job service do meanwhile, and exits 0: what is still waiting at the stop's deadline (the limit
 * less a margin) is given up — the claim left to its lease, said and counted — and closing NATS takes
 * only what is left of the margin (docs/jobs.md, "Stopping a runner").
 */

/** A stop limit short enough to be overrun by one 10 s command timeout, or by one 5 s drain of a frozen NATS. */
const STOP_LIMIT_MS = 8_000;
const LEFT_TO_EXPIRE = 'the claim could not be handed back; its lease will expire';
const SETTLING_GIVEN_UP = 'the earlier run could not be settled before the stop; its claims are left to their leases';

interface Stopped {
  code: number | null;
  lines: Record<string, unknown>[];
  leftToExpire: Record<string, unknown>[];
}

/** Sends the runner SIGTERM and reads how its stop went. */
async function stop(system: E2eSystem, runnerId: string, runner: RunningApp, jobId: string): Promise<Stopped> {
  const code = await system.stopRunner(runnerId);
  const lines = logRecordsOf(runner.output());
  return { code, lines, leftToExpire: lines.filter((l) => l.jobId === jobId && l.message === LEFT_TO_EXPIRE) };
}

function expectStoppedInTime(stopped: Stopped): void {
  expect(stopped.lines.filter((l) => l.message === 'shutdown took too long; exiting')).toEqual([]);
  expect(stopped.code).toBe(0);
  expect(stopped.leftToExpire).toHaveLength(1);
  expect(stopped.leftToExpire[0]!.stopping).toBe(true);
  expect(stopped.lines.filter((l) => /offer handling failed/.test(String(l.message)))).toEqual([]);
}

/**
 * Stops a runner while it settles an earlier run: it exits 0 within `limitMs`, having given the
 * settling up at the deadline (not ended by the connection's close after it) and not tried it again.
 * Returns the line that says so.
 */
async function stopWhileSettling(system: E2eSystem, runnerId: string, runner: RunningApp, limitMs: number): Promise<Record<string, unknown>> {
  const began = Date.now();
  const code = await system.stopRunner(runnerId);
  const tookMs = Date.now() - began;
  const lines = logRecordsOf(runner.output());
  expect(lines.filter((l) => l.message === 'shutdown took too long; exiting')).toEqual([]);
  expect(code).toBe(0);
  expect(tookMs).toBeLessThan(limitMs);
  expect(lines.filter((l) => /could not settle the claims of an earlier run yet/.test(String(l.message)))).toEqual([]);
  const givenUp = lines.filter((l) => l.message === SETTLING_GIVEN_UP);
  expect(givenUp).toHaveLength(1);
  expect(String(givenUp[0]!.error)).toMatch(/given up at its deadline/);
  return givenUp[0]!;
}

describe('a runner stopped while the job service is silent and a hand-back try is in flight', () => {
  // Only the job service reaches NATS through the proxy: the runner and the worktree service stay on it.
  const { system, proxy: proxyOf } = systemBehindProxy({ jobServiceCutToo: true });

  it('gives the try up at the stop\'s deadline, not at the end of its 10 s command timeout, and exits 0', async () => {
    const proxy = proxyOf();
    const runnerId = 'runner-stop-in-flight';
    const runner = await system.startRunner(runnerId, {
      env: {
        GANTRY_SHUTDOWN_GRACE_MS: String(STOP_LIMIT_MS),
        GANTRY_RUNNER_COMMAND_TIMEOUT_MS: '10000',
        GANTRY_JOB_LEASE_MS: '60000',
        GANTRY_WORKTREE_LEASE_MS: '60000',
        GANTRY_TEST_HOLD_AT: 'runner:rollback',
      },
    });
    const record = system.recordFile('stop-in-flight');
    // The agent exits non-zero without finishing: the claim is then handed back.
    const jobId = await system.enqueue({ branch: 'feat/stop-in-flight', maxAttempts: 3, payload: { standIn: { behaviour: 'exit_nonzero', recordArgvTo: record } } });
    await eventually(() => runner.output().includes('"testHold":"runner:rollback"'), { what: 'the runner about to hand the claim back', timeoutMs: 60_000 });
    const pid = (await system.agentStarts(record))[0]!.pid;
    proxy.blackhole();
    try {
      // The hand-back goes out into the silence; the stop comes while its first try waits for its answer.
      runner.process.kill('SIGUSR2');
      const stopped = await stop(system, runnerId, runner, jobId);
      expectStoppedInTime(stopped);
      expect(alive(pid)).toBe(false);
    } finally {
      proxy.restore();
    }
    await system.cancel(jobId);
  }, 300_000);
});

describe('a runner stopped while a claim it sent waits for its answer', () => {
  const { system, proxy: proxyOf } = systemBehindProxy({ jobServiceCutToo: true });

  it('gives a claim answered only after the SIGTERM back at once (cause RUNNER): the agent is never started, the grace not waited for', async () => {
    const proxy = proxyOf();
    const runnerId = 'runner-stop-late-claim';
    const graceMs = 8_000;
    const runner = await system.startRunner(runnerId, {
      env: {
        GANTRY_SHUTDOWN_GRACE_MS: '20000',
        GANTRY_RUNNER_SHUTDOWN_GRACE_MS: String(graceMs),
        GANTRY_JOB_LEASE_MS: '60000',
        GANTRY_WORKTREE_LEASE_MS: '60000',
        GANTRY_TEST_HOLD_AT: 'runner:claim',
      },
    });
    const record = system.recordFile('stop-late-claim');
    const jobId = await system.enqueue({ branch: 'feat/stop-late-claim', maxAttempts: 3, payload: { standIn: { behaviour: 'hang', heartbeatMs: 50, recordArgvTo: record } } });
    await eventually(() => runner.output().includes('"testHold":"runner:claim"'), { what: 'the runner about to claim the offered job', timeoutMs: 60_000 });
    proxy.blackhole();
    let stopped: Promise<number | null>;
    let stopBegan: number;
    try {
      // The claim goes out into the silence; the stop comes while it waits for an answer.
      runner.process.kill('SIGUSR2');
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      stopBegan = Date.now();
      stopped = system.stopRunner(runnerId);
      await new Promise((resolve) => setTimeout(resolve, 500));
    } finally {
      // The job service answers again: the claim, asked again under its key, is answered during the stop's grace.
      proxy.restore();
    }
    const code = await stopped;
    const tookMs = Date.now() - stopBegan;
    expect(code).toBe(0);
    const events = await system.events(jobId);
    // Claimed once, during the stop, under the runner's one claim key.
    expect(events.filter((e) => e.type === 'JobClaimed')).toHaveLength(1);
    expect(await system.agentStarts(record)).toEqual([]);
    expect(tookMs).toBeLessThan(graceMs);
    expect(events.filter((e) => e.type === 'JobClaimRolledBack').map((e) => e.data)).toEqual([expect.objectContaining({ leaseToken: 1, cause: 'RUNNER' })]);
    expect(logRecordsOf(runner.output()).filter((l) => /offer handling failed/.test(String(l.message)))).toEqual([]);
    await system.cancel(jobId);
  }, 300_000);
});

describe('a runner stopped while it settles the claims of its earlier run and the job service is silent', () => {
  const { system, proxy: proxyOf } = systemBehindProxy({ jobServiceCutToo: true });

  it('gives the settling up at the stop\'s deadline, leaves the claim to its lease, says so, and exits 0 within the limit', async () => {
    const proxy = proxyOf();
    const runnerId = 'runner-stop-settling';
    const env = { GANTRY_RUNNER_COMMAND_TIMEOUT_MS: '10000', GANTRY_JOB_LEASE_MS: '60000', GANTRY_WORKTREE_LEASE_MS: '60000' };
    const earlier = await system.startRunner(runnerId, { env });
    const record = system.recordFile('stop-settling');
    const jobId = await system.enqueue({ branch: 'feat/stop-settling', maxAttempts: 3, payload: { standIn: { behaviour: 'hang', heartbeatMs: 50, recordArgvTo: record } } });
    await eventually(async () => (await system.events(jobId)).some((e) => e.type === 'ImplementationLogged'), { what: 'the agent\'s first report recorded', timeoutMs: 60_000 });
    const pid = (await system.agentStarts(record))[0]!.pid;
    // Killed outright: its claim stays held, its agent runs on.
    await system.stopRunner(runnerId, 'SIGKILL');
    expect(earlier.process.exitCode === null && earlier.process.signalCode === null).toBe(false);
    proxy.blackhole();
    try {
      const runner = await system.startRunner(runnerId, { env: { ...env, GANTRY_SHUTDOWN_GRACE_MS: String(STOP_LIMIT_MS) } });
      // Its agent stopped, the settling now asks the silent job service which claims it still holds.
      await eventually(() => runner.output().includes('stopped an agent left behind by an earlier run of this runner'), { what: 'the orphaned agent stopped', timeoutMs: 30_000 });
      await new Promise((resolve) => setTimeout(resolve, 500));
      const givenUp = await stopWhileSettling(system, runnerId, runner, STOP_LIMIT_MS);
      expect(alive(pid)).toBe(false);
      expect(givenUp.stopping).toBe(true);
    } finally {
      proxy.restore();
    }
    // Nothing gave the claim back: it is still this runner's, left to its lease.
    expect((await system.events(jobId)).map((e) => e.type)).not.toContain('JobClaimRolledBack');
    expect((await system.job(jobId)).lease?.runnerId).toBe(runnerId);
    await system.cancel(jobId);
  }, 300_000);
});

describe('a runner stopped while it waits for agents its earlier run left, which outlive their SIGKILL', () => {
  const system = new E2eSystem();
  beforeAll(() => system.start(), 60_000);
  afterAll(() => system.stop(), 60_000);

  it('gives the wait up at the stop\'s deadline, names the agents and the claims it leaves to their leases, and exits 0 within the limit', async () => {
    const runnerId = 'runner-stop-orphans';
    const env = { GANTRY_JOB_LEASE_MS: '120000', GANTRY_WORKTREE_LEASE_MS: '120000' };
    await system.startRunner(runnerId, { concurrency: 3, env });
    const jobs: { jobId: string; record: string }[] = [];
    for (const n of [1, 2, 3]) {
      const record = system.recordFile(`stop-orphans-${n}`);
      const jobId = await system.enqueue({ branch: `feat/stop-orphans-${n}`, maxAttempts: 3, payload: { standIn: { behaviour: 'hang', heartbeatMs: 50, recordArgvTo: record } } });
      jobs.push({ jobId, record });
    }
    for (const { jobId } of jobs) {
      await eventually(async () => (await system.events(jobId)).some((e) => e.type === 'ImplementationLogged'), { what: 'each agent\'s first report recorded', timeoutMs: 120_000 });
    }
    const pids = await Promise.all(jobs.map(async ({ record }) => (await system.agentStarts(record))[0]!.pid));
    // Killed outright: its claims stay held and its agents run on, in uninterruptible sleep as on a
    // hung disk, so that each outlives the SIGKILL the next start sends it for the whole kill grace.
    await system.stopRunner(runnerId, 'SIGKILL');
    const frozen = await Promise.all(pids.map((pid) => freezeProcessGroup(pid)));
    try {
      // Three agents waited for 8 s each: longer than the stop's deadline (13 s less its 1.3 s margin).
      const stopLimitMs = 13_000;
      const runner = await system.startRunner(runnerId, {
        concurrency: 3,
        env: { ...env, GANTRY_SHUTDOWN_GRACE_MS: String(stopLimitMs), GANTRY_RUNNER_SHUTDOWN_GRACE_MS: '500', GANTRY_AGENT_KILL_GRACE_MS: '8000' },
      });
      const givenUp = await stopWhileSettling(system, runnerId, runner, stopLimitMs);
      expect(givenUp.stopping).toBe(true);
      // What it left: the agent it was waiting for and those it had not reached, each with its claim.
      const agentsLeft = givenUp.agentsLeft as { pid: number; jobId: string; leaseToken: number }[];
      expect(agentsLeft.length).toBeGreaterThan(0);
      for (const agent of agentsLeft) {
        expect(pids).toContain(agent.pid);
        expect(agent).toMatchObject({ jobId: jobs[pids.indexOf(agent.pid)]!.jobId, leaseToken: 1 });
      }
      // And to whom: every claim of the earlier run, none of them given back.
      expect((givenUp.claimsLeft as { jobId: string }[]).map((c) => c.jobId).sort()).toEqual(jobs.map((j) => j.jobId).sort());
    } finally {
      for (const group of frozen) await group.thaw();
      for (const pid of pids) {
        try {
          process.kill(-pid, 'SIGKILL');
        } catch {
          // gone: the SIGKILL the settling sent it took effect once it was thawed
        }
      }
    }
    for (const { jobId } of jobs) {
      expect((await system.events(jobId)).map((e) => e.type)).not.toContain('JobClaimRolledBack');
      expect((await system.job(jobId)).lease?.runnerId).toBe(runnerId);
      await system.cancel(jobId);
    }
  }, 300_000);
});

describe('a runner sent SIGTERM while it starts', () => {
  const system = new E2eSystem();
  beforeAll(() => system.start(), 60_000);
  afterAll(() => system.stop(), 60_000);

  it('is not killed outright: from the SIGTERM on it claims nothing, its start ends, and it stops in order and exits 0', async () => {
    const runnerId = 'runner-stop-at-start';
    // Held after its start-up hooks (its intake taking offers) and before its HTTP listens.
    const runner = await system.startRunner(runnerId, { waitReady: false, env: { GANTRY_TEST_HOLD_AT: 'runtime:listen', LOG_LEVEL: 'info' } });
    await eventually(() => runner.output().includes('"testHold":"runtime:listen"'), { what: 'the start held before listening', timeoutMs: 60_000 });
    await eventually(() => logRecordsOf(runner.output()).some((l) => l.message === 'runner started'), { what: 'the runner\'s intake started' });
    runner.process.kill('SIGTERM');
    const exited = () => runner.process.exitCode !== null || runner.process.signalCode !== null;
    await eventually(() => exited() || logRecordsOf(runner.output()).some((l) => l.message === 'no longer taking offers'), { what: 'the intake stopped' });
    expect({ exitCode: runner.process.exitCode, signal: runner.process.signalCode }).toEqual({ exitCode: null, signal: null });
    // A job offered after the SIGTERM, while the start still goes on: not claimed.
    const record = system.recordFile('stop-at-start');
    const jobId = await system.enqueue({ branch: 'feat/stop-at-start', maxAttempts: 3, payload: { standIn: { behaviour: 'hang', heartbeatMs: 50, recordArgvTo: record } } });
    await new Promise((resolve) => setTimeout(resolve, 3_000));
    runner.process.kill('SIGUSR2'); // the start goes on
    await eventually(exited, { what: 'the runner exited', timeoutMs: 60_000 });
    expect({ exitCode: runner.process.exitCode, signal: runner.process.signalCode }).toEqual({ exitCode: 0, signal: null });
    system.runners.delete(runnerId);
    const lines = logRecordsOf(runner.output());
    expect(lines.find((l) => l.message === 'stopping')).toMatchObject({ signal: 'SIGTERM', starting: true });
    expect(lines.filter((l) => l.message === 'job claimed' || l.message === 'listening')).toEqual([]);
    expect((await system.events(jobId)).map((e) => e.type)).not.toContain('JobClaimed');
    expect(await system.agentStarts(record)).toEqual([]);
    await system.cancel(jobId);
  }, 300_000);
});

describe('a runner stopped while NATS is frozen, or the job service is down', () => {
  // The runner reaches NATS through the proxy: blackholed, its connection stays open and nothing is answered.
  const { system, proxy: proxyOf } = systemBehindProxy({ jobServiceCutToo: false });

  async function startWithHangingAgent(name: string): Promise<{ runnerId: string; runner: RunningApp; jobId: string; pid: number }> {
    const runnerId = `runner-${name}`;
    const runner = await system.startRunner(runnerId, { env: { GANTRY_SHUTDOWN_GRACE_MS: String(STOP_LIMIT_MS), GANTRY_NATS_URL: proxyOf().url } });
    const record = system.recordFile(name);
    const jobId = await system.enqueue({ branch: `feat/${name}`, maxAttempts: 3, payload: { standIn: { behaviour: 'hang', heartbeatMs: 50, recordArgvTo: record } } });
    await eventually(async () => (await system.events(jobId)).some((e) => e.type === 'ImplementationLogged'), { what: 'the agent\'s first report recorded', timeoutMs: 60_000 });
    return { runnerId, runner, jobId, pid: (await system.agentStarts(record))[0]!.pid };
  }

  it('with NATS frozen, closing the connection takes only what is left of the stop: it exits 0 within the limit', async () => {
    const { runnerId, runner, jobId, pid } = await startWithHangingAgent('stop-frozen-nats');
    proxyOf().blackhole();
    try {
      const stopped = await stop(system, runnerId, runner, jobId);
      expectStoppedInTime(stopped);
      expect(alive(pid)).toBe(false);
    } finally {
      proxyOf().restore();
    }
    await system.cancel(jobId);
  }, 300_000);

  it('with the job service down (NATS answers that nobody serves), an agent\'s report retried in the meantime does not hold the stop past its deadline', async () => {
    const gate = join(system.root, 'stop-no-responders.gate');
    const runnerId = 'runner-stop-no-responders';
    const runner = await system.startRunner(runnerId, { env: { GANTRY_SHUTDOWN_GRACE_MS: String(STOP_LIMIT_MS) } });
    const record = system.recordFile('stop-no-responders');
    const jobId = await system.enqueue({
      branch: 'feat/stop-no-responders',
      maxAttempts: 3,
      payload: { standIn: { behaviour: 'commit', files: { 'a.txt': 'a\n' }, waitForFile: gate, recordArgvTo: record } },
    });
    await eventually(async () => (await system.agentStarts(record)).length === 1, { what: 'the agent started', timeoutMs: 60_000 });
    await system.stopJobService();
    try {
      // The agent's first report now finds nobody serving: it is asked again for as long as that lasts.
      await writeFile(gate, '');
      await new Promise((resolve) => setTimeout(resolve, 1000));
      const stopped = await stop(system, runnerId, runner, jobId);
      expect(stopped.lines.filter((l) => l.message === 'shutdown took too long; exiting')).toEqual([]);
      expect(stopped.code).toBe(0);
      expect(stopped.leftToExpire).toHaveLength(1);
      expect(stopped.leftToExpire[0]!.stopping).toBe(true);
    } finally {
      await system.startJobService();
    }
    await system.cancel(jobId);
  }, 300_000);
});
