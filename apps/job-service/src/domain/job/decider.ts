import {
  effortForThinkingBudget,
  ErrorCode,
  failedChecksNamed,
  GantryError,
  isTerminalJobStatus,
  ranOutWhileServed,
  resolveAgentConfig,
  type AgentConfig,
} from '@gantry/contracts';
import { unknownProduct, unleasableLease } from '../product/decider.js';
import type { JobCommand, UnderLease } from './commands.js';
import type { JobEvent } from './events.js';
import { decideFinish } from './finishing-rule.js';
import { addMs, defaultLeaseDurationMs, freeRequeuePauseMs, isLeaseExpired, MAX_FREE_REQUEUES } from './lease-policy.js';
import { evolveJob, initialJobState, jobExists, movesTask, type ActiveLease, type Job, type JobState } from './state.js';

/**
 * The job aggregate (docs/jobs.md, "The lifecycle"): QUEUED → CLAIMED → RUNNING → DONE | FAILED | SKIPPED | CANCELLED,
 * CLAIMED/RUNNING → QUEUED (attempt + 1) on lease expiry or rollback, FAILED after max attempts.
 * Every command under a claim is fenced: only the current grant's token, held by its runner,
 * before its expiry, is obeyed; anything else is STALE_FENCE and emits nothing.
 */
export function decideJob(command: JobCommand, state: JobState): JobEvent[] {
  switch (command.type) {
    case 'EnqueueJob': {
      const d = command.data;
      if (jobExists(state)) throw refuse(ErrorCode.INVALID_TRANSITION, `job ${d.jobId} already exists`);
      if (d.kind === 'REVIEW' && d.agentProfile === null) {
        throw refuse(ErrorCode.PRECONDITION_FAILED, `a REVIEW job takes its model and thinking budget from an agent profile, and job ${d.jobId} has none`);
      }
      if (d.product === null) throw unknownProduct(d.productId);
      // Named or derived, the branch is the job's worktree lease's: a lease the worktree service refuses is refused here.
      const names = d.branch === null ? null : { repositoryUrl: d.product.cloneUrl, branch: d.branch, baseRef: d.baseRef ?? d.product.targetBranch };
      const unleasable = names === null ? null : unleasableLease(names, 'jobs.enqueue_job', d.baseRef !== null);
      if (unleasable) throw unleasable;
      return [
        {
          type: 'JobEnqueued',
          data: {
            jobId: d.jobId,
            kind: d.kind,
            productId: d.productId,
            storyId: d.storyId,
            sprintId: d.sprintId,
            sprintRunId: d.sprintRunId,
            taskId: d.taskId,
            prompt: d.prompt,
            payload: d.payload,
            configOverrides: d.configOverrides,
            agentProfile: d.agentProfile,
            reason: d.reason,
            excludeFromCoalescing: d.excludeFromCoalescing,
            idempotencyKey: d.idempotencyKey,
            requestHash: d.requestHash,
            baseRef: d.baseRef,
            maxAttempts: d.maxAttempts,
            enqueuedAt: d.now,
            repository: d.product.repository,
            repositoryUrl: d.product.cloneUrl,
            branch: d.branch,
            targetBranch: d.product.targetBranch,
            storyTaskIds: d.storyTaskIds,
          },
        },
      ];
    }

    case 'CoalesceIntoJob': {
      const d = command.data;
      const job = existing(state, d.jobId);
      if (job.status !== 'QUEUED') {
        throw refuse(ErrorCode.INVALID_TRANSITION, `job ${job.jobId} is ${job.status} and no longer takes coalesced requests`);
      }
      if (job.excludeFromCoalescing) {
        throw refuse(ErrorCode.PRECONDITION_FAILED, `job ${job.jobId} is excluded from coalescing`);
      }
      // A request is refused the branch it names whichever way the run queue routes it (the job it joins has the same repository).
      const baseRef = job.baseRef ?? job.targetBranch;
      const names = d.branch === null || job.repositoryUrl === null || baseRef === null ? null : { repositoryUrl: job.repositoryUrl, branch: d.branch, baseRef };
      const unleasable = names === null ? null : unleasableLease(names, 'jobs.enqueue_job', job.baseRef !== null);
      if (unleasable) throw unleasable;
      return [
        {
          type: 'JobCoalesced',
          data: { jobId: job.jobId, payload: d.payload, prompt: d.prompt, idempotencyKey: d.idempotencyKey, requestHash: d.requestHash, coalescedAt: d.now },
        },
      ];
    }

    case 'ClaimJob': {
      const d = command.data;
      const job = existing(state, d.jobId);
      if (!d.kinds.includes(job.kind)) {
        throw refuse(ErrorCode.PRECONDITION_FAILED, `runner ${d.runnerId} runs ${d.kinds.join(', ')}; job ${job.jobId} is a ${job.kind} job`);
      }
      if (job.status === 'CLAIMED' || job.status === 'RUNNING') {
        const lease = job.lease!;
        throw refuse(
          ErrorCode.ALREADY_CLAIMED,
          `job ${job.jobId} is already claimed by runner ${lease.runnerId} (lease ${lease.token}, until ${lease.expiresAt})`,
          { runnerId: lease.runnerId, leaseToken: lease.token, leaseExpiresAt: lease.expiresAt },
        );
      }
      if (job.status !== 'QUEUED') throw refuse(ErrorCode.INVALID_TRANSITION, `job ${job.jobId} is ${job.status} and can no longer be claimed`);
      requirePauseOver(job, d.now);
      const agentConfig = resolveConfig(job);
      return [
        {
          type: 'JobClaimed',
          data: {
            jobId: job.jobId,
            runnerId: d.runnerId,
            leaseToken: job.lastLeaseToken + 1,
            attempt: job.attempt,
            leaseExpiresAt: addMs(d.now, d.leaseDurationMs ?? defaultLeaseDurationMs(job.kind)),
            agentConfig,
            effort: effortForThinkingBudget(agentConfig.thinkingBudget),
            agentProfileId: job.agentProfile?.id ?? null,
            baseRef: job.baseRef,
            baseSha: d.baseSha,
            claimedAt: d.now,
          },
        },
      ];
    }

    case 'RenewJobLease': {
      const d = command.data;
      const { job } = fenced(state, d, 'renew the lease');
      return [
        {
          type: 'JobLeaseRenewed',
          data: { jobId: job.jobId, runnerId: d.runnerId, leaseToken: d.leaseToken, leaseExpiresAt: addMs(d.now, d.leaseDurationMs ?? defaultLeaseDurationMs(job.kind)), renewedAt: d.now },
        },
      ];
    }

    case 'StartJob': {
      const d = command.data;
      const { job } = fenced(state, d, 'start');
      if (job.status === 'RUNNING') throw refuse(ErrorCode.INVALID_TRANSITION, `job ${job.jobId} has already started`);
      if ((d.adoptRunOf ?? null) !== null) {
        const run = job.unfinishedRun ?? null;
        if (!run || run.leaseToken !== d.adoptRunOf) {
          throw refuse(ErrorCode.PRECONDITION_FAILED, `job ${job.jobId} has no unfinished run of claim ${d.adoptRunOf} to take over`);
        }
        return [
          {
            type: 'JobStarted',
            data: { jobId: job.jobId, runnerId: d.runnerId, leaseToken: d.leaseToken, baseSha: run.baseSha, branch: run.branch, adoptedRunOf: run.leaseToken, startedAt: d.now },
          },
        ];
      }
      if (d.adoptPushOf !== null) {
        const pushed = job.verifiedPush;
        if (!pushed || pushed.leaseToken !== d.adoptPushOf) {
          throw refuse(ErrorCode.PRECONDITION_FAILED, `job ${job.jobId} has no verified push of claim ${d.adoptPushOf} to finish`);
        }
        return [
          {
            type: 'JobStarted',
            data: {
              jobId: job.jobId,
              runnerId: d.runnerId,
              leaseToken: d.leaseToken,
              baseSha: pushed.baseSha,
              branch: pushed.branch,
              adoptedPushOf: pushed.leaseToken,
              startedAt: d.now,
            },
          },
        ];
      }
      if (d.baseSha !== null && job.baseSha !== null && d.baseSha !== job.baseSha) {
        throw refuse(ErrorCode.PRECONDITION_FAILED, `job ${job.jobId} was claimed on base ${job.baseSha}, but the worktree starts from ${d.baseSha}`);
      }
      return [
        {
          type: 'JobStarted',
          data: {
            jobId: job.jobId,
            runnerId: d.runnerId,
            leaseToken: d.leaseToken,
            baseSha: d.baseSha ?? job.baseSha,
            branch: d.branch,
            adoptedPushOf: null,
            startedAt: d.now,
          },
        },
      ];
    }

    case 'LogImplementation': {
      const d = command.data;
      const { job } = fenced(state, d, 'log the implementation');
      return [
        {
          type: 'ImplementationLogged',
          data: {
            jobId: job.jobId,
            runnerId: d.runnerId,
            leaseToken: d.leaseToken,
            taskId: d.taskId ?? job.taskId,
            branch: d.branch,
            plan: d.plan,
            summary: d.summary,
            alreadyPresent: d.alreadyPresent,
            loggedAt: d.now,
          },
        },
      ];
    }

    case 'LogCommit': {
      const d = command.data;
      const { job } = fenced(state, d, 'log a commit');
      return [
        {
          type: 'CommitLogged',
          data: { jobId: job.jobId, runnerId: d.runnerId, leaseToken: d.leaseToken, commitSha: d.commitSha, message: d.message, summary: d.summary, loggedAt: d.now },
        },
      ];
    }

    case 'LogTestResult': {
      const d = command.data;
      const { job } = fenced(state, d, 'log a test result');
      return [
        {
          type: 'TestResultLogged',
          data: { jobId: job.jobId, runnerId: d.runnerId, leaseToken: d.leaseToken, status: d.status, summary: d.summary, loggedAt: d.now },
        },
      ];
    }

    case 'ReportPush': {
      const d = command.data;
      const { job } = fenced(state, d, 'report a push');
      requireStarted(job, 'report a push');
      return [
        {
          type: 'JobPushReported',
          data: {
            jobId: job.jobId,
            runnerId: d.runnerId,
            leaseToken: d.leaseToken,
            branch: d.branch,
            headSha: d.headSha,
            pushedAt: d.pushed ? d.now : null,
            facts: d.facts,
            reportedAt: d.now,
          },
        },
      ];
    }

    case 'FinishJob': {
      const d = command.data;
      const stopped = runStoppedAfterCancel(state, d);
      if (stopped) return [stopped];
      const { job } = fenced(state, d, 'finish');
      // CANCELLED is a user's decision (cancel_job), never a runner's: the one cancelled finish a runner
      // sends is the stop report under the claim a cancel revoked, answered above.
      if (d.facts.cancelled) {
        throw refuse(
          ErrorCode.PRECONDITION_FAILED,
          `cannot finish job ${job.jobId} as cancelled: no cancel was requested for it (a job is cancelled with cancel_job)`,
          { cancelRequested: false },
        );
      }
      requireStarted(job, 'finish');
      if (d.facts.verifyResult === 'NOT_APPLICABLE' && writesCode(job)) {
        throw refuse(ErrorCode.PRECONDITION_FAILED, `job ${job.jobId} is a ${job.kind} job: its finish needs a verify result, not NOT_APPLICABLE`);
      }
      const outcome = decideFinish({ ...d.facts, push: job.headSha === null ? null : { headSha: job.headSha, pushedAt: job.pushedAt } });
      // The story log backs a claim that the work is done (docs/jobs.md, "The story log"); a failure
      // the runner found is its own record, and refusing it would only turn it into a retry.
      if (outcome.jobStatus === 'DONE' || outcome.jobStatus === 'SKIPPED') requireStoryLog(job, outcome.jobStatus === 'DONE' && d.facts.newCommit);
      if (outcome.jobStatus === 'DONE' && d.facts.newCommit && writesCode(job)) requirePushedHead(job, d.facts.headSha ?? null);
      return [
        {
          type: 'JobFinished',
          data: {
            jobId: job.jobId,
            runnerId: d.runnerId,
            leaseToken: d.leaseToken,
            jobStatus: outcome.jobStatus,
            taskStatus: movesTask(job) ? outcome.taskStatus : null,
            error: outcome.error,
            facts: d.facts,
            baseSha: job.baseSha,
            headSha: job.headSha,
            pushedAt: outcome.pushedAt,
            finishedAt: d.now,
          },
        },
      ];
    }

    case 'RollbackClaim': {
      const d = command.data;
      const { job } = fenced(state, d, 'roll back the claim');
      const end = claimEnd(job, `the claim of attempt ${job.attempt} was rolled back (${d.reason})`, d.cause !== 'JOB');
      const paused = end.nextAttempt === job.attempt && job.verifiedPush === null;
      return [
        {
          type: 'JobClaimRolledBack',
          data: {
            jobId: job.jobId,
            runnerId: d.runnerId,
            leaseToken: d.leaseToken,
            ...end,
            reason: d.reason,
            exitCode: d.exitCode,
            cause: d.cause,
            offerNotBefore: paused ? addMs(d.now, freeRequeuePauseMs((job.freeRequeues ?? 0) + 1)) : null,
            rolledBackAt: d.now,
          },
        },
      ];
    }

    case 'ExpireJobLease': {
      const d = command.data;
      const job = existing(state, d.jobId);
      if (d.leaseToken !== job.lastLeaseToken) {
        throw refuse(ErrorCode.STALE_FENCE, `lease ${d.leaseToken} of job ${job.jobId} is not its current lease (${job.lastLeaseToken})`, fenceDetails(job));
      }
      if (!job.lease) throw refuse(ErrorCode.INVALID_TRANSITION, `lease ${d.leaseToken} of job ${job.jobId} has already ended (${job.lastLeaseEnd})`);
      if (!isLeaseExpired(job.lease.expiresAt, d.now)) {
        throw refuse(ErrorCode.PRECONDITION_FAILED, `lease ${d.leaseToken} of job ${job.jobId} runs until ${job.lease.expiresAt}`);
      }
      const end = claimEnd(job, `the lease of attempt ${job.attempt} expired at ${job.lease.expiresAt}`, false);
      return [
        {
          type: 'JobLeaseExpired',
          data: {
            jobId: job.jobId,
            runnerId: job.lease.runnerId,
            leaseToken: job.lease.token,
            ...end,
            leaseExpiresAt: job.lease.expiresAt,
            expiredAt: d.now,
            started: job.status === 'RUNNING',
          },
        },
      ];
    }

    case 'ResumeJobLease': {
      const d = command.data;
      const job = existing(state, d.jobId);
      const lease = job.lease;
      // Ended, or a newer grant since the look: nothing to resume.
      if (!lease || lease.token !== d.leaseToken) return [];
      // Ran out while a job service still served (a sweep came after its end): its runner could have
      // renewed it, so it is the sweep's to expire (docs/jobs.md, "A job service outage").
      if (ranOutWhileServed(lease.expiresAt, d.now, d.lastSweptAt)) return [];
      const leaseExpiresAt = addMs(d.now, lease.durationMs);
      if (Date.parse(leaseExpiresAt) <= Date.parse(lease.expiresAt)) return [];
      return [
        {
          type: 'JobLeaseRenewed',
          data: {
            jobId: job.jobId,
            runnerId: lease.runnerId,
            leaseToken: lease.token,
            leaseExpiresAt,
            renewedAt: d.now,
            ...(d.after === 'bus_loss' ? { resumedAfterBusLoss: true as const } : { resumedAtStart: true as const }),
          },
        },
      ];
    }

    case 'CancelJob': {
      const d = command.data;
      const job = existing(state, d.jobId);
      if (isTerminalJobStatus(job.status)) throw refuse(ErrorCode.INVALID_TRANSITION, `job ${job.jobId} is already ${job.status} and cannot be cancelled`);
      return [
        {
          type: 'JobCancelled',
          data: {
            jobId: job.jobId,
            previousStatus: job.status,
            revokedLeaseToken: job.lease?.token ?? null,
            reason: d.reason,
            taskStatus: movesTask(job) ? 'TO_DO' : null,
            cancelledAt: d.now,
          },
        },
      ];
    }

    case 'RecordChecksFailed': {
      // Red checks on the head this job pushed: the job was not done after all (docs/pr-service.md, PR-9).
      // A fact about another head, or about a job no longer DONE, changes nothing.
      const d = command.data;
      const job = existing(state, d.jobId);
      if (job.status !== 'DONE' || job.headSha !== d.headSha) return [];
      return [
        {
          type: 'JobChecksFailed',
          data: {
            jobId: job.jobId,
            headSha: d.headSha,
            prUrl: d.prUrl,
            failedChecks: d.failedChecks,
            error: `checks failed on ${d.prUrl}: ${failedChecksNamed(d.failedChecks, d.failedChecksLeftOut)}`,
            taskStatus: movesTask(job) ? 'IN_PROGRESS' : null,
            failedAt: d.now,
          },
        },
      ];
    }

    default:
      return assertNever(command);
  }
}

export const jobDecider = {
  initialState: initialJobState,
  decide: decideJob,
  evolve: evolveJob,
};

// --- rules shared by several commands --------------------------------------------------------

function refuse(code: ErrorCode, message: string, details?: Record<string, unknown>): GantryError {
  return new GantryError(code, message, details);
}

function existing(state: JobState, jobId: string): Job {
  if (!jobExists(state)) throw refuse(ErrorCode.NOT_FOUND, `job ${jobId} does not exist`);
  return state;
}

function fenceDetails(job: Job): Record<string, unknown> {
  return { currentLeaseToken: job.lastLeaseToken };
}

const leaseEndSentence = {
  EXPIRED: 'expired',
  ROLLED_BACK: 'was rolled back',
  CANCELLED: 'was revoked when the job was cancelled',
  FINISHED: 'ended when the job finished',
} as const;

/**
 * The fence: the command's token must be the latest grant, that grant still active, held by this
 * runner, and not past its expiry at `now`. A finished job answers a late command with
 * INVALID_TRANSITION (the work is done, not stolen); every other mismatch is STALE_FENCE.
 */
function fenced(state: JobState, d: UnderLease, action: string): { job: Job; lease: ActiveLease } {
  const job = existing(state, d.jobId);
  if (d.leaseToken !== job.lastLeaseToken) {
    const why = d.leaseToken < job.lastLeaseToken ? 'is stale' : 'was never granted';
    throw refuse(
      ErrorCode.STALE_FENCE,
      `cannot ${action}: lease token ${d.leaseToken} of job ${job.jobId} ${why}; the current token is ${job.lastLeaseToken}`,
      fenceDetails(job),
    );
  }
  const lease = job.lease;
  if (!lease) {
    if (job.lastLeaseEnd === 'FINISHED') {
      throw refuse(ErrorCode.INVALID_TRANSITION, `cannot ${action}: job ${job.jobId} already finished as ${job.status}`);
    }
    throw refuse(
      ErrorCode.STALE_FENCE,
      `cannot ${action}: lease ${d.leaseToken} of job ${job.jobId} ${leaseEndSentence[job.lastLeaseEnd ?? 'EXPIRED']}`,
      fenceDetails(job),
    );
  }
  if (lease.runnerId !== d.runnerId) {
    throw refuse(ErrorCode.STALE_FENCE, `cannot ${action}: lease ${lease.token} of job ${job.jobId} is held by runner ${lease.runnerId}, not ${d.runnerId}`, fenceDetails(job));
  }
  if (isLeaseExpired(lease.expiresAt, d.now)) {
    throw refuse(ErrorCode.STALE_FENCE, `cannot ${action}: lease ${lease.token} of job ${job.jobId} expired at ${lease.expiresAt}`, fenceDetails(job));
  }
  return { job, lease };
}

/**
 * The runner whose claim a cancel revoked reports its run stopped: `finish_job` with `cancelled: true`
 * under the revoked token (docs/jobs.md, "Cancelling a running job"). Null when the command is not that.
 */
function runStoppedAfterCancel(state: JobState, d: UnderLease & { facts: { cancelled: boolean } }): JobEvent | null {
  if (!d.facts.cancelled || !jobExists(state) || state.status !== 'CANCELLED') return null;
  const run = state.cancelledRun ?? null;
  if (!run || run.leaseToken !== d.leaseToken || run.runnerId !== d.runnerId) return null;
  if (run.stoppedAt !== null) {
    throw refuse(ErrorCode.INVALID_TRANSITION, `the run of claim ${run.leaseToken} of job ${state.jobId} was already reported stopped at ${run.stoppedAt}`);
  }
  return { type: 'JobRunStopped', data: { jobId: state.jobId, runnerId: d.runnerId, leaseToken: d.leaseToken, stoppedAt: d.now } };
}

/**
 * A job handed back without spending an attempt (cause RUNNER or DEPENDENCY) waits out its pause
 * before any claim, not only before its offer: a claim that names it without an offer, or the poll of
 * a claim without one, would otherwise take it straight back into the trouble it was handed back for
 * (docs/jobs.md, "Attempts").
 */
function requirePauseOver(job: Job, now: string): void {
  const notBefore = job.offerNotBefore ?? null;
  if (notBefore === null || Date.parse(now) >= Date.parse(notBefore)) return;
  throw refuse(
    ErrorCode.PRECONDITION_FAILED,
    `job ${job.jobId} was handed back ${job.freeRequeues} time${job.freeRequeues === 1 ? '' : 's'} in a row without spending an attempt and may be claimed from ${notBefore} on`,
    // How long that is from now, by this clock: a claimer whose own clock is off waits for it, not for the moment.
    { offerNotBefore: notBefore, retryAfterMs: Date.parse(notBefore) - Date.parse(now) },
  );
}

function requireStarted(job: Job, action: string): void {
  if (job.status !== 'RUNNING') throw refuse(ErrorCode.INVALID_TRANSITION, `cannot ${action}: job ${job.jobId} has not started (it is ${job.status})`);
}

function writesCode(job: Job): boolean {
  return job.kind === 'TASK_IMPLEMENTATION' || job.kind === 'SPRINT_IMPLEMENTATION';
}

/** The story-log obligation: a start entry and a test result always; a commit entry when a DONE rests on a new commit. */
function requireStoryLog(job: Job, doneWithNewCommit: boolean): void {
  const missing: string[] = [];
  if (job.storyLog.implementationEntries === 0) missing.push('an implementation-log entry (log_implementation: task, branch, plan)');
  if (job.storyLog.testResults.length === 0) missing.push('a test-result entry (log_test_result: PASSED or FAILED with a summary)');
  if (doneWithNewCommit && job.storyLog.commits.length === 0) missing.push('a commit-log entry for the new commit (log_commit: hash, message, summary)');
  if (missing.length === 0) return;
  throw refuse(
    ErrorCode.PRECONDITION_FAILED,
    `job ${job.jobId} cannot finish: its story log is missing ${joinSentence(missing)}`,
    { missing: missing.map((m) => m.slice(m.indexOf('(') + 1, m.indexOf(':'))) },
  );
}

/**
 * A code job's DONE rests on its new commit being on the origin, and only a push reported under the
 * current claim (or the earlier claim's push it adopted at its start) says so; the head verify looked
 * at must be that pushed head (docs/jobs.md, "The finishing rule").
 */
function requirePushedHead(job: Job, verifiedHeadSha: string | null): void {
  const claim = `claim ${job.lastLeaseToken}`;
  if (job.headSha === null) {
    throw refuse(
      ErrorCode.PRECONDITION_FAILED,
      `job ${job.jobId} cannot finish DONE on a new commit${verifiedHeadSha ? ` (${verifiedHeadSha})` : ''}: no push of it was reported under ${claim} (report_push comes before the finish)`,
      { pushReported: false, verifiedHeadSha },
    );
  }
  if (verifiedHeadSha !== null && verifiedHeadSha !== job.headSha) {
    throw refuse(
      ErrorCode.PRECONDITION_FAILED,
      `job ${job.jobId} cannot finish DONE: verify looked at ${verifiedHeadSha}, but the head pushed under ${claim} is ${job.headSha}`,
      { pushReported: true, pushedHeadSha: job.headSha, verifiedHeadSha },
    );
  }
}

function joinSentence(parts: string[]): string {
  return parts.length === 1 ? parts[0]! : `${parts.slice(0, -1).join(', ')} and ${parts[parts.length - 1]}`;
}

/**
 * A claim that ends without a finish: requeued as the next attempt, or failed after the last. It
 * spends no attempt when the job is not at fault (`notTheJobsFault`: the runner's or a dependency's
 * doing) or when a verified push waits to be finished (a pushed branch never ends FAILED) — up to
 * MAX_FREE_REQUEUES in a row (docs/jobs.md, "Attempts").
 */
function claimEnd(job: Job, what: string, notTheJobsFault: boolean) {
  const free = (notTheJobsFault || (job.verifiedPush ?? null) !== null) && (job.freeRequeues ?? 0) < MAX_FREE_REQUEUES;
  if (free) return { attempt: job.attempt, outcome: 'REQUEUED' as const, nextAttempt: job.attempt, error: null };
  return job.attempt < job.maxAttempts
    ? { attempt: job.attempt, outcome: 'REQUEUED' as const, nextAttempt: job.attempt + 1, error: null }
    : {
        attempt: job.attempt,
        outcome: 'FAILED' as const,
        nextAttempt: null,
        error: `${what}, and ${job.maxAttempts} attempt${job.maxAttempts === 1 ? ' is' : 's is'} the maximum: the job failed`,
      };
}

function resolveConfig(job: Job): AgentConfig {
  try {
    return resolveAgentConfig(job.kind, job.configOverrides.product, job.configOverrides.sprint, job.configOverrides.job, job.agentProfile);
  } catch (error) {
    throw refuse(ErrorCode.PRECONDITION_FAILED, `job ${job.jobId} has no runnable configuration: ${(error as Error).message}`);
  }
}

function assertNever(value: never): never {
  throw new Error(`unhandled job command ${JSON.stringify(value)}`);
}
