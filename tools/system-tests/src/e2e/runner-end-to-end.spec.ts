import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { KIND_DEFAULTS, type JobKind, type JobView } from '@gantry/contracts';
import { eventually } from '@gantry/testing';
import { alive, E2eSystem } from './e2e-system.js';

/*
 * The runner end to end (docs/jobs.md): the job service, the worktree service and runners as separate processes,
 * the stand-in agent, a real local bare origin. Each job works on its own branch, so jobs run side
 * by side; a test that needs one particular runner stops the others first.
 */

const GANTRY_TOOLS = ['log_implementation', 'log_commit', 'log_test_result', 'update_job_status', 'ask_question'].map((t) => `mcp__gantry__${t}`);
const SHA = /^[0-9a-f]{40}$/;

/** The flags of a recorded command line, with `-p` and every `--flag value` pair. */
function flagsOf(argv: string[]): Record<string, string> {
  const flags: Record<string, string> = {};
  for (let i = 0; i < argv.length; i += 2) flags[argv[i]!] = argv[i + 1]!;
  return flags;
}

/**
 * Leases a slow job service renews in time (10 s ones it may not, under heavy load: the runner would declare its
 * claim lost and stop its agent). For the cases below, none of which waits for a lease to run out: a runner started
 * again under its id settles its earlier claims long before these run out.
 */
const LONG_LEASES = { GANTRY_JOB_LEASE_MS: '120000', GANTRY_WORKTREE_LEASE_MS: '120000' };

let branchCounter = 0;
function branch(label: string): string {
  branchCounter += 1;
  return `feat/${label}-${branchCounter}`;
}

describe('the runner end to end: job service, worktree service, two runners, a real origin', () => {
  const system = new E2eSystem();
  let mainAtStart: string;

  beforeAll(async () => {
    await system.start();
    mainAtStart = (await system.origin.sha('main'))!;
  }, 60_000);
  afterAll(() => system.stop(), 60_000);

  /** A code job's branch (the enqueue's own field; the repository is the product's) and the stand-in's payload. */
  function code(label: string, standIn: Record<string, unknown>, extra: Record<string, unknown> = {}) {
    const record = system.recordFile(label);
    return { record, branch: branch(label), payload: { standIn: { recordArgvTo: record, ...standIn }, ...extra } };
  }

  /**
   * What a case that failed half-way left: its runners (they would take the next case's jobs) and its open jobs (the
   * next case's runners would take them). The runners go first, each stopping its agents and giving its claims back.
   */
  async function leaveNothingBehind(): Promise<void> {
    for (const id of [...system.runners.keys()]) await system.stopRunner(id, 'SIGTERM');
    await system.cancelOpenJobs();
  }

  describe('with runners A and B (all kinds, concurrency 2 each)', () => {
    beforeAll(async () => {
      await Promise.all([system.startRunner('runner-a', { concurrency: 2 }), system.startRunner('runner-b', { concurrency: 2 })]);
    }, 60_000);
    afterAll(async () => {
      await Promise.all([system.stopRunner('runner-a'), system.stopRunner('runner-b')]);
    }, 30_000);

    it('starts the agent with the command line of each kind, the effort following the thinking budget', async () => {
      const cases: { label: string; kind: JobKind; budget?: number; effort: string | null; model: string; mode: string; code: boolean }[] = [
        { label: 'idea-grill', kind: 'IDEA_GRILL', effort: 'high', model: 'claude-sonnet-4-6', mode: 'acceptEdits', code: false },
        { label: 'idea-plan', kind: 'IDEA_MAKE_PLAN', effort: 'xhigh', model: 'claude-opus-4-7', mode: 'acceptEdits', code: false },
        { label: 'plan-chat', kind: 'PLAN_CHAT', effort: 'medium', model: 'claude-sonnet-4-6', mode: 'acceptEdits', code: false },
        { label: 'review', kind: 'REVIEW', effort: 'high', model: 'claude-opus-4-7', mode: 'acceptEdits', code: false },
        { label: 'task', kind: 'TASK_IMPLEMENTATION', effort: 'medium', model: 'claude-sonnet-4-6', mode: 'bypassPermissions', code: true },
        { label: 'sprint', kind: 'SPRINT_IMPLEMENTATION', effort: 'medium', model: 'claude-sonnet-4-6', mode: 'bypassPermissions', code: true },
        ...([
          [0, null],
          [6000, 'medium'],
          [6001, 'high'],
          [12000, 'high'],
          [24000, 'xhigh'],
          [24001, 'max'],
        ] as const).map(([budget, effort]) => ({
          label: `budget-${budget}`,
          kind: 'PLAN_CHAT' as const,
          budget,
          effort,
          model: 'claude-sonnet-4-6',
          mode: 'acceptEdits',
          code: false,
        })),
      ];
      const jobs = await Promise.all(
        cases.map(async (c) => {
          const run = c.code
            ? code(c.label, { behaviour: 'commit', files: { [`src/${c.label}.ts`]: `export const x = '${c.label}';\n` } })
            : { record: system.recordFile(c.label), payload: { standIn: { behaviour: 'nothing', recordArgvTo: system.recordFile(c.label) } } };
          const jobId = await system.enqueue({ kind: c.kind, ...('branch' in run ? { branch: run.branch } : {}), payload: run.payload, ...(c.budget !== undefined ? { thinkingBudget: c.budget } : {}) });
          return { c, jobId, record: run.record };
        }),
      );
      for (const { c, jobId, record } of jobs) {
        const job = await system.terminal(jobId);
        expect({ label: c.label, status: job.status }).toEqual({ label: c.label, status: 'DONE' });
        const starts = await system.agentStarts(record);
        expect(starts).toHaveLength(1);
        const argv = starts[0]!.argv;
        const flags = flagsOf(argv);
        const expectedFlags = ['-p', '--model', '--permission-mode', ...(c.effort ? ['--effort'] : []), '--allowedTools', '--mcp-config', '--add-dir', '--output-format'];
        expect({ label: c.label, flags: Object.keys(flags) }).toEqual({ label: c.label, flags: expectedFlags });
        expect(argv).toHaveLength(expectedFlags.length * 2);
        const tools = [...KIND_DEFAULTS[c.kind].allowedTools];
        for (const t of GANTRY_TOOLS) if (!tools.includes(t)) tools.push(t);
        expect({ label: c.label, model: flags['--model'], mode: flags['--permission-mode'], effort: flags['--effort'] ?? null, tools: flags['--allowedTools'], format: flags['--output-format'] }).toEqual({
          label: c.label,
          model: c.model,
          mode: c.mode,
          effort: c.effort,
          tools: tools.join(','),
          format: 'text',
        });
        expect(argv).not.toContain('--max-turns');
        const payloadPath = /(\/\S+\/payload\.json)/.exec(flags['-p']!)?.[1];
        expect(payloadPath).toBeDefined();
        expect(flags['--mcp-config']).toBe(payloadPath!.replace(/payload\.json$/, 'mcp-config.json'));
        // the agent works in the leased worktree (code kinds) or a scratch directory, and starts there
        expect(starts[0]!.cwd).toBe(flags['--add-dir']);
        if (c.code) expect(flags['--add-dir']!.startsWith(system.worktreeRoot)).toBe(true);
        else expect(flags['--add-dir']!.startsWith(system.worktreeRoot)).toBe(false);
      }
    });

    describe('every row of the finishing table, from real runs', () => {
      it('ALIGNED with a new commit → DONE / DONE, base_sha, head_sha and pushed_at recorded, the branch pushed once', async () => {
        const run = code('aligned', {
          behaviour: 'commit',
          commits: [
            { files: { 'src/cart.ts': 'export const total = 3;\n' }, message: 'feat: cart total' },
            { files: { 'src/cart.spec.ts': 'test\n' }, message: 'test: cart total' },
          ],
        });
        const jobId = await system.enqueue({ branch: run.branch, payload: run.payload });
        const job = await system.terminal(jobId);
        const tip = await system.origin.sha(run.branch);
        expect(job).toMatchObject({ status: 'DONE', taskStatus: 'DONE', error: null, baseSha: mainAtStart, headSha: tip, attempt: 1 });
        expect(job.pushedAt).not.toBeNull();
        expect(job.storyLog).toEqual({ implementationEntries: 1, commitEntries: 2, testResultEntries: 1 });
        expect(await system.origin.log(run.branch)).toHaveLength(2);
        const pushes = (await system.origin.pushes()).filter((p) => p.ref === `refs/heads/${run.branch}`);
        expect(pushes).toEqual([{ ref: `refs/heads/${run.branch}`, oldSha: '0'.repeat(40), newSha: tip }]);
        await system.leasesReleased(jobId);
      });

      it('PARTIAL (the agent did part of the plan) with a new commit → DONE / DONE', async () => {
        const run = code('partial', { behaviour: 'commit', files: { 'src/partial.ts': 'half\n' }, reportStatus: 'PARTIAL' });
        const main = await system.origin.sha('main');
        const job = await system.terminal(await system.enqueue({ branch: run.branch, payload: run.payload }));
        expect(job).toMatchObject({ status: 'DONE', taskStatus: 'DONE', error: null, baseSha: main, headSha: await system.origin.sha(run.branch) });
        expect(job.pushedAt).not.toBeNull();
        // the agent's own PARTIAL went through MCP to the job service, under the claim
        expect(await system.agentReports(job.jobId)).toEqual([
          { type: 'AgentStatusReported', data: expect.objectContaining({ status: 'PARTIAL', summary: 'work committed', leaseToken: 1 }) },
        ]);
      });

      it('a delete-only change is not EMPTY → DONE / DONE', async () => {
        const run = code('delete-only', { behaviour: 'delete_only', delete: ['docs/old.md'] });
        const main = await system.origin.sha('main');
        const job = await system.terminal(await system.enqueue({ branch: run.branch, payload: run.payload }));
        expect(job).toMatchObject({ status: 'DONE', taskStatus: 'DONE', error: null, baseSha: main, headSha: await system.origin.sha(run.branch) });
        expect(job.pushedAt).not.toBeNull();
        expect(await system.origin.fileAt(run.branch, 'docs/old.md')).toBeNull();
      });

      it('EMPTY and the work not on the target → FAILED "verify produced no output" / IN_PROGRESS, nothing pushed', async () => {
        const run = code('empty', { behaviour: 'nothing' });
        const job = await system.terminal(await system.enqueue({ branch: run.branch, payload: run.payload }));
        expect(job).toMatchObject({ status: 'FAILED', taskStatus: 'IN_PROGRESS', error: 'verify produced no output', baseSha: mainAtStart, headSha: null, pushedAt: null });
        expect(await system.origin.sha(run.branch)).toBeNull();
        expect(await system.agentStarts(run.record)).toHaveLength(1);
      });

      it('EMPTY and the work already on the target → SKIPPED / DONE by the pre-check, without starting the agent', async () => {
        const landed = await system.origin.commitToMain({ 'src/landed.ts': 'export const landed = true;\n' }, 'feat: landed by another job');
        const run = code('precheck', { behaviour: 'commit', files: { 'src/landed.ts': 'export const landed = true;\n' } }, {
          expectedChanges: [{ path: 'src/landed.ts', contains: 'landed = true' }],
        });
        const job = await system.terminal(await system.enqueue({ branch: run.branch, payload: run.payload }));
        expect(job).toMatchObject({ status: 'SKIPPED', taskStatus: 'DONE', error: null, baseSha: landed, headSha: null, pushedAt: null });
        expect(job.storyLog).toEqual({ implementationEntries: 1, commitEntries: 0, testResultEntries: 1 });
        expect(await system.agentStarts(run.record)).toEqual([]);
        expect(await system.origin.sha(run.branch)).toBeNull();
        await system.leasesReleased(job.jobId);
      });

      it('part of the plan already on the target: the pre-check logs what it found, the agent does the rest → PARTIAL → DONE / DONE', async () => {
        const landed = await system.origin.commitToMain({ 'src/half-a.ts': 'export const a = 1;\n' }, 'feat: first half landed');
        const run = code('half-done', { behaviour: 'commit', files: { 'src/half-b.ts': 'export const b = 2;\n' } }, {
          expectedChanges: [{ path: 'src/half-a.ts', contains: 'a = 1' }, { path: 'src/half-b.ts', contains: 'b = 2' }],
        });
        const job = await system.terminal(await system.enqueue({ branch: run.branch, payload: run.payload }));
        expect(job).toMatchObject({ status: 'DONE', taskStatus: 'DONE', error: null, baseSha: landed, headSha: await system.origin.sha(run.branch) });
        expect(await system.agentStarts(run.record)).toHaveLength(1);
        const logged = (await system.events(job.jobId)).filter((e) => e.type === 'ImplementationLogged').map((e) => e.data);
        expect(logged).toHaveLength(2);
        expect(logged[0]).toMatchObject({ alreadyPresent: { extent: 'PARTIAL', commitSha: landed }, summary: expect.stringContaining('left to do: src/half-b.ts') });
        const finished = (await system.events(job.jobId)).find((e) => e.type === 'JobFinished')!.data;
        expect(finished).toMatchObject({ facts: expect.objectContaining({ verifyResult: 'PARTIAL', newCommit: true }) });
      });

      it('DIVERGENT, identical to a branch already merged → SKIPPED / DONE', async () => {
        const merged = branch('merged');
        await system.origin.branchWith(merged, { 'src/coupon.ts': 'export const coupon = 10;\n' }, 'feat: coupon');
        const main = await system.origin.squashMerge(merged);
        const run = code('already-merged', { behaviour: 'nothing', resetTo: `origin/${merged}` });
        const job = await system.terminal(await system.enqueue({ branch: run.branch, payload: run.payload }));
        expect(job).toMatchObject({ status: 'SKIPPED', taskStatus: 'DONE', error: null, baseSha: main, headSha: null, pushedAt: null });
        expect(await system.agentStarts(run.record)).toHaveLength(1);
        expect(await system.origin.sha(run.branch)).toBeNull();
      });

      it('DIVERGENT, not matching the target → FAILED "verify divergent — manual review" / IN_PROGRESS', async () => {
        const other = branch('unmerged');
        await system.origin.branchWith(other, { 'src/experiment.ts': 'export const experiment = 1;\n' }, 'feat: experiment');
        await system.origin.commitToMain({ 'src/main-moves.ts': 'moved\n' }, 'main moves on');
        const main = await system.origin.sha('main');
        const run = code('divergent', { behaviour: 'nothing', resetTo: `origin/${other}` });
        const job = await system.terminal(await system.enqueue({ branch: run.branch, payload: run.payload }));
        expect(job).toMatchObject({ status: 'FAILED', taskStatus: 'IN_PROGRESS', error: 'verify divergent — manual review', baseSha: main, headSha: null, pushedAt: null });
        expect(await system.origin.sha(run.branch)).toBeNull();
      });

      it('a failing test run → FAILED with the concrete test error / IN_PROGRESS, nothing pushed', async () => {
        const run = code('failing-tests', { behaviour: 'failing_tests', files: { 'src/broken.ts': 'broken\n' } });
        const main = await system.origin.sha('main');
        const job = await system.terminal(await system.enqueue({ branch: run.branch, payload: run.payload }));
        expect(job).toMatchObject({
          status: 'FAILED',
          taskStatus: 'IN_PROGRESS',
          error: 'test failure: 1 of 3 checks failed: expected 2, received 3',
          baseSha: main,
          headSha: null,
          pushedAt: null,
        });
        expect(await system.origin.sha(run.branch)).toBeNull();
      });

      it('a push the origin refuses → FAILED with the push error / IN_PROGRESS, pushed_at empty', async () => {
        await system.origin.refusePushesTo('protected/');
        const record = system.recordFile('push-refused');
        const jobId = await system.enqueue({
          branch: 'protected/release',
          payload: { standIn: { behaviour: 'commit', files: { 'src/p.ts': 'p\n' }, recordArgvTo: record } },
        });
        const job = await system.terminal(jobId);
        expect(job).toMatchObject({ status: 'FAILED', taskStatus: 'IN_PROGRESS', baseSha: await system.origin.sha('main'), headSha: null, pushedAt: null });
        expect(job.error).toMatch(/^push failure: pushing protected\/release to the origin failed: .*branch is protected/s);
        expect(await system.origin.sha('protected/release')).toBeNull();
      });

      it('cancelled by a user while the agent runs → CANCELLED / TO_DO, the agent stopped, the worktree lease released', async () => {
        const run = code('cancelled', { behaviour: 'hang' });
        const jobId = await system.enqueue({ branch: run.branch, payload: run.payload });
        await eventually(async () => (await system.agentStarts(run.record)).length === 1, { what: 'the agent started', timeoutMs: 30_000 });
        await system.cancel(jobId);
        const job = await system.terminal(jobId);
        expect(job).toMatchObject({ status: 'CANCELLED', taskStatus: 'TO_DO', pushedAt: null });
        const pid = (await system.agentStarts(run.record))[0]!.pid;
        await eventually(() => !alive(pid), { what: 'the cancelled agent stopped', timeoutMs: 15_000 });
        await system.leasesReleased(jobId);
      });
    });

    it('an agent that never logs: the finish is refused and the job FAILs with that reason', async () => {
      const run = code('no-logs', { behaviour: 'no_logs', files: { 'src/silent.ts': 'silent\n' } });
      const job = await system.terminal(await system.enqueue({ branch: run.branch, payload: run.payload, maxAttempts: 1 }));
      expect(job.status).toBe('FAILED');
      expect(job.error).toMatch(/the finish was refused: .*story log is missing an implementation-log entry .*a test-result entry .*a commit-log entry/);
      expect(job.storyLog).toEqual({ implementationEntries: 0, commitEntries: 0, testResultEntries: 0 });
      // work of an attempt that cannot finish is not published
      expect(await system.origin.sha(run.branch)).toBeNull();
      await system.leasesReleased(job.jobId);
    });

    it('the story log written by the agent through MCP is what lets a job finish', async () => {
      const run = code('logged', { behaviour: 'commit', files: { 'src/logged.ts': 'logged\n' } });
      const job = await system.terminal(await system.enqueue({ branch: run.branch, payload: run.payload }));
      expect(job.status).toBe('DONE');
      expect(job.storyLog).toEqual({ implementationEntries: 1, commitEntries: 1, testResultEntries: 1 });
    });

    it('a hung agent is killed at its timeout → FAILED with a timeout error, its worktree lease released by the server', async () => {
      const run = code('hung', { behaviour: 'hang', ignoreSigterm: true }, { timeoutMs: 2000 });
      const jobId = await system.enqueue({ branch: run.branch, payload: run.payload });
      const job = await system.terminal(jobId);
      expect(job).toMatchObject({ status: 'FAILED', taskStatus: 'IN_PROGRESS', error: 'exception: the agent was killed at its timeout of 2000 ms', pushedAt: null });
      const pid = (await system.agentStarts(run.record))[0]!.pid;
      expect(alive(pid)).toBe(false);
      const leases = await system.leasesReleased(jobId);
      expect(leases.length).toBeGreaterThan(0);
    });

    it('a job that runs longer than its leases keeps them by renewal and finishes on its first attempt', async () => {
      // job lease 10 s, worktree lease 10 s, renewed every second; the agent works for 12 s after both were granted
      const run = code('long', { behaviour: 'commit', delayMs: 12_000, files: { 'src/long.ts': 'long\n' } });
      const jobId = await system.enqueue({ branch: run.branch, payload: run.payload });
      const done = await system.terminal(jobId, 60_000);
      expect(done).toMatchObject({ status: 'DONE', attempt: 1, headSha: await system.origin.sha(run.branch) });
      const events = await system.events(jobId);
      const of = (type: string) => events.filter((e) => e.type === type).map((e) => e.data);
      const finishedAt = Date.parse(of('JobFinished')[0]!.finishedAt as string);
      // it ran past the expiry of its claim as granted, kept by renewals
      expect(finishedAt).toBeGreaterThan(Date.parse(of('JobClaimed')[0]!.leaseExpiresAt as string));
      expect(of('JobLeaseRenewed').some((r) => Date.parse(r.leaseExpiresAt as string) > finishedAt)).toBe(true);
      expect([...of('JobLeaseExpired'), ...of('JobClaimRolledBack')]).toEqual([]);
      // and past the expiry of its worktree lease as granted, held by renewals until the job's finish released it
      const [lease] = await system.worktreeLeaseRows(jobId);
      const leaseEvents = await system.worktreeLeaseEvents(lease!.lease_id);
      const synced = leaseEvents.find((e) => e.type === 'WorktreeSynced')!.data;
      expect(finishedAt).toBeGreaterThan(Date.parse(synced.expiresAt as string));
      expect(leaseEvents.filter((e) => e.type === 'WorktreeLeaseRenewed').some((r) => Date.parse(r.data.expiresAt as string) > finishedAt)).toBe(true);
      expect(leaseEvents.map((e) => e.type)).not.toContain('WorktreeLeaseExpired');
    }, 60_000);

    it('ten jobs of different kinds and outcomes through both runners: each terminal with its status, every lease released', async () => {
      const landed = await system.origin.commitToMain({ 'src/ten-landed.ts': 'ten\n' }, 'feat: ten landed');
      expect(landed).toMatch(SHA);
      const withRecord = (label: string, standIn: Record<string, unknown>) => ({ standIn: { ...standIn, recordArgvTo: system.recordFile(label) } });
      const specs: { label: string; expected: JobView['status']; kind?: JobKind; maxAttempts?: number; branch?: string; payload: Record<string, unknown> }[] = [
        ...[1, 2, 3].map((i) => ({
          label: `ten-commit-${i}`,
          expected: 'DONE' as const,
          ...code(`ten-commit-${i}`, { behaviour: 'commit', delayMs: 500, files: { [`src/ten-${i}.ts`]: `${i}\n` } }),
        })),
        { label: 'ten-sprint', expected: 'DONE', kind: 'SPRINT_IMPLEMENTATION', ...code('ten-sprint', { behaviour: 'delete_only', delete: ['docs/old.md'] }) },
        { label: 'ten-empty', expected: 'FAILED', ...code('ten-empty', { behaviour: 'nothing', delayMs: 500 }) },
        { label: 'ten-tests', expected: 'FAILED', ...code('ten-tests', { behaviour: 'failing_tests', files: { 'src/t.ts': 't\n' } }) },
        {
          label: 'ten-skip',
          expected: 'SKIPPED',
          ...code('ten-skip', { behaviour: 'commit', files: { 'x.ts': 'x\n' } }, { expectedChanges: [{ path: 'src/ten-landed.ts' }] }),
        },
        { label: 'ten-review', expected: 'DONE', kind: 'REVIEW', payload: withRecord('ten-review', { behaviour: 'nothing', delayMs: 500 }) },
        { label: 'ten-grill', expected: 'DONE', kind: 'IDEA_GRILL', payload: withRecord('ten-grill', { behaviour: 'nothing', delayMs: 500 }) },
        { label: 'ten-exit', expected: 'FAILED', kind: 'PLAN_CHAT', maxAttempts: 1, payload: withRecord('ten-exit', { behaviour: 'exit_nonzero', exitCode: 2 }) },
      ];
      const jobIds = await Promise.all(specs.map((s) => system.enqueue({ kind: s.kind, maxAttempts: s.maxAttempts, branch: s.branch, payload: s.payload })));
      // Ten jobs through four slots: on a loaded machine a job can wait a minute for a slot and run for
      // half of one, so the wait is generous (how fast they run is the benchmark's business, not this test's).
      const jobs = await Promise.all(jobIds.map((id) => system.terminal(id, 240_000)));
      expect(jobs.map((j) => j.status)).toEqual(specs.map((s) => s.expected));
      expect(jobs[9]!.error).toMatch(/agent exited with code 2 without finishing the job/);
      for (const job of jobs) expect(job.lease).toBeNull();
      await system.leasesReleased();

      // each DONE code job's branch reached the origin in exactly one push
      for (const [i, spec] of specs.entries()) {
        const branchName = spec.payload.branch as string | undefined;
        if (!branchName) continue;
        const pushes = (await system.origin.pushes()).filter((p) => p.ref === `refs/heads/${branchName}`);
        expect({ label: spec.label, pushes: pushes.length }).toEqual({ label: spec.label, pushes: jobs[i]!.status === 'DONE' ? 1 : 0 });
      }

      // both runners took part, and neither ran more than its two agents at once
      const runs: { runner: string; from: number; to: number }[] = [];
      for (const spec of specs) {
        const lines = (await readFile(system.recordFile(spec.label), 'utf8').catch(() => '')).split('\n').filter(Boolean).map((l) => JSON.parse(l));
        const start = lines.find((l) => Array.isArray(l.argv));
        const exit = lines.find((l) => 'exit' in l);
        if (!start) continue;
        const runner = /\/scratch\/(runner-[a-z])\//.exec(flagsOf(start.argv)['--mcp-config']!)![1]!;
        runs.push({ runner, from: Date.parse(start.at), to: Date.parse(exit.at) });
      }
      expect(runs).toHaveLength(9);
      expect(new Set(runs.map((r) => r.runner))).toEqual(new Set(['runner-a', 'runner-b']));
      for (const runner of ['runner-a', 'runner-b']) {
        const mine = runs.filter((r) => r.runner === runner);
        const mostAtOnce = Math.max(...mine.map((r) => mine.filter((o) => o.from <= r.from && r.from < o.to).length));
        expect({ runner, mostAtOnce: mostAtOnce <= 2 }).toEqual({ runner, mostAtOnce: true });
      }
    }, 300_000);
  });

  describe('a runner killed with SIGKILL mid-job', () => {
    afterEach(leaveNothingBehind, 120_000);

    it('started again under its id it stops the orphaned agent and gives the claim back at once (no attempt spent); the other runner completes the job, pushing once', async () => {
      await system.startRunner('runner-c', { env: LONG_LEASES });
      // the agent pauses after its first report until the gate opens: alive when its runner is killed, however slow the machine
      const gate = join(system.root, 'gate-sigkill');
      const run = code('sigkill', { behaviour: 'commit', pauseUntilFile: gate, files: { 'src/survivor.ts': 'survived\n' } });
      const jobId = await system.enqueue({ branch: run.branch, payload: run.payload });
      // in its pause, past its first report (an agent killed with its runner during that report would just exit): the job
      // service records the report before its answer reaches the agent, so the agent's own word that it pauses is awaited
      await eventually(async () => (await system.job(jobId)).storyLog.implementationEntries === 1, { what: 'the agent working on runner C', timeoutMs: 120_000 });
      await eventually(async () => (await recordLines(run.record)).some((l) => 'paused' in l), { what: 'the agent in its pause on runner C', timeoutMs: 120_000 });
      await system.stopRunner('runner-c', 'SIGKILL');
      // The agent has its own process group and outlives the SIGKILLed runner; runner C started again
      // under its id (taking no kind of this job) finds it through its scratch directory and stops it.
      const orphan = (await system.agentStarts(run.record))[0]!.pid;
      expect(alive(orphan)).toBe(true);
      await system.startRunner('runner-c', { kinds: ['IDEA_GRILL'], env: LONG_LEASES });
      // it settles its earlier run before it claims anything: the agent stopped first, then the claim given back
      const rolledBack = await eventually(async () => {
        const found = (await system.events(jobId)).filter((e) => e.type === 'JobClaimRolledBack').map((e) => e.data);
        return found.length > 0 ? found : null;
      }, { what: 'the claim of the earlier run given back', timeoutMs: 120_000 });
      expect(alive(orphan)).toBe(false);
      expect(await system.job(jobId)).toMatchObject({ status: 'QUEUED', attempt: 1, lease: null });
      expect(rolledBack).toEqual([expect.objectContaining({ cause: 'RUNNER', nextAttempt: 1, reason: expect.stringMatching(/runner-c was started again/) })]);
      expect((await system.events(jobId)).some((e) => e.type === 'JobLeaseExpired')).toBe(false);
      await writeFile(gate, '');
      await system.startRunner('runner-d', { env: LONG_LEASES });
      const job = await system.terminal(jobId, 180_000);
      expect(job).toMatchObject({ status: 'DONE', taskStatus: 'DONE', attempt: 1, headSha: await system.origin.sha(run.branch) });
      expect(await system.agentStarts(run.record)).toHaveLength(2);
      const pushes = (await system.origin.pushes()).filter((p) => p.ref === `refs/heads/${run.branch}`);
      expect(pushes).toHaveLength(1);
      expect(await system.origin.log(run.branch)).toHaveLength(1);
      await system.leasesReleased(jobId, 60_000);
      await Promise.all([system.stopRunner('runner-c'), system.stopRunner('runner-d')]);
    }, 600_000);
  });

  describe('a runner stopped with SIGTERM mid-job', () => {
    afterEach(leaveNothingBehind, 120_000);

    it('stops taking offers, gives the job its grace period, then stops the agent and rolls the claim back', async () => {
      const runner = await system.startRunner('runner-g', { env: { ...LONG_LEASES, GANTRY_RUNNER_SHUTDOWN_GRACE_MS: '1500' } });
      const record = system.recordFile('sigterm');
      const jobId = await system.enqueue({ kind: 'PLAN_CHAT', payload: { standIn: { behaviour: 'hang', recordArgvTo: record } } });
      await eventually(async () => (await system.agentStarts(record)).length === 1, { what: 'the agent started on runner G', timeoutMs: 120_000 });
      const stoppedAt = Date.now();
      expect(await system.stopRunner('runner-g', 'SIGTERM')).toBe(0);
      expect(Date.now() - stoppedAt).toBeGreaterThanOrEqual(1500);
      expect(alive((await system.agentStarts(record))[0]!.pid)).toBe(false);
      const job = await system.job(jobId);
      // the runner's shutdown is not the job's fault: the attempt is kept
      expect(job).toMatchObject({ status: 'QUEUED', attempt: 1, lease: null });
      expect(runner.output()).toMatch(/grace period over; stopping agents and rolling claims back/);
      await system.cancel(jobId);
    }, 300_000);
  });

  describe('an agent whose token expired', () => {
    afterEach(leaveNothingBehind, 120_000);

    it('makes its runner unhealthy and take nothing more; the job goes back and the other runner completes it', async () => {
      const expired = await system.startRunner('runner-e', { env: { ...LONG_LEASES, ANTHROPIC_API_KEY: 'expired' } });
      expect(expired.port).toBeGreaterThan(0);
      const first = code('token-1', { behaviour: 'commit', files: { 'src/token-1.ts': '1\n' } });
      const firstId = await system.enqueue({ payload: first.payload });
      await eventually(async () => (await system.health('runner-e')).status === 503, { what: 'runner E unhealthy', timeoutMs: 120_000 });
      expect((await system.health('runner-e')).body).toMatchObject({ status: 'error', error: { runner: { status: 'down', message: 'agent token expired' } } });
      await eventually(async () => (await system.events(firstId)).some((e) => e.type === 'JobClaimRolledBack'), { what: 'the job back in the queue', timeoutMs: 120_000 }).catch(
        async (error: Error) => {
          throw new Error(`${error.message}; ${await system.describeJob(firstId)}\nrunner E's last output:\n${expired.output().slice(-4000)}`);
        },
      );
      // the runner's expired token is not the job's fault: no attempt spent
      expect(await system.job(firstId)).toMatchObject({ status: 'QUEUED', attempt: 1 });
      const ready = await fetch(`${expired.url}/ready`);
      expect(ready.status).toBe(503);
      expect(await ready.json()).toMatchObject({ status: 'error', error: { 'agent-token': { status: 'down', message: expect.stringMatching(/^the agent token expired: agent token expired \(exit code 3\)/) } } });
      const second = code('token-2', { behaviour: 'commit', files: { 'src/token-2.ts': '2\n' } });
      const secondId = await system.enqueue({ payload: second.payload });
      await system.offered(secondId);
      expect((await system.job(secondId)).status).toBe('QUEUED');
      await system.startRunner('runner-f', { env: LONG_LEASES });
      const [one, two] = await Promise.all([system.terminal(firstId, 180_000), system.terminal(secondId, 180_000)]);
      expect(one).toMatchObject({ status: 'DONE', attempt: 1 });
      expect(two).toMatchObject({ status: 'DONE', attempt: 1 });
      expect(await system.agentStarts(first.record)).toHaveLength(2);
      expect(await system.agentStarts(second.record)).toHaveLength(1);
      expect((await system.health('runner-e')).status).toBe(503);
      await system.leasesReleased(undefined, 60_000);
    }, 600_000);

    it('is recognised by the CLI\'s expired-token message too (exit 1), not only by exit code 3', async () => {
      await Promise.all([system.stopRunner('runner-e'), system.stopRunner('runner-f')]);
      await system.startRunner('runner-h', { kinds: ['PLAN_CHAT'], env: LONG_LEASES });
      const record = system.recordFile('token-message');
      const jobId = await system.enqueue({ kind: 'PLAN_CHAT', maxAttempts: 1, payload: { standIn: { behaviour: 'token_expired_message', recordArgvTo: record } } });
      const rolledBack = await eventually(
        async () => (await system.events(jobId)).find((e) => e.type === 'JobClaimRolledBack')?.data ?? null,
        { what: 'the claim given back', timeoutMs: 120_000 },
      );
      expect(rolledBack).toMatchObject({ cause: 'RUNNER', outcome: 'REQUEUED', nextAttempt: 1, reason: 'agent token expired (exit code 1)' });
      // its one attempt is not spent: the job waits for a runner that can run it
      expect(await system.job(jobId)).toMatchObject({ status: 'QUEUED', attempt: 1 });
      expect(await system.health('runner-h')).toMatchObject({ status: 503, body: { status: 'error', error: { runner: { status: 'down', message: 'agent token expired' } } } });
      expect((await fetch(`${system.runners.get('runner-h')!.url}/ready`)).status).toBe(503);
      await system.cancel(jobId);
      await system.stopRunner('runner-h');
    }, 300_000);
  });
});

/** Every line the stand-in recorded (its start, its calls, its pause, its exit). */
async function recordLines(record: string): Promise<Record<string, unknown>[]> {
  return (await readFile(record, 'utf8').catch(() => ''))
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l));
}

