import { eventually } from '@gantry/testing';
import { E2eSystem } from './e2e-system.js';

/*
 * Jobs under faults (docs/jobs.md), through the real processes: the job service, the worktree
 * service, runners driving the stand-in agent, a bare origin with a push log. Each case names the
 * rule it pins; the fault cases kill real processes at the point named.
 */

const SHA = /^[0-9a-f]{40}$/;
let counter = 0;
const branch = (label: string) => `feat/${label}-${++counter}`;

function flagsOf(argv: string[]): Record<string, string> {
  const flags: Record<string, string> = {};
  for (let i = 0; i < argv.length; i += 2) flags[argv[i]!] = argv[i + 1]!;
  return flags;
}


describe('jobs under faults: job service, worktree service, runners, a real origin', () => {
  const system = new E2eSystem();

  beforeAll(() => system.start(), 60_000);
  afterAll(() => system.stop(), 60_000);

  function code(label: string, standIn: Record<string, unknown>, extra: Record<string, unknown> = {}) {
    const record = system.recordFile(label);
    return { record, branch: branch(label), payload: { standIn: { recordArgvTo: record, ...standIn }, ...extra } };
  }

  const eventsOf = async (jobId: string, type: string) => (await system.events(jobId)).filter((e) => e.type === type).map((e) => e.data);

  describe('with runners A and B', () => {
    beforeAll(async () => {
      await Promise.all([system.startRunner('runner-a', { concurrency: 2 }), system.startRunner('runner-b', { concurrency: 2 })]);
    }, 60_000);
    afterAll(async () => {
      await Promise.all([system.stopRunner('runner-a'), system.stopRunner('runner-b')]);
    }, 30_000);

    it('a timeout ends FAILED with the timeout on the first try, although the agent logged nothing', async () => {
      const run = code('silent-hang', { behaviour: 'hang', logFirst: false, ignoreSigterm: true }, { timeoutMs: 2000 });
      const job = await system.terminal(await system.enqueue({ branch: run.branch, payload: run.payload }));
      expect(job).toMatchObject({ status: 'FAILED', attempt: 1, error: 'exception: the agent was killed at its timeout of 2000 ms', pushedAt: null });
      expect(await system.agentStarts(run.record)).toHaveLength(1);
      // the runner wrote what it knew: the test result it had to give in the agent's place
      expect(job.storyLog).toEqual({ implementationEntries: 0, commitEntries: 0, testResultEntries: 1 });
      expect(await eventsOf(job.jobId, 'JobClaimRolledBack')).toEqual([]);
    });

    it('a refused push ends FAILED with the push error on the first try', async () => {
      await system.origin.refusePushesTo('locked/');
      const run = code('push-refused', { behaviour: 'commit', files: { 'src/locked.ts': 'locked\n' } });
      const job = await system.terminal(await system.enqueue({ branch: 'locked/one', payload: run.payload }));
      expect(job).toMatchObject({ status: 'FAILED', attempt: 1, pushedAt: null });
      expect(job.error).toMatch(/^push failure: pushing locked\/one to the origin failed: .*branch is protected/s);
      expect(await system.agentStarts(run.record)).toHaveLength(1);
      expect(await eventsOf(job.jobId, 'JobClaimRolledBack')).toEqual([]);
    });

    it('failing tests the agent reported, then a non-zero exit: FAILED with the logged summary, not retried', async () => {
      const run = code('reported-failure', { behaviour: 'failing_tests', files: { 'src/red.ts': 'red\n' }, finalExitCode: 1 });
      const job = await system.terminal(await system.enqueue({ branch: run.branch, payload: run.payload }));
      expect(job).toMatchObject({ status: 'FAILED', attempt: 1, error: 'test failure: 1 of 3 checks failed: expected 2, received 3', pushedAt: null });
      expect(await system.agentStarts(run.record)).toHaveLength(1);
      expect(await system.origin.sha(run.branch)).toBeNull();
    });

    it('a crash without a report stays a rollback: the job runs again', async () => {
      const run = code('crash', { behaviour: 'exit_nonzero', exitCode: 2 });
      const job = await system.terminal(await system.enqueue({ branch: run.branch, payload: run.payload, maxAttempts: 2 }));
      expect(job).toMatchObject({ status: 'FAILED', attempt: 2 });
      expect(job.error).toMatch(/agent exited with code 2 without finishing the job/);
      expect(await system.agentStarts(run.record)).toHaveLength(2);
      expect((await eventsOf(job.jobId, 'JobClaimRolledBack')).map((e) => e.cause)).toEqual(['JOB', 'JOB']);
    });

    it('verify holds the net diff against the plan: an unrelated deletion is DIVERGENT, FAILED, not pushed, its head kept', async () => {
      const run = code('unrelated', { behaviour: 'delete_only', delete: ['docs/old.md'] }, { expectedChanges: [{ path: 'src/planned.ts', contains: 'planned' }] });
      const job = await system.terminal(await system.enqueue({ branch: run.branch, payload: run.payload }));
      expect(job).toMatchObject({ status: 'FAILED', attempt: 1, error: 'verify divergent — manual review', pushedAt: null });
      expect(job.verification).toMatchObject({ result: 'DIVERGENT', planCheck: 'NONE_PRESENT', headSha: expect.stringMatching(SHA) });
      expect(job.verification!.headSha).not.toBe(job.baseSha);
      expect(await system.origin.sha(run.branch)).toBeNull();
    });

    it('verify with the plan: the planned file written → ALIGNED, ALL_PRESENT; without a plan the facts say NO_EXPECTED_CHANGES', async () => {
      const planned = code('planned', { behaviour: 'commit', files: { 'src/planned.ts': 'export const planned = 1;\n' } }, {
        expectedChanges: [{ path: 'src/planned.ts', contains: 'planned' }],
      });
      const unplanned = code('unplanned', { behaviour: 'commit', files: { 'src/unplanned.ts': 'x\n' } });
      const [a, b] = await Promise.all([
        system.enqueue({ branch: planned.branch, payload: planned.payload }).then((id) => system.terminal(id)),
        system.enqueue({ branch: unplanned.branch, payload: unplanned.payload }).then((id) => system.terminal(id)),
      ]);
      expect(a).toMatchObject({ status: 'DONE', verification: { result: 'ALIGNED', planCheck: 'ALL_PRESENT', headSha: await system.origin.sha(planned.branch) } });
      expect(b).toMatchObject({ status: 'DONE', verification: { result: 'ALIGNED', planCheck: 'NO_EXPECTED_CHANGES', headSha: await system.origin.sha(unplanned.branch) } });
    });

    it('a code job that names no branch works on a feature branch derived from it; main is never pushed to', async () => {
      const mainBefore = await system.origin.sha('main');
      const run = code('no-branch', { behaviour: 'commit', files: { 'src/no-branch.ts': 'feature\n' } });
      const taskId = `T-nobranch-${counter}`;
      const job = await system.terminal(await system.enqueue({ baseRef: 'main', taskId, payload: run.payload }));
      const derived = `gantry/product-e2e/task-${taskId}`;
      expect(job).toMatchObject({ status: 'DONE', attempt: 1, headSha: await system.origin.sha(derived) });
      expect(await system.origin.sha('main')).toBe(mainBefore);
      expect((await system.origin.pushes()).filter((p) => p.ref === 'refs/heads/main')).toEqual([]);
    });

    it('a code job whose branch is the target is refused before any work: FAILED, no agent, nothing pushed', async () => {
      const mainBefore = await system.origin.sha('main');
      const run = code('onto-main', { behaviour: 'commit', files: { 'src/onto-main.ts': 'straight to main\n' } });
      const job = await system.terminal(await system.enqueue({ branch: 'main', payload: run.payload }));
      expect(job).toMatchObject({ status: 'FAILED', attempt: 1, pushedAt: null });
      expect(job.error).toMatch(/the job's branch main is the target branch/);
      expect(await system.agentStarts(run.record)).toEqual([]);
      expect(await system.origin.sha('main')).toBe(mainBefore);
    });

    it('a job whose payload names a plan no runner can test is refused before any work: FAILED with why on the first try, no agent, nothing pushed', async () => {
      const run = code('bad-plan', { behaviour: 'commit', files: { 'src/bad-plan.ts': 'x\n' } }, { expectedChanges: [{ path: '../outside.ts' }] });
      const job = await system.terminal(await system.enqueue({ branch: run.branch, payload: run.payload }));
      expect(job).toMatchObject({ status: 'FAILED', attempt: 1, pushedAt: null });
      expect(job.error).toMatch(/^exception: the job cannot be run: expected change path "\.\.\/outside\.ts" must be a plain path/);
      expect(await system.agentStarts(run.record)).toEqual([]);
      expect(await eventsOf(job.jobId, 'JobClaimRolledBack')).toEqual([]);
      expect(await system.origin.sha(run.branch)).toBeNull();
    });

    it('the allowed tools recorded on the job are the ones the command line got', async () => {
      const run = code('tools', { behaviour: 'commit', files: { 'src/tools.ts': 'tools\n' } });
      const job = await system.terminal(await system.enqueue({ branch: run.branch, payload: run.payload }));
      const argv = (await system.agentStarts(run.record))[0]!.argv;
      expect(job.agentConfig!.allowedTools.join(',')).toBe(flagsOf(argv)['--allowedTools']);
      expect(job.agentConfig!.allowedTools).toEqual(expect.arrayContaining(['mcp__gantry__update_job_status', 'mcp__gantry__ask_question']));
    });

    it('a worktree held by another job is not the job\'s fault: the rollbacks keep the attempt and the offers come back after growing pauses', async () => {
      // runner C alone, waiting for a worktree lock only a second: the second job's claims keep ending in LOCK_TIMEOUT
      await Promise.all([system.stopRunner('runner-a'), system.stopRunner('runner-b')]);
      await system.startRunner('runner-c', { concurrency: 2, env: { GANTRY_WORKTREE_LOCK_TIMEOUT_MS: '1000' } });
      const shared = branch('contended');
      const holder = code('holder', { behaviour: 'hang' });
      const holderId = await system.enqueue({ branch: shared, payload: holder.payload });
      await eventually(async () => (await system.agentStarts(holder.record)).length === 1, { what: "the holder's agent started", timeoutMs: 30_000 });
      const waiter = code('waiter', { behaviour: 'commit', files: { 'src/waiter.ts': 'waited\n' } });
      const waiterId = await system.enqueue({ branch: shared, payload: waiter.payload, maxAttempts: 1 });
      await eventually(async () => (await eventsOf(waiterId, 'JobClaimRolledBack')).length >= 3, { what: 'three rollbacks for the held worktree', timeoutMs: 60_000 });
      await system.cancel(holderId);
      const job = await system.terminal(waiterId, 90_000);
      expect(job).toMatchObject({ status: 'DONE', attempt: 1, headSha: await system.origin.sha(shared) });
      const rollbacks = await eventsOf(waiterId, 'JobClaimRolledBack');
      expect(rollbacks.every((r) => r.cause === 'DEPENDENCY' && r.nextAttempt === 1 && r.outcome === 'REQUEUED')).toBe(true);
      const pauses = rollbacks.map((r) => Date.parse(r.offerNotBefore as string) - Date.parse(r.rolledBackAt as string));
      expect(pauses.slice(0, 3)).toEqual([1000, 2000, 4000]);
      // each claim after a rollback came no earlier than its offer was due
      const claims = await eventsOf(waiterId, 'JobClaimed');
      for (const [i, r] of rollbacks.entries()) expect(Date.parse(claims[i + 1]!.claimedAt as string)).toBeGreaterThanOrEqual(Date.parse(r.offerNotBefore as string));
      await system.stopRunner('runner-c');
    }, 150_000);
  });
});
