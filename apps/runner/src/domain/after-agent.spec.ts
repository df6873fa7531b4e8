import { ErrorCode, GantryError, VerificationFactsSchema, worktreeLeaseEndedError, type VerificationFacts } from '@gantry/contracts';
import {
  acquireRefusal,
  agentFailure,
  alreadyDoneFacts,
  bounded,
  claimGone,
  decideAfterAgent,
  isPushFailureOfTheJob,
  refusedFinishRollsBack,
  rollbackCauseOf,
  unverifiedFacts,
  type AfterAgent,
  type AfterAgentStep,
  type Verification,
} from './after-agent.js';

const HEAD = '9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a291807';
const DIFF = { filesChanged: 3, insertions: 40, deletions: 7 };
const NO_DIFF = { filesChanged: 0, insertions: 0, deletions: 0 };

const clean = { exitCode: 0, signal: null, timedOut: false, aborted: false, tokenExpired: false, stdoutTail: '', stderrTail: '' };
const fullStoryLog = { lastTestResult: { status: 'PASSED', summary: '12 passed' }, lastStatusUpdate: null, storyLog: { implementation: 1, commits: 2, testResults: true } };
const aligned: Verification = {
  result: 'ALIGNED',
  headSha: HEAD,
  newCommits: ['c1', 'c2'],
  netDiffStat: DIFF,
  workAlreadyOnTarget: false,
  diffIdenticalToMergedBranch: false,
  planCheck: 'NO_EXPECTED_CHANGES',
  branchMerged: false,
};

/** A code job whose agent exited 0 after a full story log, on a leased worktree, not verified yet. */
const codeRun: AfterAgent = {
  claim: 'held',
  exit: clean,
  reports: fullStoryLog,
  writesCode: true,
  branch: 'feature/checkout',
  timeoutMs: 600_000,
  verifiable: true,
  precheckPartial: false,
  verification: null,
  push: { kind: 'not_tried' },
};
const verified = (over: Partial<Verification> = {}, run: Partial<AfterAgent> = {}): AfterAgent => ({ ...codeRun, verification: { ...aligned, ...over }, ...run });

const verifiedFacts = (over: Partial<VerificationFacts> = {}): VerificationFacts => ({
  verifyResult: 'ALIGNED',
  newCommit: true,
  netDiff: DIFF,
  workAlreadyOnTarget: false,
  diffIdenticalToMergedBranch: false,
  failure: null,
  cancelled: false,
  headSha: HEAD,
  planCheck: 'NO_EXPECTED_CHANGES',
  ...over,
});
const unverified = (verifyResult: 'EMPTY' | 'NOT_APPLICABLE', failure: VerificationFacts['failure'] = null): VerificationFacts => ({
  verifyResult,
  newCommit: false,
  netDiff: NO_DIFF,
  workAlreadyOnTarget: false,
  diffIdenticalToMergedBranch: false,
  failure,
  cancelled: false,
});
const finish = (facts: VerificationFacts, testResult: { status: 'FAILED'; summary: string } | null = null): AfterAgentStep => ({ kind: 'finish', facts, testResult });

describe('after the agent exited (docs/jobs.md)', () => {
  it.each<[string, AfterAgent, AfterAgentStep]>([
    // the claim first: nothing is reported under a claim that is not this runner's
    ['a cancelled run reports its stop, whatever the agent did', { ...codeRun, claim: 'cancelled', exit: { ...clean, exitCode: 1 } }, { kind: 'report_stopped' }],
    ['a lost claim reports nothing more', { ...codeRun, claim: 'lost', exit: { ...clean, tokenExpired: true } }, { kind: 'lease_lost' }],
    ['a claim lost while verifying: nothing is pushed', verified({}, { claim: 'lost' }), { kind: 'lease_lost' }],
    ['a run cancelled while verifying reports its stop, nothing is pushed', verified({}, { claim: 'cancelled' }), { kind: 'report_stopped' }],
    // how the agent's process ended
    [
      'an expired agent token → roll back (RUNNER) with the exit code, and take no more work',
      { ...codeRun, exit: { ...clean, exitCode: 3, tokenExpired: true } },
      { kind: 'rollback', reason: 'agent token expired (exit code 3)', cause: 'RUNNER', exitCode: 3, stopTakingWork: true },
    ],
    [
      'an expired token seen in the output of an agent killed by a signal → roll back (RUNNER) without an exit code',
      { ...codeRun, exit: { ...clean, exitCode: null, signal: 'SIGTERM', tokenExpired: true } },
      { kind: 'rollback', reason: 'agent token expired (exit code SIGTERM)', cause: 'RUNNER', stopTakingWork: true },
    ],
    [
      'killed at its timeout, its output matching the token-expired pattern → the timeout, not an expired token: the runner takes work on',
      { ...codeRun, exit: { ...clean, exitCode: null, signal: 'SIGTERM', timedOut: true, tokenExpired: true } },
      finish(unverified('EMPTY', { kind: 'EXCEPTION', message: 'the agent was killed at its timeout of 600000 ms' })),
    ],
    [
      'stopped by the runner\'s shutdown, its output matching the token-expired pattern → the shutdown, not an expired token',
      { ...codeRun, exit: { ...clean, exitCode: null, signal: 'SIGTERM', aborted: true, tokenExpired: true } },
      { kind: 'rollback', reason: 'the runner shut down while the agent ran; the agent was stopped', cause: 'RUNNER', stopTakingWork: false },
    ],
    [
      'the runner shut down while the agent ran → roll back (RUNNER)',
      { ...codeRun, exit: { ...clean, exitCode: null, signal: 'SIGTERM', aborted: true } },
      { kind: 'rollback', reason: 'the runner shut down while the agent ran; the agent was stopped', cause: 'RUNNER', stopTakingWork: false },
    ],
    [
      'killed at its timeout without a test result → the runner logs a FAILED test result, finish with an EXCEPTION',
      { ...codeRun, reports: { ...fullStoryLog, lastTestResult: null }, exit: { ...clean, exitCode: null, signal: 'SIGKILL', timedOut: true } },
      finish(unverified('EMPTY', { kind: 'EXCEPTION', message: 'the agent was killed at its timeout of 600000 ms' }), {
        status: 'FAILED',
        summary: 'No test result: the agent was killed at its timeout of 600000 ms before reporting one.',
      }),
    ],
    [
      'killed at its timeout after a test result → finish with an EXCEPTION, the agent’s test result stands',
      { ...codeRun, exit: { ...clean, exitCode: null, signal: 'SIGKILL', timedOut: true } },
      finish(unverified('EMPTY', { kind: 'EXCEPTION', message: 'the agent was killed at its timeout of 600000 ms' })),
    ],
    [
      'a non-code job killed at its timeout → finish NOT_APPLICABLE with an EXCEPTION',
      { ...codeRun, writesCode: false, exit: { ...clean, exitCode: null, signal: 'SIGKILL', timedOut: true } },
      finish(unverified('NOT_APPLICABLE', { kind: 'EXCEPTION', message: 'the agent was killed at its timeout of 600000 ms' })),
    ],
    [
      'a non-zero exit after the agent reported a FAILED test → finish with the TEST failure (a result, not a crash)',
      { ...codeRun, exit: { ...clean, exitCode: 1 }, reports: { ...fullStoryLog, lastTestResult: { status: 'FAILED', summary: ' cart.spec.ts: expected 3, got 2 ' } } },
      finish(unverified('EMPTY', { kind: 'TEST', message: 'cart.spec.ts: expected 3, got 2' })),
    ],
    [
      'a non-zero exit after the agent reported FAILED → finish with its error as an EXCEPTION',
      { ...codeRun, exit: { ...clean, exitCode: 2 }, reports: { ...fullStoryLog, lastStatusUpdate: { status: 'FAILED', summary: 'gave up', error: 'the API is down' } } },
      finish(unverified('EMPTY', { kind: 'EXCEPTION', message: 'the API is down' })),
    ],
    [
      'a non-zero exit without a report → roll back (JOB) with the exit code and the end of its output',
      { ...codeRun, exit: { ...clean, exitCode: 137, stderrTail: 'Segmentation fault\n' } },
      { kind: 'rollback', reason: 'agent exited with code 137 without finishing the job: Segmentation fault', cause: 'JOB', exitCode: 137, stopTakingWork: false },
    ],
    [
      'killed by a signal without a report and without output → roll back (JOB), the signal named',
      { ...codeRun, exit: { ...clean, exitCode: null, signal: 'SIGSEGV' } },
      { kind: 'rollback', reason: 'agent exited with code SIGSEGV without finishing the job', cause: 'JOB', stopTakingWork: false },
    ],
    // a clean exit
    ['a non-code job → finish NOT_APPLICABLE, nothing verified', { ...codeRun, writesCode: false }, finish(unverified('NOT_APPLICABLE'))],
    [
      'a non-code job whose agent reported FAILED → finish NOT_APPLICABLE with the failure',
      { ...codeRun, writesCode: false, reports: { ...fullStoryLog, lastStatusUpdate: { status: 'FAILED', summary: 'no access to the tracker' } } },
      finish(unverified('NOT_APPLICABLE', { kind: 'EXCEPTION', message: 'no access to the tracker' })),
    ],
    ['a code job without a leased worktree or base_sha → finish EMPTY, nothing verified', { ...codeRun, verifiable: false }, finish(unverified('EMPTY'))],
    ['a code job on its leased worktree → verify first', codeRun, { kind: 'verify', partialCompletion: false }],
    [
      'the agent reported PARTIAL → verify as partial work',
      { ...codeRun, reports: { ...fullStoryLog, lastStatusUpdate: { status: 'PARTIAL', summary: 'half of it' } } },
      { kind: 'verify', partialCompletion: true },
    ],
    ['the pre-check found part of the plan on the target → verify as partial work', { ...codeRun, precheckPartial: true }, { kind: 'verify', partialCompletion: true }],
    // after the verification
    ['ALIGNED with a full story log → push the verified head, with the facts', verified(), { kind: 'push', branch: 'feature/checkout', headSha: HEAD, facts: verifiedFacts() }],
    [
      'PARTIAL with a full story log → push',
      verified({ result: 'PARTIAL' }),
      { kind: 'push', branch: 'feature/checkout', headSha: HEAD, facts: verifiedFacts({ verifyResult: 'PARTIAL' }) },
    ],
    [
      'no implementation entry, but the pre-check found part of the plan on the target → push',
      verified({}, { precheckPartial: true, reports: { ...fullStoryLog, storyLog: { implementation: 0, commits: 1, testResults: true } } }),
      { kind: 'push', branch: 'feature/checkout', headSha: HEAD, facts: verifiedFacts() },
    ],
    ['pushed → finish with the verified facts', verified({}, { push: { kind: 'pushed' } }), finish(verifiedFacts())],
    [
      'the push refused for the job’s own reason → finish with a PUSH failure',
      verified({}, { push: { kind: 'failed', message: ' rejected: non-fast-forward ' } }),
      finish(verifiedFacts({ failure: { kind: 'PUSH', message: 'rejected: non-fast-forward' } })),
    ],
    [
      'no implementation entry → no push (the finish would be refused), finish with the facts',
      verified({}, { reports: { ...fullStoryLog, storyLog: { implementation: 0, commits: 2, testResults: true } } }),
      finish(verifiedFacts()),
    ],
    ['no commit logged → no push', verified({}, { reports: { ...fullStoryLog, storyLog: { implementation: 1, commits: 0, testResults: true } } }), finish(verifiedFacts())],
    [
      'no test result logged → no push',
      verified({}, { reports: { ...fullStoryLog, lastTestResult: null, storyLog: { implementation: 1, commits: 2, testResults: false } } }),
      finish(verifiedFacts()),
    ],
    [
      'a FAILED test in a clean exit → no push, finish with the TEST failure',
      verified({}, { reports: { ...fullStoryLog, lastTestResult: { status: 'FAILED', summary: 'cart.spec.ts' } } }),
      finish(verifiedFacts({ failure: { kind: 'TEST', message: 'cart.spec.ts' } })),
    ],
    [
      'EMPTY → no push, finish with the facts (the finishing rule decides SKIPPED or FAILED)',
      verified({ result: 'EMPTY', newCommits: [], netDiffStat: NO_DIFF, workAlreadyOnTarget: true }),
      finish(verifiedFacts({ verifyResult: 'EMPTY', newCommit: false, netDiff: NO_DIFF, workAlreadyOnTarget: true })),
    ],
    ['DIVERGENT → no push, finish with the facts', verified({ result: 'DIVERGENT' }), finish(verifiedFacts({ verifyResult: 'DIVERGENT' }))],
    [
      'the branch is merged already → no push, finish with the facts',
      verified({ branchMerged: true, workAlreadyOnTarget: true }),
      finish(verifiedFacts({ workAlreadyOnTarget: true })),
    ],
    ['no branch to push to → finish with the facts', verified({}, { branch: null }), finish(verifiedFacts())],
  ])('%s', (_case, run, step) => {
    expect(decideAfterAgent(run)).toEqual(step);
  });

  it('every finish carries facts the finish_job contract accepts', () => {
    const runs: AfterAgent[] = [
      { ...codeRun, writesCode: false },
      { ...codeRun, exit: { ...clean, exitCode: null, signal: 'SIGKILL', timedOut: true } },
      verified({}, { push: { kind: 'pushed' } }),
      verified({}, { push: { kind: 'failed', message: '' } }),
    ];
    for (const run of runs) {
      const step = decideAfterAgent(run);
      if (step.kind !== 'finish') throw new Error(`expected a finish, got ${step.kind}`);
      expect(VerificationFactsSchema.safeParse(step.facts).error).toBeUndefined();
    }
  });
});

describe('the facts of a run and the agent’s failure', () => {
  it('a failure message is never empty and at most 4000 characters', () => {
    expect(bounded('   ')).toBe('no details');
    expect(bounded('x'.repeat(5000))).toHaveLength(4000);
    expect(bounded('x'.repeat(5000)).endsWith('...')).toBe(true);
  });

  it('the agent’s FAILED test result wins over its FAILED status', () => {
    expect(
      agentFailure({
        lastTestResult: { status: 'FAILED', summary: 'red' },
        lastStatusUpdate: { status: 'FAILED', summary: 'stopped', error: 'boom' },
        storyLog: { implementation: 0, commits: 0, testResults: true },
      }),
    ).toEqual({ kind: 'TEST', message: 'red' });
    expect(agentFailure({ lastTestResult: null, lastStatusUpdate: { status: 'DONE', summary: 'ok' }, storyLog: { implementation: 1, commits: 1, testResults: false } })).toBeNull();
  });

  it('a plan found on the target already finishes as work already on the target, without a diff', () => {
    expect(alreadyDoneFacts()).toEqual({ ...unverifiedFacts(true, null), workAlreadyOnTarget: true });
    expect(VerificationFactsSchema.safeParse(alreadyDoneFacts()).error).toBeUndefined();
  });
});

describe('refusals along the way', () => {
  it.each<[string, string | null, { claimGone: boolean; cause: 'JOB' | 'DEPENDENCY'; pushFailureOfTheJob: boolean }]>([
    ['STALE_FENCE: the claim is gone', ErrorCode.STALE_FENCE, { claimGone: true, cause: 'JOB', pushFailureOfTheJob: false }],
    ['INVALID_TRANSITION: the claim is gone', ErrorCode.INVALID_TRANSITION, { claimGone: true, cause: 'JOB', pushFailureOfTheJob: false }],
    ['NOT_FOUND: the claim is gone', ErrorCode.NOT_FOUND, { claimGone: true, cause: 'JOB', pushFailureOfTheJob: false }],
    ['TIMEOUT: a dependency failed', ErrorCode.TIMEOUT, { claimGone: false, cause: 'DEPENDENCY', pushFailureOfTheJob: false }],
    ['UNAVAILABLE: a dependency failed', ErrorCode.UNAVAILABLE, { claimGone: false, cause: 'DEPENDENCY', pushFailureOfTheJob: false }],
    ['LOCK_TIMEOUT: a dependency failed', ErrorCode.LOCK_TIMEOUT, { claimGone: false, cause: 'DEPENDENCY', pushFailureOfTheJob: false }],
    ['PRECONDITION_FAILED: the job’s own failure', ErrorCode.PRECONDITION_FAILED, { claimGone: false, cause: 'JOB', pushFailureOfTheJob: true }],
    ['not a GantryError: the job’s failure, never a push result', null, { claimGone: false, cause: 'JOB', pushFailureOfTheJob: false }],
  ])('%s', (_case, code, expected) => {
    expect({ claimGone: code !== null && claimGone(code), cause: rollbackCauseOf(code === null ? new Error('x') : new GantryError(code as ErrorCode, 'x')), pushFailureOfTheJob: isPushFailureOfTheJob(code) }).toEqual(expected);
  });

  it('an acquire whose lease ended with its claim gives the claim up (STALE_FENCE, no hand-back); a lease the worktree service ended on its own is its failure (UNAVAILABLE, handed back DEPENDENCY)', () => {
    const leaseId = '0b7a4c3e-2f7d-4b8e-9a51-6c2d1e0f9a11';
    const withClaim = worktreeLeaseEndedError({ leaseId, status: 'released', reason: 'job_terminal', claimEnded: true });
    expect(acquireRefusal(withClaim)).toBe(withClaim);
    expect(claimGone(acquireRefusal(withClaim).code)).toBe(true);

    const expired = acquireRefusal(worktreeLeaseEndedError({ leaseId, status: 'stale_released', reason: 'expired', claimEnded: false }));
    expect(expired).toMatchObject({ code: ErrorCode.UNAVAILABLE, message: expect.stringMatching(/^the worktree service gave no worktree: worktree lease .* has ended \(stale_released: expired\)/) });
    expect(rollbackCauseOf(expired)).toBe('DEPENDENCY');
    // A STALE_FENCE that says nothing of a lease (an older worktree service, a claim it knows has ended): as before, the worktree service's.
    expect(acquireRefusal(new GantryError(ErrorCode.STALE_FENCE, 'claim 1 of job j has ended (QUEUED)')).code).toBe(ErrorCode.UNAVAILABLE);
    // A dependency's failure is as it was.
    const timedOut = new GantryError(ErrorCode.LOCK_TIMEOUT, 'stayed locked');
    expect(acquireRefusal(timedOut)).toBe(timedOut);
  });

  it("a lease the origin refuses for what the job names is the job's; any other refusal of the worktree service is the host's (RUNNER)", () => {
    const noBase = new GantryError(ErrorCode.PRECONDITION_FAILED, 'worktree k could not be prepared: base ref v9 is not a branch, tag or commit of the origin', { fault: 'JOB' });
    expect(acquireRefusal(noBase)).toBe(noBase);
    expect(rollbackCauseOf(acquireRefusal(noBase))).toBe('JOB');
    for (const refused of [
      new GantryError(ErrorCode.PRECONDITION_FAILED, 'worktree k could not be prepared: No space left on device', { fault: 'HOST' }),
      new GantryError(ErrorCode.PRECONDITION_FAILED, 'worktree k could not be prepared: unknown'),
      new GantryError(ErrorCode.INVALID_COMMAND, 'invalid worktrees.acquire_worktree request: lockTimeoutMs: unrecognized'),
      new GantryError(ErrorCode.INTERNAL, 'internal error'),
    ]) {
      expect({ cause: rollbackCauseOf(acquireRefusal(refused)), code: (acquireRefusal(refused) as GantryError).code }).toEqual({ cause: 'RUNNER', code: refused.code });
    }
  });

  it('only a finish refused for its precondition (a DONE without the story log) is rolled back', () => {
    expect(refusedFinishRollsBack(ErrorCode.PRECONDITION_FAILED)).toBe(true);
    expect(refusedFinishRollsBack(ErrorCode.STALE_FENCE)).toBe(false);
  });
});
