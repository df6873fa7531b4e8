import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { eventually } from '@gantry/testing';
import { alive, systemBehindProxy } from './e2e-system.js';

/*
 * A runner cut off from NATS while the job service and the worktree service run (docs/jobs.md,
 * "Commands under a claim", "A job service outage"): its connection goes through a proxy the test
 * cuts. The runner cannot tell this from a NATS that is down, so the time it cannot reach NATS counts
 * against its leases; the job service, which runs, expires the claim and offers the job again.
 */

describe('a runner cut off from NATS for longer than its leases, the services running', () => {
  const { system, proxy: proxyOf } = systemBehindProxy({ jobServiceCutToo: false });

  const eventsOf = async (jobId: string) => (await system.events(jobId)).map((e) => ({ type: e.type, leaseToken: e.data.leaseToken }));
  /** What a runner reported under a claim: its events but the claim's own grants and its end. */
  const reportsUnder = (leaseToken: number, events: { type: string; leaseToken: unknown }[]) =>
    events.filter((e) => e.leaseToken === leaseToken && !['JobClaimed', 'JobLeaseRenewed', 'JobLeaseExpired'].includes(e.type)).map((e) => e.type);

  it('stops its agent once the lease could have ended, pushes and reports nothing under the old claim after the heal, and the job is done once by the next claim', async () => {
    const proxy = proxyOf();
    const record = system.recordFile('partitioned');
    const gate = join(system.root, 'gate-partitioned');
    const branch = 'feat/partitioned-runner';
    await system.startRunner('runner-cut', { env: { GANTRY_NATS_URL: proxy.url } });
    const jobId = await system.enqueue({
      branch,
      maxAttempts: 2,
      payload: { standIn: { behaviour: 'commit', recordArgvTo: record, files: { 'src/partitioned.ts': 'partitioned\n' }, pauseUntilFile: gate } },
    });
    // The agent reported its start under the claim and works on (paused at the gate).
    await eventually(async () => (await eventsOf(jobId)).some((e) => e.type === 'ImplementationLogged'), { what: 'the agent\'s first report recorded', timeoutMs: 60_000 });
    const first = (await system.agentStarts(record))[0]!;
    const reportedBefore = reportsUnder(1, await eventsOf(jobId));

    proxy.cut();
    // Its renewals reach nobody: once its lease could have ended, the agent is stopped (not at the heal).
    await eventually(() => !alive(first.pid), { what: 'the cut-off runner\'s agent stopped', timeoutMs: 120_000 });
    await eventually(() => /job lease ran out before a renewal was answered; stopping the agent/.test(system.output('runner-cut')), {
      what: 'the runner saying why it stopped the agent',
      timeoutMs: 30_000,
    });
    // Meanwhile the job service expired the claim, and the next one runs the job to its end elsewhere.
    await eventually(async () => (await eventsOf(jobId)).some((e) => e.type === 'JobLeaseExpired' && e.leaseToken === 1), { what: 'the old claim expired', timeoutMs: 120_000 });
    await writeFile(gate, '');
    await system.startRunner('runner-other');
    expect(await system.terminal(jobId, 180_000)).toMatchObject({ status: 'DONE', attempt: 2 });

    // Until the heal the runner hears nothing (its one NATS address is the proxy's, and a lone server
    // advertises no other): whatever the job service answered it came after this moment.
    const healedAt = Date.now();
    proxy.restore();
    // Back on NATS, the runner ends its run: it says the claim is lost and reports nothing more under it.
    await eventually(() => /job lease lost; reporting nothing more/.test(system.output('runner-cut')), { what: 'the cut-off runner ending its run', timeoutMs: 120_000 });
    // It offered the claim back under its token first, and the job service refused: the claim had moved on.
    const refused = system.output('runner-cut').split('\n').find((line) => /"code":"STALE_FENCE".*"message":"the lost claim was not handed back"/.test(line));
    expect(refused).toBeDefined();
    expect(Date.parse((JSON.parse(refused!) as { time: string }).time)).toBeGreaterThanOrEqual(healedAt);
    await eventually(async () => (await system.health('runner-cut')).status === 200, { what: 'the cut-off runner back on NATS', timeoutMs: 120_000 });
    await system.leasesReleased(jobId, 120_000);

    const events = await eventsOf(jobId);
    // Under the old claim: what the runner reported before the cut, nothing after it.
    expect(reportsUnder(1, events)).toEqual(reportedBefore);
    expect(events.filter((e) => e.leaseToken === 1 && ['JobLeaseExpired', 'JobClaimRolledBack'].includes(e.type))).toEqual([{ type: 'JobLeaseExpired', leaseToken: 1 }]);
    expect(events.filter((e) => e.type === 'JobFinished')).toEqual([{ type: 'JobFinished', leaseToken: 2 }]);
    expect(events.filter((e) => e.type === 'JobPushReported')).toEqual([{ type: 'JobPushReported', leaseToken: 2 }]);
    // one push to the branch, by the next claim; the agent started once per claim
    expect((await system.origin.pushes()).filter((p) => p.ref === `refs/heads/${branch}`)).toHaveLength(1);
    expect(await system.agentStarts(record)).toHaveLength(2);
  }, 600_000);
});

/*
 * NATS lost by the runner and by the job service alike (one proxy for both; the worktree service stays
 * on NATS): the runner counts the time against its lease and stops its agent, while the job service,
 * whose own bus was down, resumes the claim when the bus is back (docs/jobs.md, "A job service outage").
 * The claim would then sit with no agent until it expired, spending an attempt.
 */
describe('a runner and its job service cut off from NATS together for longer than the lease', () => {
  const { system, proxy: proxyOf } = systemBehindProxy({ jobServiceCutToo: true });

  it('hands the claim it stopped working on back after the heal, fenced: no attempt spent, the job done on its first attempt', async () => {
    const proxy = proxyOf();
    const record = system.recordFile('cut-together');
    const gate = join(system.root, 'gate-cut-together');
    const branch = 'feat/cut-together';
    // A worktree lease longer than the job's: the job lease is the one this case loses.
    await system.startRunner('runner-cut-together', { env: { GANTRY_NATS_URL: proxy.url, GANTRY_WORKTREE_LEASE_MS: '30000' } });
    const jobId = await system.enqueue({
      branch,
      maxAttempts: 2,
      payload: { standIn: { behaviour: 'commit', recordArgvTo: record, files: { 'src/together.ts': 'together\n' }, pauseUntilFile: gate } },
    });
    const events = async () => (await system.events(jobId)).map((e) => ({ type: e.type, leaseToken: e.data.leaseToken, cause: e.data.cause }));
    await eventually(async () => (await events()).some((e) => e.type === 'ImplementationLogged'), { what: 'the agent\'s first report recorded', timeoutMs: 60_000 });
    const first = (await system.agentStarts(record))[0]!;

    proxy.cut();
    await eventually(() => !alive(first.pid), { what: 'the cut-off runner\'s agent stopped', timeoutMs: 120_000 });
    await eventually(() => /job lease ran out before a renewal was answered; stopping the agent/.test(system.output('runner-cut-together')), {
      what: 'the runner saying why it stopped the agent',
      timeoutMs: 30_000,
    });
    await writeFile(gate, '');
    proxy.restore();

    // The job service resumed the claim; the runner, whose agent is gone, gives it back under its token.
    const handedBack = await eventually(async () => (await events()).find((e) => e.type === 'JobClaimRolledBack' && e.leaseToken === 1) ?? null, {
      what: 'the claim handed back after the heal',
      timeoutMs: 120_000,
    }).catch(async (error: Error) => {
      throw new Error(`${error.message}; ${await system.describeJob(jobId)}\nrunner's last output:\n${system.output('runner-cut-together').slice(-4000)}`);
    });
    expect(handedBack).toMatchObject({ cause: 'DEPENDENCY' });
    expect(await system.terminal(jobId, 180_000)).toMatchObject({ status: 'DONE', attempt: 1 });
    const all = await events();
    expect(all.filter((e) => e.type === 'JobLeaseExpired')).toEqual([]);
    expect(all.filter((e) => e.type === 'JobFinished')).toEqual([{ type: 'JobFinished', leaseToken: 2, cause: undefined }]);
    await system.leasesReleased(jobId, 120_000);
  }, 600_000);
});

/*
 * The worktree lease lost first during a runner's partition, its claim still holding by the runner's
 * count (docs/jobs.md, "Leases and liveness"): the claim's rollback (DEPENDENCY) cannot be answered
 * before the heal, and meanwhile the claim's own renewal, unanswered, gives the claim up too. The run
 * ends as for a claim given up: its hand-back after the heal, refused once the claim moved on. A
 * worktree lease shorter than the job's makes the race of two leases of one length go the worktree's
 * way every time.
 */
describe('a runner cut off from NATS that loses its worktree lease before its job lease', () => {
  const { system, proxy: proxyOf } = systemBehindProxy({ jobServiceCutToo: false });

  it('ends the run cleanly: the claim offered back under its fence after the heal, refused as moved on, nothing reported under it', async () => {
    const proxy = proxyOf();
    const record = system.recordFile('worktree-first');
    const branch = 'feat/worktree-lost-first';
    // 8 s holds 1 s + 2 × 3 s + 250 ms (docs/jobs.md); the job lease, 20 s, outlasts it by far. The first
    // agent ignores SIGTERM: the claim's hand-back is asked only once it is gone, a kill grace later.
    await system.startRunner('runner-worktree-first', {
      env: { GANTRY_NATS_URL: proxy.url, GANTRY_WORKTREE_LEASE_MS: '8000', GANTRY_JOB_LEASE_MS: '20000', GANTRY_AGENT_KILL_GRACE_MS: '2900' },
    });
    const jobId = await system.enqueue({
      branch,
      maxAttempts: 2,
      payload: {
        standIn: {
          behaviour: 'commit',
          recordArgvTo: record,
          files: { 'src/worktree-first.ts': 'first\n' },
          byAttempt: { '1': { behaviour: 'hang', ignoreSigterm: true, logFirst: true } },
        },
      },
    });
    const events = async () => (await system.events(jobId)).map((e) => ({ type: e.type, leaseToken: e.data.leaseToken }));
    await eventually(async () => (await events()).some((e) => e.type === 'ImplementationLogged'), { what: 'the agent\'s first report recorded', timeoutMs: 60_000 });
    const first = (await system.agentStarts(record))[0]!;
    const output = () => system.output('runner-worktree-first');

    proxy.cut();
    await eventually(() => /worktree lease lost; stopping the agent/.test(output()), { what: 'the runner saying it lost the worktree lease', timeoutMs: 120_000 });
    await eventually(() => !alive(first.pid), { what: 'the cut-off runner\'s agent stopped', timeoutMs: 30_000 });
    // The job service, which runs, expires the claim the runner no longer renews; the heal comes after.
    await eventually(async () => (await events()).some((e) => e.type === 'JobLeaseExpired' && e.leaseToken === 1), { what: 'the old claim expired', timeoutMs: 120_000 });
    // The partition outlasts the claim's lease by more than two tries of a command (2 × 3 s and their
    // pause): whatever the runner asks under the claim, it is asked after the lease could have ended.
    await delay(10_000);
    const healedAt = Date.now();
    proxy.restore();

    await eventually(() => /job lease lost; reporting nothing more/.test(output()), { what: 'the cut-off runner ending its run', timeoutMs: 120_000 }).catch((error: Error) => {
      throw new Error(`${error.message}\nrunner's last output:\n${output().slice(-4000)}`);
    });
    const refused = output().split('\n').find((line) => /"code":"STALE_FENCE".*"message":"the lost claim was not handed back"/.test(line));
    expect(refused).toBeDefined();
    expect(Date.parse((JSON.parse(refused!) as { time: string }).time)).toBeGreaterThanOrEqual(healedAt);
    expect(output()).not.toMatch(/failed unexpectedly/);
    await eventually(async () => (await system.health('runner-worktree-first')).status === 200, { what: 'the cut-off runner back on NATS', timeoutMs: 120_000 });

    // The job is done by the next claim (this runner's own, back on NATS).
    expect(await system.terminal(jobId, 180_000)).toMatchObject({ status: 'DONE', attempt: 2 });
    const all = await events();
    expect(all.filter((e) => e.leaseToken === 1 && ['JobLeaseExpired', 'JobClaimRolledBack', 'JobFinished', 'JobPushReported'].includes(e.type))).toEqual([
      { type: 'JobLeaseExpired', leaseToken: 1 },
    ]);
    expect(all.filter((e) => e.type === 'JobFinished')).toEqual([{ type: 'JobFinished', leaseToken: 2 }]);
    await system.leasesReleased(jobId, 120_000);
  }, 600_000);
});
