import { ErrorCode, GantryError, isGantryError, preparationFaultOf, worktreeLeaseEndedOf, type NetDiff, type PlanCheck, type RollbackCause, type VerificationFacts, type VerifyResult } from '@gantry/contracts';

/*
 * What the runner does once the agent of a claimed job has exited (docs/jobs.md): finish with which
 * facts — the job service's finishing rule turns them into DONE, SKIPPED or FAILED —, roll the claim
 * back with which cause, verify and push first, or report nothing more because the claim is gone.
 * Pure: the job run gathers the facts (the agent's exit, what it reported, the claim, the
 * verification and the push) and carries out the step; it asks again after each step that adds a
 * fact (a verification, a push), until the step ends the run.
 */

/** Whose the claim is now: a cancelled run reports its stop, a lost claim reports nothing more. */
export type ClaimStanding = 'held' | 'cancelled' | 'lost';

/** How the agent's process ended. */
export interface AgentExit {
  readonly exitCode: number | null;
  readonly signal: string | null;
  /** Killed at its timeout. */
  readonly timedOut: boolean;
  /** Stopped by the runner's shutdown. */
  readonly aborted: boolean;
  /** Its credentials are no longer accepted. */
  readonly tokenExpired: boolean;
  readonly stdoutTail: string;
  readonly stderrTail: string;
}

/** What the agent reported through its tools during the run. */
export interface AgentReports {
  readonly lastTestResult: { readonly status: string; readonly summary: string } | null;
  readonly lastStatusUpdate: { readonly status: string; readonly summary: string; readonly error?: string | null } | null;
  readonly storyLog: { readonly implementation: number; readonly commits: number; readonly testResults: boolean };
}

/** What the verification of the worktree against base_sha found (the parts the rules read). */
export interface Verification {
  readonly result: VerifyResult;
  readonly headSha: string;
  readonly newCommits: readonly string[];
  readonly netDiffStat: NetDiff;
  readonly workAlreadyOnTarget: boolean;
  readonly diffIdenticalToMergedBranch: boolean;
  readonly planCheck: PlanCheck;
  /** The branch's own commits are all in the target already. */
  readonly branchMerged: boolean;
}

export type PushAttempt =
  | { readonly kind: 'not_tried' }
  | { readonly kind: 'pushed' }
  /** Refused for the job's own reasons (not a lost claim, not an unreachable dependency). */
  | { readonly kind: 'failed'; readonly message: string };

export interface AfterAgent {
  readonly claim: ClaimStanding;
  readonly exit: AgentExit;
  readonly reports: AgentReports;
  /** A code job (it verifies and pushes its work) or not. */
  readonly writesCode: boolean;
  readonly branch: string | null;
  readonly timeoutMs: number;
  /** A worktree was leased and its base_sha recorded: the work can be verified against it. */
  readonly verifiable: boolean;
  /** The pre-check found part of the plan on the target already, so the agent did only the rest. */
  readonly precheckPartial: boolean;
  /** Null until the worktree was verified. */
  readonly verification: Verification | null;
  readonly push: PushAttempt;
}

export type AfterAgentStep =
  /** The run was cancelled: report that the agent is gone, nothing else. */
  | { readonly kind: 'report_stopped' }
  /** The claim is no longer this runner's: report nothing more. */
  | { readonly kind: 'lease_lost' }
  | {
      readonly kind: 'rollback';
      readonly reason: string;
      readonly cause: RollbackCause;
      readonly exitCode?: number;
      /** The agent's credentials expired: this runner takes no more work. */
      readonly stopTakingWork: boolean;
    }
  | {
      readonly kind: 'finish';
      readonly facts: VerificationFacts;
      /** A test result the runner writes into the story log first, when the agent left none. */
      readonly testResult: { readonly status: 'FAILED'; readonly summary: string } | null;
    }
  | { readonly kind: 'verify'; readonly partialCompletion: boolean }
  /** Push the verified head, report the push with the facts, then ask again. */
  | { readonly kind: 'push'; readonly branch: string; readonly headSha: string; readonly facts: VerificationFacts };

export function decideAfterAgent(run: AfterAgent): AfterAgentStep {
  if (run.claim === 'cancelled') return { kind: 'report_stopped' };
  if (run.claim === 'lost') return { kind: 'lease_lost' };
  const { exit } = run;
  const code = exit.exitCode ?? exit.signal;
  // A run the runner stopped ended for the runner's reason, whatever its output said: it is not read
  // as an expired login, which would stop this runner from taking work (docs/jobs.md, "Leases and liveness").
  if (exit.aborted) {
    return { kind: 'rollback', reason: 'the runner shut down while the agent ran; the agent was stopped', cause: 'RUNNER', stopTakingWork: false };
  }
  if (exit.timedOut) {
    const message = `the agent was killed at its timeout of ${run.timeoutMs} ms`;
    // The runner writes what it knows; the finish does not need it (docs/jobs.md, "The story log").
    const testResult = run.reports.lastTestResult === null ? { status: 'FAILED' as const, summary: `No test result: ${message} before reporting one.` } : null;
    return { kind: 'finish', facts: unverifiedFacts(run.writesCode, { kind: 'EXCEPTION', message }), testResult };
  }
  if (exit.tokenExpired) {
    return { kind: 'rollback', reason: `agent token expired (exit code ${code})`, cause: 'RUNNER', ...exitCodeOf(exit), stopTakingWork: true };
  }
  const failure = agentFailure(run.reports);
  if (exit.exitCode !== 0) {
    // A failure the agent reported is a result, whatever its exit code (docs/jobs.md, "A failure the
    // agent reported is a result"); without a report it crashed, and the claim goes back.
    if (failure !== null) return finish(unverifiedFacts(run.writesCode, failure));
    const tail = (exit.stderrTail || exit.stdoutTail).trim().slice(-500);
    return {
      kind: 'rollback',
      reason: `agent exited with code ${code} without finishing the job${tail ? `: ${tail}` : ''}`,
      cause: 'JOB',
      ...exitCodeOf(exit),
      stopTakingWork: false,
    };
  }

  if (!run.writesCode || !run.verifiable) return finish(unverifiedFacts(run.writesCode, failure));
  const verification = run.verification;
  if (verification === null) {
    return { kind: 'verify', partialCompletion: run.reports.lastStatusUpdate?.status === 'PARTIAL' || run.precheckPartial };
  }

  const facts = verifiedFacts(verification, failure);
  switch (run.push.kind) {
    case 'pushed':
      return finish(facts);
    case 'failed':
      return finish({ ...facts, failure: { kind: 'PUSH', message: bounded(run.push.message) } });
    case 'not_tried':
      break;
  }
  // A DONE needs the agent's story log (start, test result, commits); without it the finish is
  // refused, so pushing would only publish work of an attempt that cannot succeed.
  const log = run.reports.storyLog;
  const storyLogComplete = (log.implementation > 0 || run.precheckPartial) && log.testResults && log.commits > 0;
  const pushable = verification.result === 'ALIGNED' || verification.result === 'PARTIAL';
  if (failure === null && storyLogComplete && pushable && run.branch && !verification.branchMerged) {
    // With the facts: if this claim cannot finish, the next one finishes this push (docs/jobs.md,
    // "A verified push is finished, not redone").
    return { kind: 'push', branch: run.branch, headSha: verification.headSha, facts };
  }
  return finish(facts);
}

const finish = (facts: VerificationFacts): AfterAgentStep => ({ kind: 'finish', facts, testResult: null });

const exitCodeOf = (exit: AgentExit): { exitCode?: number } => (exit.exitCode === null ? {} : { exitCode: exit.exitCode });

const NO_DIFF: NetDiff = { filesChanged: 0, insertions: 0, deletions: 0 };

/** The facts of a run whose work was not verified (not a code job, or it ended before verifying). */
export function unverifiedFacts(writesCode: boolean, failure: VerificationFacts['failure']): VerificationFacts {
  return {
    verifyResult: writesCode ? 'EMPTY' : 'NOT_APPLICABLE',
    newCommit: false,
    netDiff: NO_DIFF,
    workAlreadyOnTarget: false,
    diffIdenticalToMergedBranch: false,
    failure,
    cancelled: false,
  };
}

/** The facts of a run whose plan the pre-check found on the target already: nothing for the agent to do. */
export function alreadyDoneFacts(): VerificationFacts {
  return { ...unverifiedFacts(true, null), workAlreadyOnTarget: true };
}

/** The `finish_job` facts (@gantry/contracts) from a verification and the agent's own failure. */
export function verifiedFacts(verification: Verification, failure: VerificationFacts['failure']): VerificationFacts {
  return {
    verifyResult: verification.result,
    newCommit: verification.newCommits.length > 0,
    netDiff: verification.netDiffStat,
    workAlreadyOnTarget: verification.workAlreadyOnTarget,
    diffIdenticalToMergedBranch: verification.diffIdenticalToMergedBranch,
    failure,
    cancelled: false,
    headSha: verification.headSha,
    planCheck: verification.planCheck,
  };
}

/** What the agent itself reported as failing: its test result, else its own FAILED status. */
export function agentFailure(reports: AgentReports): VerificationFacts['failure'] {
  if (reports.lastTestResult?.status === 'FAILED') return { kind: 'TEST', message: bounded(reports.lastTestResult.summary) };
  const update = reports.lastStatusUpdate;
  if (update?.status === 'FAILED') return { kind: 'EXCEPTION', message: bounded(update.error ?? update.summary) };
  return null;
}

/** A failure's message as the facts carry it: never empty, at most 4000 characters. */
export function bounded(text: string): string {
  const trimmed = text.trim() || 'no details';
  return trimmed.length > 4000 ? `${trimmed.slice(0, 3997)}...` : trimmed;
}

// ---- refusals along the way ------------------------------------------------------------------

/** Refusals that mean the claim is no longer this runner's. */
const CLAIM_GONE: ReadonlySet<string> = new Set([ErrorCode.STALE_FENCE, ErrorCode.INVALID_TRANSITION, ErrorCode.NOT_FOUND]);
/** Failures of a dependency rather than of the job (docs/jobs.md, "Attempts"). */
const DEPENDENCY_FAILURES: ReadonlySet<string> = new Set([ErrorCode.TIMEOUT, ErrorCode.UNAVAILABLE, ErrorCode.LOCK_TIMEOUT]);

/** A refusal with this code says the claim is no longer this runner's. */
export const claimGone = (code: string): boolean => CLAIM_GONE.has(code);

/**
 * What an acquire's refusal means for the claim (docs/worktrees.md, "An acquire whose lease ended";
 * docs/jobs.md, "Attempts"). A lease that ended with its claim — asked again after the job service
 * expired the claim, say, the runner cut off meanwhile — says the claim is gone: STALE_FENCE as it came,
 * so the run gives the job up sending nothing more under the claim. Any other STALE_FENCE (a lease the
 * worktree service ended on its own: expired while the runner was cut off, withdrawn at its restart)
 * says nothing of the claim: the worktree service's failure (UNAVAILABLE), the claim handed back as a
 * dependency's. An unanswered or timed-out acquire stays a dependency's failure, and a lease the origin
 * refuses for what the job names (its base ref: `fault` JOB) the job's. Anything else the worktree
 * service refuses is about this host, not the job — a path outside the root, a full disk, a shared clone
 * it cannot use, a worktree service of another version that refuses the request — since what the job
 * names was checked before the acquire with the worktree service's own checks (jobWorkspaceOf): a
 * host refusal (isHostRefusal), handed back as the runner's.
 */
export function acquireRefusal<E>(error: E): E | GantryError {
  if (!isGantryError(error)) return error;
  if (error.code === ErrorCode.STALE_FENCE) {
    if (worktreeLeaseEndedOf(error)?.claimEnded) return error;
    return new GantryError(ErrorCode.UNAVAILABLE, `the worktree service gave no worktree: ${error.message}`);
  }
  if (DEPENDENCY_FAILURES.has(error.code) || CLAIM_GONE.has(error.code) || preparationFaultOf(error) === 'JOB') return error;
  return hostRefusal(`this host's worktree service refused the worktree: ${error.message}`, error);
}

/** A refusal of this runner's host rather than of the job: rolled back RUNNER (no attempt spent), and the runner backs off. */
export function hostRefusal(message: string, cause?: GantryError): GantryError {
  return new GantryError(cause?.code ?? ErrorCode.PRECONDITION_FAILED, message, { ...cause?.details, hostRefusal: true });
}

export const isHostRefusal = (error: unknown): boolean => isGantryError(error) && error.details?.['hostRefusal'] === true;

/** The cause a run that failed with this error is rolled back with: its host's (RUNNER), a dependency's, or the job's. */
export function rollbackCauseOf(error: unknown): RollbackCause {
  if (isHostRefusal(error)) return 'RUNNER';
  return isGantryError(error) && DEPENDENCY_FAILURES.has(error.code) ? 'DEPENDENCY' : 'JOB';
}

/**
 * A push refused with this code (null: not a GantryError) is the job's failure, finished as PUSH;
 * a lost claim or an unreachable dependency is not — the run fails and is rolled back instead.
 */
export const isPushFailureOfTheJob = (code: string | null): boolean => code !== null && !CLAIM_GONE.has(code) && !DEPENDENCY_FAILURES.has(code);

/** A finish refused with this code goes back as a rollback (JOB): a DONE without the agent's story log, in the job service's own words. */
export const refusedFinishRollsBack = (code: string): boolean => code === ErrorCode.PRECONDITION_FAILED;
