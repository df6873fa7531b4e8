import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { jetstreamManager } from '@nats-io/jetstream';
import { acquireWorktree, commandSubject, dispatchStreamName } from '@gantry/contracts';
import { connectTestNats, eventually, freezeProcessGroup, logRecordsOf } from '@gantry/testing';
import { alive, E2eSystem } from './e2e-system.js';

/*
 * Jobs under faults that take processes away (docs/jobs.md): a cancel while the agent runs, the
 * worktree service and the job service killed and started again, a runner killed with SIGKILL and
 * started again under its id. Real processes, a real origin with a push log; the kills are SIGKILL
 * at the point each case names.
 */

let counter = 0;
const branch = (label: string) => `feat/${label}-${++counter}`;

function flagsOf(argv: string[]): Record<string, string> {
  const flags: Record<string, string> = {};
  for (let i = 0; i < argv.length; i += 2) flags[argv[i]!] = argv[i + 1]!;
  return flags;
}

/** The lease token an agent ran under: its scratch directory is `<jobId>-<token>`. */
function leaseTokenOf(argv: string[]): number {
  return Number(/job-[0-9a-f-]{36}-(\d+)\/payload\.json/.exec(flagsOf(argv)['-p']!)![1]);
}


/** A runner that hears of a cancel only through the job events: it renews its leases every 30 s. */
const SLOW_RENEWAL = { GANTRY_LEASE_RENEW_MS: '30000', GANTRY_JOB_LEASE_MS: '90000', GANTRY_WORKTREE_LEASE_MS: '90000' };

/**
 * A runner killed and started again under its id settles its earlier claims before their leases run out: leases long
 * enough for that however slowly the machine starts it again (with 10 s ones the claim could expire first and spend
 * the attempt). For cases that do not wait for a lease to run out.
 */
const LONG_LEASES = { GANTRY_JOB_LEASE_MS: '120000', GANTRY_WORKTREE_LEASE_MS: '120000' };

describe('jobs under kills: job service, worktree service, runners, a real origin', () => {
  const system = new E2eSystem();

  beforeAll(() => system.start(), 60_000);
  afterAll(() => system.stop(), 60_000);
  // a case that failed half-way leaves no runner behind to take the next case's jobs
  afterEach(async () => {
    for (const id of [...system.runners.keys()]) await system.stopRunner(id, 'SIGKILL');
    await system.cancelOpenJobs();
  }, 120_000);

  function code(label: string, standIn: Record<string, unknown>, extra: Record<string, unknown> = {}) {
    const record = system.recordFile(label);
    return { record, branch: branch(label), payload: { standIn: { recordArgvTo: record, ...standIn }, ...extra } };
  }

  async function lines(record: string): Promise<Record<string, unknown>[]> {
    return (await readFile(record, 'utf8').catch(() => ''))
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l));
  }

  /** A runner, and a job whose agent has started and waits at a gate (a file) before its first MCP call. */
  async function gatedJob(runnerId: string, label: string, files: Record<string, string>) {
    await system.startRunner(runnerId);
    const gate = join(system.root, `gate-${label}`);
    const run = code(label, { behaviour: 'commit', waitForFile: gate, files });
    const jobId = await system.enqueue({ branch: run.branch, payload: run.payload, maxAttempts: 1 });
    await eventually(async () => (await system.agentStarts(run.record)).length === 1, { what: 'the agent started', timeoutMs: 30_000 });
    return { ...run, jobId, openGate: () => writeFile(gate, '') };
  }

  const eventsOf = async (jobId: string, type: string) => (await system.events(jobId)).filter((e) => e.type === type).map((e) => e.data);
  const pushesTo = async (name: string) => (await system.origin.pushes()).filter((p) => p.ref === `refs/heads/${name}`);

  it('a cancel mid-run stops the agent at once (no lease renewal needed), reports the stop, pushes nothing, and the next job on the branch never overlaps it', async () => {
    await Promise.all([system.startRunner('runner-a', { env: SLOW_RENEWAL }), system.startRunner('runner-b', { env: SLOW_RENEWAL })]);
    const shared = branch('cancelled-then-next');
    const first = code('cancelled-first', { behaviour: 'hang', ignoreSigterm: true, heartbeatMs: 50 });
    const firstId = await system.enqueue({ branch: shared, payload: first.payload });
    // hanging (past its SIGTERM handler), not merely started
    await eventually(async () => (await lines(first.record)).some((l) => 'beat' in l), { what: 'the first agent hanging', timeoutMs: 30_000 });
    const next = code('cancelled-next', { behaviour: 'commit', files: { 'src/next.ts': 'next\n' } });
    const nextId = await system.enqueue({ branch: shared, payload: next.payload });
    // the next job is claimed by the other runner and waits for the worktree
    await eventually(async () => (await system.job(nextId)).status === 'CLAIMED', { what: 'the next job claimed', timeoutMs: 30_000 });
    await system.cancel(firstId);
    const pid = (await system.agentStarts(first.record))[0]!.pid;
    await eventually(() => !alive(pid), { what: 'the cancelled agent gone', timeoutMs: 20_000 });

    // the runner reports the stop once the agent is gone
    const cancelled = await eventually(async () => {
      const job = await system.job(firstId);
      return job.cancelledRun?.stoppedAt ? job : null;
    }, { what: 'the stop reported', timeoutMs: 20_000 });
    expect(cancelled).toMatchObject({ status: 'CANCELLED', taskStatus: 'TO_DO', pushedAt: null, cancelledRun: { runnerId: expect.any(String), leaseToken: 1, stoppedAt: expect.any(String) } });
    // it was the JobCancelled event that stopped it: the lease (renewed every 30 s) was never renewed
    expect(await eventsOf(firstId, 'JobLeaseRenewed')).toEqual([]);
    const done = await system.terminal(nextId, 60_000);
    expect(done).toMatchObject({ status: 'DONE', attempt: 1, headSha: await system.origin.sha(shared) });
    // the next agent started only after the last sign of life of the cancelled one: the worktree was not
    // handed on while a process of its holder could still write to it
    const beats = (await lines(first.record)).filter((l) => 'beat' in l).map((l) => Date.parse(l.at as string));
    const nextStart = Date.parse((await system.agentStarts(next.record))[0]!.at);
    expect(beats.length).toBeGreaterThan(0);
    expect(nextStart).toBeGreaterThan(Math.max(...beats));
    // one push to the branch, the next job's
    expect(await pushesTo(shared)).toEqual([expect.objectContaining({ newSha: done.headSha })]);
    await system.leasesReleased();
    await Promise.all([system.stopRunner('runner-a'), system.stopRunner('runner-b')]);
  }, 120_000);

  it('the worktree service killed and started again while an acquire waits: the swallowed acquire is asked again under its key, the job finishes on its first attempt', async () => {
    await system.startRunner('runner-w', { env: { GANTRY_RUNNER_COMMAND_TIMEOUT_MS: '2000' } });
    await system.stopWorktreeService('SIGKILL');
    // Until the worktree service is back, the acquires go to a subscriber that never answers: each try
    // is swallowed, as by a worktree service that died holding it.
    const nc = await connectTestNats();
    const tries: string[] = [];
    const swallow = nc.subscribe(commandSubject(system.naming, acquireWorktree.context, acquireWorktree.name), {
      callback: (_error, msg) => void tries.push((msg.json() as { idempotencyKey: string }).idempotencyKey),
    });
    const run = code('worktree-restart', { behaviour: 'commit', files: { 'src/restart.ts': 'restart\n' } });
    const jobId = await system.enqueue({ branch: run.branch, payload: run.payload, maxAttempts: 1 });
    try {
      await eventually(() => tries.length >= 3, { what: 'the acquire asked three times', timeoutMs: 60_000 });
    } finally {
      swallow.unsubscribe();
      await nc.close();
    }
    // the same request each time, under one key
    expect(new Set(tries).size).toBe(1);
    expect((await system.job(jobId)).status).toBe('CLAIMED');
    await system.startWorktreeService();
    const job = await system.terminal(jobId, 60_000);
    expect(job).toMatchObject({ status: 'DONE', attempt: 1, headSha: await system.origin.sha(run.branch) });
    expect(await eventsOf(jobId, 'JobClaimRolledBack')).toEqual([]);
    expect(await system.agentStarts(run.record)).toHaveLength(1);
    await system.stopRunner('runner-w');
  }, 120_000);

  it('the job service killed while the agent works, down for longer than the claim\'s lease: the agent\'s story-log call waits for it under its key, the lease is resumed at its start, DONE on the first attempt', async () => {
    const run = await gatedJob('runner-j', 'job-service-restart', { 'src/waited.ts': 'waited\n' });
    const { jobId } = run;
    await system.stopJobService('SIGKILL');
    // the agent's first story-log call is made while no job service runs
    await run.openGate();
    await eventually(async () => (await lines(run.record)).some((l) => l.calling === 'log_implementation'), { what: 'log_implementation called', timeoutMs: 30_000 });
    // down until the claim's lease, as last granted before the kill, has run out
    const expiries = (await system.events(jobId)).map((e) => e.data.leaseExpiresAt).filter((at): at is string => typeof at === 'string');
    const expiry = Math.max(...expiries.map((at) => Date.parse(at)));
    await eventually(() => Date.now() > expiry + 1000, { what: 'the lease expiry passed', timeoutMs: 30_000 });
    await system.startJobService();
    const job = await system.terminal(jobId, 60_000);
    expect(job).toMatchObject({ status: 'DONE', attempt: 1, headSha: await system.origin.sha(run.branch), storyLog: { implementationEntries: 1, commitEntries: 1, testResultEntries: 1 } });
    expect(await eventsOf(jobId, 'JobLeaseRenewed')).toContainEqual(expect.objectContaining({ leaseToken: 1, resumedAtStart: true }));
    expect(await eventsOf(jobId, 'JobClaimRolledBack')).toEqual([]);
    expect(await eventsOf(jobId, 'JobLeaseExpired')).toEqual([]);
    // pushed once, with the head the job recorded (a failure here says which of the three is missing)
    expect({ headSha: job.headSha, pushed: job.pushedAt !== null, pushes: (await pushesTo(run.branch)).map((p) => p.newSha) }).toEqual({
      headSha: expect.stringMatching(/^[0-9a-f]{40}$/),
      pushed: true,
      pushes: [job.headSha],
    });
    await system.stopRunner('runner-j');
  }, 120_000);

  it('the worktree service killed while the agent works, down for longer than the worktree lease: the lease is resumed at its start, never expired or handed on, DONE on the first attempt', async () => {
    const run = await gatedJob('runner-v', 'worktree-service-down', { 'src/kept.ts': 'kept\n' });
    const { jobId } = run;
    await system.stopWorktreeService('SIGKILL');
    // down until the worktree lease, as last renewed before the kill, has run out
    const [lease] = await system.worktreeLeaseRows(jobId);
    expect(lease).toMatchObject({ status: 'ready' });
    await eventually(() => Date.now() > lease!.expires_at!.getTime() + 1000, { what: 'the worktree lease expiry passed', timeoutMs: 30_000 });
    await system.startWorktreeService();
    await run.openGate();
    const job = await system.terminal(jobId, 60_000);
    expect(job).toMatchObject({ status: 'DONE', attempt: 1, headSha: await system.origin.sha(run.branch) });
    const types = (await system.worktreeLeaseEvents(lease!.lease_id)).map((e) => e.type);
    expect(types).not.toContain('WorktreeLeaseExpired');
    expect((await system.worktreeLeaseEvents(lease!.lease_id)).filter((e) => e.data.resumedAtStart === true)).toHaveLength(1);
    // one lease for the job, ended by the job's finish, not taken from under the agent
    const rows = await eventually(async () => {
      const found = await system.worktreeLeaseRows(jobId);
      return found.every((r) => r.status === 'released') ? found : null;
    }, { what: 'the lease released', timeoutMs: 30_000 });
    expect(rows).toEqual([expect.objectContaining({ lease_id: lease!.lease_id, status: 'released', release_reason: 'job_terminal' })]);
    expect(await pushesTo(run.branch)).toHaveLength(1);
    await system.stopRunner('runner-v');
  }, 120_000);

  it('a push verified and reported, then the job service and the runner die before the finish: the next claim finishes it — DONE, pushed once, the agent run once', async () => {
    await system.stopJobService('SIGKILL');
    await system.startJobService({ GANTRY_TEST_CRASH_AFTER_COMMIT: 'report_push' });
    // A lease long enough for the runner's restart to hand the claim back before it runs out, the job
    // service having resumed it at its own start: at a load of 11, restarting both took more than 10 s.
    await system.startRunner('runner-p', { env: { GANTRY_JOB_LEASE_MS: '30000' } });
    const run = code('pushed-then-lost', { behaviour: 'commit', files: { 'src/pushed.ts': 'pushed\n' } });
    const jobId = await system.enqueue({ branch: run.branch, payload: run.payload, maxAttempts: 1 });
    // the job service dies right after committing the push report, before answering it
    await eventually(async () => (await pushesTo(run.branch)).length === 1, { what: 'the branch pushed', timeoutMs: 30_000 });
    await eventually(() => system.jobService.process.exitCode !== null || system.jobService.process.signalCode !== null, { what: 'the job service gone', timeoutMs: 30_000 });
    expect(await eventsOf(jobId, 'JobPushReported')).toHaveLength(1);
    // the runner, still waiting to finish, dies too: its finish never arrives
    await system.stopRunner('runner-p', 'SIGKILL');
    await system.startJobService();
    // started again under its id, it gives its old claim back; the next claim finishes the push
    await system.startRunner('runner-p');
    const job = await system.terminal(jobId, 60_000);
    expect(job).toMatchObject({ status: 'DONE', attempt: 1, headSha: await system.origin.sha(run.branch) });
    expect(job.pushedAt).not.toBeNull();
    expect(await pushesTo(run.branch)).toHaveLength(1);
    expect(await system.agentStarts(run.record)).toHaveLength(1);
    expect(await eventsOf(jobId, 'JobLeaseExpired')).toEqual([]);
    expect(await eventsOf(jobId, 'JobClaimRolledBack')).toEqual([expect.objectContaining({ leaseToken: 1, cause: 'RUNNER', outcome: 'REQUEUED', nextAttempt: 1 })]);
    expect((await eventsOf(jobId, 'JobStarted')).map((s) => s.adoptedPushOf ?? null)).toEqual([null, 1]);
    await system.stopRunner('runner-p');
  }, 120_000);

  it('a runner killed right after its push, before it reported it: started again under its id it reports the push it finds on the origin, and the next claim finishes it — DONE, pushed once, the agent run once', async () => {
    await system.startRunner('runner-u', { env: { ...LONG_LEASES, GANTRY_TEST_CRASH_AT: 'runner:after-push' } });
    const run = code('pushed-unreported', { behaviour: 'commit', files: { 'src/unreported.ts': 'unreported\n' } });
    const jobId = await system.enqueue({ branch: run.branch, payload: run.payload, maxAttempts: 1 });
    // the runner dies right after the origin took its push, before it reported it
    await eventually(async () => (await pushesTo(run.branch)).length === 1, { what: 'the branch pushed', timeoutMs: 120_000 });
    const first = system.runners.get('runner-u')!.process;
    await eventually(() => first.exitCode !== null || first.signalCode !== null, { what: 'the runner gone', timeoutMs: 60_000 });
    expect(await eventsOf(jobId, 'JobPushReported')).toEqual([]);
    const head = await system.origin.sha(run.branch);
    await system.stopRunner('runner-u', 'SIGKILL');
    // started again under its id (no crash point now), it settles the claim of its earlier run
    await system.startRunner('runner-u', { env: LONG_LEASES });
    const job = await system.terminal(jobId, 180_000);
    expect(job).toMatchObject({ status: 'DONE', attempt: 1, headSha: head });
    expect(job.pushedAt).not.toBeNull();
    expect(await pushesTo(run.branch)).toHaveLength(1);
    expect(await system.agentStarts(run.record)).toHaveLength(1);
    expect(await eventsOf(jobId, 'JobPushReported')).toEqual([expect.objectContaining({ leaseToken: 1, headSha: head })]);
    expect(await eventsOf(jobId, 'JobClaimRolledBack')).toEqual([expect.objectContaining({ leaseToken: 1, cause: 'RUNNER', outcome: 'REQUEUED', nextAttempt: 1 })]);
    expect((await eventsOf(jobId, 'JobStarted')).map((s) => s.adoptedPushOf ?? null)).toEqual([null, 1]);
    await system.stopRunner('runner-u');
  }, 600_000);

  it('a runner killed right after its push and never started again: another runner that claims the job finds the push on the origin and finishes it — DONE, pushed once, the agent run once', async () => {
    // 10 s leases (the defaults here): the dead runner's claim and its worktree lease run out
    await system.startRunner('runner-x', { env: { GANTRY_TEST_CRASH_AT: 'runner:after-push' } });
    const run = code('pushed-then-gone', { behaviour: 'commit', files: { 'src/gone.ts': 'gone\n' } });
    const jobId = await system.enqueue({ branch: run.branch, payload: run.payload, maxAttempts: 2 });
    await eventually(async () => (await pushesTo(run.branch)).length === 1, { what: 'the branch pushed', timeoutMs: 120_000 });
    const first = system.runners.get('runner-x')!.process;
    await eventually(() => first.exitCode !== null || first.signalCode !== null, { what: 'the runner gone', timeoutMs: 60_000 });
    await system.stopRunner('runner-x', 'SIGKILL');
    const head = await system.origin.sha(run.branch);
    expect(await eventsOf(jobId, 'JobPushReported')).toEqual([]);
    await system.startRunner('runner-y');
    const job = await system.terminal(jobId, 180_000);
    expect(job).toMatchObject({ status: 'DONE', attempt: 2, headSha: head });
    expect(job.pushedAt).not.toBeNull();
    expect(await pushesTo(run.branch)).toHaveLength(1);
    expect(await system.agentStarts(run.record)).toHaveLength(1);
    expect(await eventsOf(jobId, 'JobLeaseExpired')).toEqual([expect.objectContaining({ leaseToken: 1 })]);
    expect((await eventsOf(jobId, 'JobStarted')).map((s) => s.adoptedRunOf ?? null)).toEqual([null, 1]);
    await system.stopRunner('runner-y');
  }, 600_000);

  it('a runner killed right after it started the agent, before it recorded the agent\'s pid: started again under its id it finds and stops that agent all the same before it gives the worktree back', async () => {
    await system.startRunner('runner-w', { env: { ...LONG_LEASES, GANTRY_TEST_CRASH_AT: 'runner:agent-started' } });
    const gate = join(system.root, 'gate-unrecorded-agent');
    const run = code('unrecorded-agent', { behaviour: 'commit', waitForFile: gate, files: { 'src/unrecorded.ts': 'unrecorded\n' } });
    const jobId = await system.enqueue({ branch: run.branch, payload: run.payload });
    // the runner dies as soon as the agent is spawned; the agent waits at its gate
    const first = system.runners.get('runner-w')!.process;
    await eventually(() => first.exitCode !== null || first.signalCode !== null, { what: 'the runner gone', timeoutMs: 120_000 });
    await eventually(async () => (await system.agentStarts(run.record)).length === 1, { what: 'the agent started', timeoutMs: 60_000 });
    const orphan = (await system.agentStarts(run.record))[0]!.pid;
    expect(alive(orphan)).toBe(true);
    await system.stopRunner('runner-w', 'SIGKILL');
    await system.startRunner('runner-w', { env: LONG_LEASES });
    const rolledBack = await eventually(async () => (await eventsOf(jobId, 'JobClaimRolledBack'))[0] ?? null, { what: 'the claim given back', timeoutMs: 120_000 });
    expect(rolledBack).toMatchObject({ leaseToken: 1, cause: 'RUNNER', outcome: 'REQUEUED', nextAttempt: 1 });
    // gone before its claim was given back, and with it its worktree
    expect(alive(orphan)).toBe(false);
    await writeFile(gate, '');
    const job = await system.terminal(jobId, 180_000);
    expect(job).toMatchObject({ status: 'DONE', attempt: 1 });
    expect((await system.agentStarts(run.record)).map((s) => leaseTokenOf(s.argv))).toEqual([1, 2]);
    expect(await pushesTo(run.branch)).toHaveLength(1);
    await system.stopRunner('runner-w');
  }, 600_000);

  it('a claim written and its reply lost (the job service died right after): the runner asks again under its key until it is answered and runs the job it holds — another runner handed the offer is refused, no lease expires, DONE on the first attempt', async () => {
    await system.stopJobService('SIGKILL');
    await system.startJobService({ GANTRY_TEST_CRASH_AFTER_COMMIT: 'claim_job' });
    // An offer handed back after a failed claim comes again after the backoff's pause (3 s): after the freeze below.
    const env = { GANTRY_RUNNER_COMMAND_TIMEOUT_MS: '500', GANTRY_RUNNER_BACKOFF_INITIAL_MS: '3000', GANTRY_OFFER_ACK_WAIT_MS: '3000', GANTRY_JOB_LEASE_MS: '30000' };
    await system.startRunner('runner-lost-reply', { env });
    const run = code('claim-reply-lost', { behaviour: 'commit', files: { 'src/claimed.ts': 'claimed\n' } });
    const jobId = await system.enqueue({ branch: run.branch, payload: run.payload, maxAttempts: 1 });
    // the job service dies right after committing the claim, before answering it
    await eventually(() => system.jobService.process.exitCode !== null || system.jobService.process.signalCode !== null, { what: 'the job service gone', timeoutMs: 30_000 });
    expect(await eventsOf(jobId, 'JobClaimed')).toHaveLength(1);
    await eventually(
      () => /claim failed; the offer goes back|the claim may have been written/.test(system.output('runner-lost-reply')),
      { what: 'the claim unanswered for three command timeouts', timeoutMs: 30_000 },
    );
    // Frozen, the first runner takes no offer: whatever it did with this one, the next runner is handed it
    // (after the pause it was handed back for, or after the ack wait of an offer it holds).
    const first = system.runners.get('runner-lost-reply')!;
    first.process.kill('SIGSTOP');
    try {
      // (its drop of the offer is logged at info)
      await Promise.all([system.startJobService(), system.startRunner('runner-next', { env: { LOG_LEVEL: 'info' } })]);
      await eventually(
        () => /offer dropped: the claim was refused/.test(system.output('runner-next')),
        { what: 'the next runner refused the claimed job', timeoutMs: 30_000 },
      );
    } finally {
      first.process.kill('SIGCONT');
    }
    // The first runner holds the claim: it learns so and runs the job, long before its 30 s lease would run out.
    const job = await system.terminal(jobId, 60_000);
    expect(job).toMatchObject({ status: 'DONE', attempt: 1, headSha: await system.origin.sha(run.branch) });
    expect(await eventsOf(jobId, 'JobLeaseExpired')).toEqual([]);
    expect(await eventsOf(jobId, 'JobClaimed')).toHaveLength(1);
    expect(await system.agentStarts(run.record)).toHaveLength(1);
    await Promise.all([system.stopRunner('runner-lost-reply'), system.stopRunner('runner-next')]);
  }, 150_000);

  it('a runner killed with SIGKILL and started again under its id settles its claims at once: the running job given back (no attempt spent), the cancelled one reported stopped, both worktrees released, no old offer run again', async () => {
    const env = { ...SLOW_RENEWAL, GANTRY_OFFER_ACK_WAIT_MS: '3000' };
    await system.startRunner('runner-k', { concurrency: 2, env });
    const kept = code('restart-kept', { behaviour: 'hang', heartbeatMs: 100 });
    const gone = code('restart-cancelled', { behaviour: 'hang', heartbeatMs: 100 });
    const keptId = await system.enqueue({ branch: kept.branch, payload: kept.payload });
    const goneId = await system.enqueue({ branch: gone.branch, payload: gone.payload });
    // hanging, past their first report: an agent whose runner dies in the middle of a tool call exits with it
    const hanging = async (record: string) => (await lines(record)).some((l) => 'beat' in l);
    await eventually(async () => (await hanging(kept.record)) && (await hanging(gone.record)), { what: 'both agents hanging', timeoutMs: 180_000 });
    const orphans = [(await system.agentStarts(kept.record))[0]!.pid, (await system.agentStarts(gone.record))[0]!.pid];
    await system.stopRunner('runner-k', 'SIGKILL');
    expect(orphans.every(alive)).toBe(true);
    await system.cancel(goneId);
    await system.startRunner('runner-k', { concurrency: 2, env });

    // the claims are settled long before their 90 s leases would have run out
    const rolledBack = await eventually(async () => (await eventsOf(keptId, 'JobClaimRolledBack'))[0] ?? null, { what: 'the claim given back', timeoutMs: 60_000 });
    expect(rolledBack).toMatchObject({ leaseToken: 1, cause: 'RUNNER', outcome: 'REQUEUED', nextAttempt: 1 });
    expect(orphans.some(alive)).toBe(false);
    const stopped = await eventually(async () => (await system.job(goneId)).cancelledRun?.stoppedAt ?? null, { what: 'the cancelled run reported stopped', timeoutMs: 60_000 });
    expect(stopped).not.toBeNull();
    const released = (leases: { jobLeaseToken: number; status: string }[]) => leases.filter((l) => l.jobLeaseToken === 1).every((l) => l.status === 'released');
    await eventually(async () => released(await system.leases(keptId)) && released(await system.leases(goneId)), { what: 'both worktrees given back', timeoutMs: 60_000 });

    // the kept job runs again, under a new claim of the same attempt
    await eventually(async () => (await system.agentStarts(kept.record)).length === 2, { what: 'the kept job running again', timeoutMs: 120_000 });
    await system.cancel(keptId);
    await system.terminal(keptId, 120_000);
    // every offer handled (the old ones, redelivered after the kill, answered by the claim as the job is now)
    const nc = await connectTestNats();
    try {
      const jsm = await jetstreamManager(nc);
      await eventually(async () => (await jsm.streams.info(dispatchStreamName(system.naming))).state.messages === 0, { what: 'every offer handled', timeoutMs: 60_000 });
    } finally {
      await nc.close();
    }
    expect((await system.agentStarts(kept.record)).map((s) => leaseTokenOf(s.argv))).toEqual([1, 2]);
    expect((await system.agentStarts(gone.record)).map((s) => leaseTokenOf(s.argv))).toEqual([1]);
    expect(await eventsOf(keptId, 'JobLeaseExpired')).toEqual([]);
    await system.stopRunner('runner-k');
  }, 600_000);

  it('a runner started again under its id whose earlier run\'s agent outlives its SIGKILL (frozen, as on a hung disk) says so, as a run says it of its own agent, and settles the claim all the same', async () => {
    await system.startRunner('runner-outlived', { env: LONG_LEASES });
    const run = code('restart-outlived', { behaviour: 'hang', heartbeatMs: 100 });
    const jobId = await system.enqueue({ branch: run.branch, payload: run.payload });
    await eventually(async () => (await lines(run.record)).some((l) => 'beat' in l), { what: 'the agent hanging', timeoutMs: 180_000 });
    const pid = (await system.agentStarts(run.record))[0]!.pid;
    await system.stopRunner('runner-outlived', 'SIGKILL');
    const frozen = await freezeProcessGroup(pid);
    try {
      // Not stopping: the settling waits the kill grace for the group, then goes on without it.
      const runner = await system.startRunner('runner-outlived', { env: { ...LONG_LEASES, GANTRY_AGENT_KILL_GRACE_MS: '1000' } });
      const said = await eventually(
        () => logRecordsOf(runner.output()).find((l) => l.message === 'processes of the agent outlived their SIGKILL; the worktree is given back all the same') ?? null,
        { what: 'the outlived agent said', timeoutMs: 60_000 },
      );
      expect(said).toMatchObject({ level: 'error', jobId, attempt: 1, leaseToken: 1, kind: 'TASK_IMPLEMENTATION', correlationId: `${jobId}-attempt-1`, agentPid: pid, earlierRun: true });
      const rolledBack = await eventually(async () => (await eventsOf(jobId, 'JobClaimRolledBack'))[0] ?? null, { what: 'the claim given back', timeoutMs: 60_000 });
      expect(rolledBack).toMatchObject({ leaseToken: 1, cause: 'RUNNER' });
      expect(alive(pid)).toBe(true);
    } finally {
      await frozen.thaw();
      try {
        process.kill(-pid, 'SIGKILL');
      } catch {
        // gone: the settling's SIGKILL took effect once it was thawed
      }
    }
    await system.stopRunner('runner-outlived');
  }, 300_000);

  it('two runners refuse to share a scratch folder: the second does not start, the first one\'s agent is untouched', async () => {
    const scratch = join(system.root, 'scratch', 'shared');
    await system.startRunner('runner-s1', { env: { GANTRY_RUNNER_SCRATCH_DIR: scratch } });
    const run = code('shared-scratch', { behaviour: 'hang' });
    const jobId = await system.enqueue({ branch: run.branch, payload: run.payload });
    await eventually(async () => (await system.agentStarts(run.record)).length === 1, { what: 'the agent started', timeoutMs: 30_000 });
    await expect(system.startRunner('runner-s2', { env: { GANTRY_RUNNER_SCRATCH_DIR: scratch } })).rejects.toThrow(/scratch folder .* belongs to runner runner-s1 \(pid \d+\), which is running/);
    expect(alive((await system.agentStarts(run.record))[0]!.pid)).toBe(true);
    expect((await system.job(jobId)).status).toBe('RUNNING');
    await system.cancel(jobId);
    await system.terminal(jobId);
    await system.stopRunner('runner-s1');
  }, 90_000);
  it('a lease renewal unanswered until the claim ran out (the job service frozen): the runner stops the agent before it is thawed, reports and pushes nothing under the lost claim, and the claim expires', async () => {
    await system.startRunner('runner-unrenewed');
    const run = code('renewal-unanswered', { behaviour: 'hang', heartbeatMs: 50, files: { 'src/unrenewed.ts': 'unrenewed\n' } });
    const jobId = await system.enqueue({ branch: run.branch, payload: run.payload, maxAttempts: 1 });
    await eventually(async () => (await lines(run.record)).some((l) => 'beat' in l), { what: 'the agent working', timeoutMs: 30_000 });
    const pid = (await system.agentStarts(run.record))[0]!.pid;
    // Frozen, the job service takes every renewal and answers none: each try times out (a lost reply, not an outage).
    const jobService = system.jobService.process;
    jobService.kill('SIGSTOP');
    try {
      await eventually(() => !alive(pid), { what: 'the agent stopped while no renewal was answered', timeoutMs: 30_000 });
      // its line reaches this process through a pipe, maybe after the agent was seen gone
      await eventually(() => /job lease ran out before a renewal was answered; stopping the agent/.test(system.output('runner-unrenewed')), { what: 'the runner saying why it stopped the agent' });
      // Thawed only once the claim ran out by the job service's own reckoning too (the runner's falls a little
      // before it): thawed earlier, the renewals and the hand-back waiting for it find the claim live, and the
      // hand-back — the runner's due, for a claim that may have been resumed (docs/jobs.md) — would rightly requeue it.
      const expiries = [...(await eventsOf(jobId, 'JobClaimed')), ...(await eventsOf(jobId, 'JobLeaseRenewed'))].map((e) => Date.parse(String(e.leaseExpiresAt)));
      const ranOutAt = Math.max(...expiries);
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, ranOutAt + 100 - Date.now())));
    } finally {
      jobService.kill('SIGCONT');
    }
    // Thawed, the job service expires the claim: the runner sent nothing more under it.
    await eventually(async () => (await eventsOf(jobId, 'JobLeaseExpired')).length === 1, { what: 'the claim expired', timeoutMs: 30_000 }).catch(async (error: unknown) => {
      throw new Error(`${(error as Error).message}; ${await system.describeJob(jobId)}`);
    });
    // its one attempt spent by the expiry, not by anything the runner reported
    expect(await system.terminal(jobId, 30_000)).toMatchObject({ status: 'FAILED', pushedAt: null });
    expect(await eventsOf(jobId, 'JobFinished')).toEqual([]);
    expect(await eventsOf(jobId, 'JobClaimRolledBack')).toEqual([]);
    expect(await eventsOf(jobId, 'JobPushReported')).toEqual([]);
    expect(await pushesTo(run.branch)).toEqual([]);
    await system.leasesReleased();
    await system.stopRunner('runner-unrenewed');
  }, 120_000);
  it('a worktree lease renewal unanswered until the lease ran out (the worktree service frozen): the runner stops the agent before it is thawed, pushes nothing and gives the claim back as DEPENDENCY (no attempt spent)', async () => {
    await system.startRunner('runner-unrenewed-worktree');
    const run = code('worktree-renewal-unanswered', { behaviour: 'hang', heartbeatMs: 50, files: { 'src/unrenewed.ts': 'unrenewed\n' } });
    const jobId = await system.enqueue({ branch: run.branch, payload: run.payload, maxAttempts: 1 });
    await eventually(async () => (await lines(run.record)).some((l) => 'beat' in l), { what: 'the agent working', timeoutMs: 30_000 });
    const pid = (await system.agentStarts(run.record))[0]!.pid;
    // Frozen, the worktree service takes every renewal and answers none; thawed, it would find the lease expired and hand the worktree on.
    const worktreeService = system.worktreeService.process;
    worktreeService.kill('SIGSTOP');
    try {
      await eventually(() => !alive(pid), { what: 'the agent stopped while no worktree renewal was answered', timeoutMs: 30_000 });
      // its line reaches this process through a pipe, maybe after the agent was seen gone
      await eventually(() => /worktree lease lost; stopping the agent/.test(system.output('runner-unrenewed-worktree')), { what: 'the runner saying why it stopped the agent' });
      await eventually(async () => (await eventsOf(jobId, 'JobClaimRolledBack')).length === 1, { what: 'the claim given back', timeoutMs: 30_000 });
      // stopped before the thaw: the job requeued (no attempt spent) is not claimed again here
      await system.stopRunner('runner-unrenewed-worktree');
    } finally {
      worktreeService.kill('SIGCONT');
    }
    expect(await eventsOf(jobId, 'JobClaimRolledBack')).toEqual([expect.objectContaining({ leaseToken: 1, cause: 'DEPENDENCY' })]);
    expect(await eventsOf(jobId, 'JobLeaseExpired')).toEqual([]);
    expect(await eventsOf(jobId, 'JobPushReported')).toEqual([]);
    expect(await pushesTo(run.branch)).toEqual([]);
    await system.leasesReleased();
  }, 120_000);
});
