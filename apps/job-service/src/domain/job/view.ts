import { jobInputBytes, type JobView } from '@gantry/contracts';
import { runSettingsOf, type RunQueueEntry } from '../run-queue/run-queue.js';
import { pauseEndOf, type Job } from './state.js';

/** The job as `get_job` / `list_jobs` answer it: a projection row is this, folded from the log. */
export function jobView(job: Job): JobView {
  return {
    jobId: job.jobId,
    kind: job.kind,
    status: job.status,
    productId: job.productId,
    storyId: job.storyId,
    sprintId: job.sprintId,
    sprintRunId: job.sprintRunId,
    taskId: job.taskId,
    reason: job.reason,
    agentProfileId: job.agentProfile?.id ?? null,
    prompts: job.prompts,
    payloads: job.payloads,
    attempt: job.attempt,
    maxAttempts: job.maxAttempts,
    offerNotBefore: pauseEndOf(job),
    enqueueKeys: job.idempotencyKeys.map((k) => k.key),
    lease: job.lease ? { runnerId: job.lease.runnerId, leaseToken: job.lease.token, leaseExpiresAt: job.lease.expiresAt } : null,
    agentConfig: job.agentConfig,
    effort: job.effort,
    baseRef: job.baseRef,
    repository: job.repository ?? null,
    repositoryUrl: job.repositoryUrl ?? null,
    branch: job.workBranch ?? job.branch,
    targetBranch: job.targetBranch ?? null,
    baseSha: job.baseSha,
    headSha: job.headSha,
    pushedAt: job.pushedAt,
    taskStatus: job.taskStatus,
    error: job.error,
    storyLog: {
      implementationEntries: job.storyLog.implementationEntries,
      commitEntries: job.storyLog.commits.length,
      testResultEntries: job.storyLog.testResults.length,
    },
    verification: job.verification ?? null,
    cancelledRun: job.cancelledRun ?? null,
    enqueuedAt: job.enqueuedAt,
    claimedAt: job.claimedAt,
    startedAt: job.startedAt,
    finishedAt: job.finishedAt,
  };
}

/** What the run queue needs of a job to decide deduplication and coalescing. */
export function runQueueEntry(job: Job): RunQueueEntry {
  return {
    jobId: job.jobId,
    kind: job.kind,
    productId: job.productId,
    status: job.status,
    agentProfileId: job.agentProfile?.id ?? null,
    reason: job.reason,
    excludeFromCoalescing: job.excludeFromCoalescing,
    enqueuedAt: job.enqueuedAt,
    idempotencyKeys: job.idempotencyKeys,
    inputBytes: jobInputBytes(job.prompts, job.payloads),
    branch: job.workBranch,
    // Worked out when read: only a job the request could otherwise join is asked.
    get runsWith() {
      return runSettingsOf({
        kind: job.kind,
        configOverrides: job.configOverrides,
        agentProfile: job.agentProfile,
        repository: job.repository ?? null,
        repositoryUrl: job.repositoryUrl ?? null,
        targetBranch: job.targetBranch ?? null,
        maxAttempts: job.maxAttempts,
      });
    },
  };
}
