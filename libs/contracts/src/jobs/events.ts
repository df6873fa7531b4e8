import { z } from 'zod';
import { defineEvent, eventTypesOf, type EventsOf } from '../registry.js';
import { AgentConfigOverrideSchema, AgentConfigSchema, AgentProfileSchema, EffortLevelSchema, JobKindSchema } from './agent-config.js';
import { CloneUrlSchema, RepositorySchema } from './products.js';
import {
  ClaimEndOutcomeSchema,
  GitRefSchema,
  GitShaSchema,
  IdempotencyKeySchema,
  JobIdSchema,
  JobPayloadSchema,
  JobStatusSchema,
  LeaseTokenSchema,
  ExternalRefSchema,
  RollbackCauseSchema,
  RunnerIdSchema,
  SprintRunIdSchema,
  TaskStatusSchema,
  TerminalJobStatusSchema,
  TestResultStatusSchema,
  TimestampSchema,
  VerificationFactsSchema,
} from './values.js';

// Shared example values, so every example reads as one story about one job.
export const jobExampleIds = {
  jobId: 'job-7b1d3c9e-2f4a-4c1b-9e7d-0a1b2c3d4e5f',
  otherJobId: 'job-0c2e4a6b-8d0f-4e2a-8c4e-6a8b0c2e4f6a',
  sprintRunId: 'sprintrun-5a6b7c8d-9e0f-4a1b-8c2d-3e4f5a6b7c8d',
  runnerId: 'runner-host1-01',
  baseSha: '3f2c9a1b7d4e5f60718293a4b5c6d7e8f9012345',
  headSha: '9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a291807',
} as const;

const fenced = {
  jobId: JobIdSchema,
  runnerId: RunnerIdSchema,
  leaseToken: LeaseTokenSchema,
};

const agentConfigExample = {
  model: 'claude-sonnet-4-6',
  thinkingBudget: 6000,
  permissionMode: 'bypassPermissions' as const,
  allowedTools: ['Read', 'Edit', 'Bash'],
  maxTurns: 200,
};

export const JobEnqueued = defineEvent({
  context: 'jobs',
  type: 'JobEnqueued',
  schemaVersion: 1,
  data: z.object({
    jobId: JobIdSchema,
    kind: JobKindSchema,
    productId: ExternalRefSchema,
    storyId: ExternalRefSchema.nullable(),
    sprintId: ExternalRefSchema.nullable(),
    sprintRunId: SprintRunIdSchema.nullable(),
    taskId: ExternalRefSchema.nullable(),
    prompt: z.string().max(100_000).nullable(),
    payload: JobPayloadSchema.nullable(),
    configOverrides: z.object({
      product: AgentConfigOverrideSchema.nullable(),
      sprint: AgentConfigOverrideSchema.nullable(),
      job: AgentConfigOverrideSchema.nullable(),
    }),
    agentProfile: AgentProfileSchema.nullable(),
    reason: z.string().min(1).max(200).nullable(),
    excludeFromCoalescing: z.boolean(),
    idempotencyKey: IdempotencyKeySchema,
    /** canonicalHash of the enqueue request, to tell a replay from a conflicting reuse of the key. */
    requestHash: z.string().regex(/^[0-9a-f]{64}$/),
    baseRef: GitRefSchema.nullable(),
    maxAttempts: z.number().int().min(1).max(20),
    enqueuedAt: TimestampSchema,
    // Resolved against the job's product at enqueue (absent from jobs enqueued before products existed).
    repository: RepositorySchema.optional(),
    repositoryUrl: CloneUrlSchema.optional(),
    /** The branch the work is pushed to; null when the job names none (a job that writes no code). */
    branch: GitRefSchema.nullable().optional(),
    targetBranch: GitRefSchema.optional(),
    /** The story's tasks as the enqueue request named them; null when it named none. */
    storyTaskIds: z.array(ExternalRefSchema).nullable().optional(),
  }),
  examples: {
    valid: [
      {
        jobId: jobExampleIds.jobId,
        kind: 'TASK_IMPLEMENTATION',
        productId: 'product-42',
        storyId: 'ST-1208',
        sprintId: null,
        sprintRunId: null,
        taskId: 'T-533',
        prompt: 'Implement T-533',
        payload: { plan: 'add the migration' },
        configOverrides: { product: { model: 'claude-opus-4-7' }, sprint: null, job: null },
        agentProfile: null,
        reason: null,
        excludeFromCoalescing: false,
        idempotencyKey: 'product-42/enqueue:task-T-533-attempt-1',
        requestHash: 'a'.repeat(64),
        baseRef: 'feat/story-1208',
        maxAttempts: 3,
        enqueuedAt: '2026-11-30T06:00:00.000Z',
        repository: 'acme/shop',
        repositoryUrl: 'https://github.com/acme/shop.git',
        branch: 'feat/story-1208',
        targetBranch: 'main',
        storyTaskIds: ['T-532', 'T-533'],
      },
    ],
    invalid: [
      // the job id is not job-<uuid>
      { jobId: 'job.1', kind: 'REVIEW' },
      // maxAttempts 0 would fail the job before its first claim
      {
        jobId: jobExampleIds.jobId, kind: 'REVIEW', productId: 'p', storyId: null, sprintId: null, sprintRunId: null,
        taskId: null, prompt: null, payload: null, configOverrides: { product: null, sprint: null, job: null },
        agentProfile: null, reason: null, excludeFromCoalescing: false, idempotencyKey: 'p/enqueue:x',
        requestHash: 'a'.repeat(64), baseRef: null, maxAttempts: 0, enqueuedAt: '2026-11-30T06:00:00.000Z',
      },
    ],
  },
});

export const JobCoalesced = defineEvent({
  context: 'jobs',
  type: 'JobCoalesced',
  schemaVersion: 1,
  data: z.object({
    jobId: JobIdSchema,
    /** The later request's payload and prompt, appended to the job — never discarded. */
    payload: JobPayloadSchema.nullable(),
    prompt: z.string().max(100_000).nullable(),
    idempotencyKey: IdempotencyKeySchema,
    requestHash: z.string().regex(/^[0-9a-f]{64}$/),
    coalescedAt: TimestampSchema,
  }),
  examples: {
    valid: [
      {
        jobId: jobExampleIds.jobId,
        payload: { comment: 'also look at the README' },
        prompt: null,
        idempotencyKey: 'product-42/enqueue:comment-981',
        requestHash: 'b'.repeat(64),
        coalescedAt: '2026-11-30T06:00:03.000Z',
      },
    ],
    // a payload must be a JSON object, not a bare string
    invalid: [{ jobId: jobExampleIds.jobId, payload: 'text', prompt: null, idempotencyKey: 'p/e:k', requestHash: 'b'.repeat(64), coalescedAt: '2026-11-30T06:00:03.000Z' }],
  },
});

export const JobClaimed = defineEvent({
  context: 'jobs',
  type: 'JobClaimed',
  schemaVersion: 1,
  data: z.object({
    ...fenced,
    /** 1 for the first attempt, one higher after every requeue. */
    attempt: z.number().int().positive(),
    leaseExpiresAt: TimestampSchema,
    /** The resolved configuration the job runs with, recorded for cost attribution. */
    agentConfig: AgentConfigSchema,
    /** The CLI's --effort for agentConfig.thinkingBudget; null means no flag. */
    effort: EffortLevelSchema.nullable(),
    agentProfileId: z.string().min(1).nullable(),
    baseRef: GitRefSchema.nullable(),
    /** The commit the work starts from, when the runner resolved it before claiming. */
    baseSha: GitShaSchema.nullable(),
    claimedAt: TimestampSchema,
  }),
  examples: {
    valid: [
      {
        jobId: jobExampleIds.jobId,
        runnerId: jobExampleIds.runnerId,
        leaseToken: 1,
        attempt: 1,
        leaseExpiresAt: '2026-11-30T06:03:00.000Z',
        agentConfig: agentConfigExample,
        effort: 'medium',
        agentProfileId: null,
        baseRef: 'feat/story-1208',
        baseSha: jobExampleIds.baseSha,
        claimedAt: '2026-11-30T06:00:00.000Z',
      },
    ],
    invalid: [
      // lease token 0 is never granted: the first grant is 1
      {
        jobId: jobExampleIds.jobId, runnerId: jobExampleIds.runnerId, leaseToken: 0, attempt: 1,
        leaseExpiresAt: '2026-11-30T06:03:00.000Z', agentConfig: agentConfigExample, effort: 'medium',
        agentProfileId: null, baseRef: null, baseSha: null, claimedAt: '2026-11-30T06:00:00.000Z',
      },
    ],
  },
});

const fencedExample = { jobId: jobExampleIds.jobId, runnerId: jobExampleIds.runnerId, leaseToken: 1 };

export const JobLeaseRenewed = defineEvent({
  context: 'jobs',
  type: 'JobLeaseRenewed',
  schemaVersion: 1,
  data: z.object({
    ...fenced,
    leaseExpiresAt: TimestampSchema,
    renewedAt: TimestampSchema,
    /**
     * Renewed by a job service at its start, for the runner: no job service ran before it, so no runner
     * could renew, and the time a claim's lease runs does not count the time nobody served
     * (docs/jobs.md, "A job service outage"). Absent on a runner's own renewal.
     */
    resumedAtStart: z.literal(true).optional(),
    /**
     * Renewed by a job service for the runner when its own connection to NATS came back: while it was
     * gone no runner could reach it, and its sweep expired nothing (docs/jobs.md, "A job service outage").
     */
    resumedAfterBusLoss: z.literal(true).optional(),
  }),
  examples: {
    valid: [
      { ...fencedExample, leaseExpiresAt: '2026-11-30T06:04:00.000Z', renewedAt: '2026-11-30T06:01:00.000Z' },
      { ...fencedExample, leaseExpiresAt: '2026-11-30T06:09:00.000Z', renewedAt: '2026-11-30T06:06:00.000Z', resumedAtStart: true },
      { ...fencedExample, leaseExpiresAt: '2026-11-30T06:12:00.000Z', renewedAt: '2026-11-30T06:09:00.000Z', resumedAfterBusLoss: true },
    ],
    // the expiry must be a timestamp with an offset, not epoch milliseconds
    invalid: [{ ...fencedExample, leaseExpiresAt: 1796018640000, renewedAt: '2026-11-30T06:01:00.000Z' }],
  },
});

export const JobStarted = defineEvent({
  context: 'jobs',
  type: 'JobStarted',
  schemaVersion: 1,
  data: z.object({
    ...fenced,
    /** base_sha: from the claim, or resolved by the runner in its worktree before starting. */
    baseSha: GitShaSchema.nullable(),
    branch: GitRefSchema.nullable(),
    /**
     * The claim (its lease token) whose verified and pushed head this attempt takes over and only
     * finishes: its base, branch, head, push and story log become this attempt's (docs/jobs.md).
     */
    adoptedPushOf: LeaseTokenSchema.nullable().optional(),
    /**
     * The earlier claim (its lease token) whose work, found pushed on the origin though it never
     * reported it, this attempt takes over and only finishes: its base, branch and story log become
     * this attempt's (docs/jobs.md).
     */
    adoptedRunOf: LeaseTokenSchema.nullable().optional(),
    startedAt: TimestampSchema,
  }),
  examples: {
    valid: [
      { ...fencedExample, baseSha: jobExampleIds.baseSha, branch: 'feat/story-1208', startedAt: '2026-11-30T06:00:05.000Z' },
      { ...fencedExample, leaseToken: 3, baseSha: jobExampleIds.baseSha, branch: 'feat/story-1208', adoptedPushOf: 2, startedAt: '2026-11-30T06:00:05.000Z' },
      { ...fencedExample, leaseToken: 3, baseSha: jobExampleIds.baseSha, branch: 'feat/story-1208', adoptedRunOf: 2, startedAt: '2026-11-30T06:00:05.000Z' },
    ],
    // an abbreviated sha is ambiguous; base_sha is always the full object id
    invalid: [{ ...fencedExample, baseSha: '3f2c9a1', branch: null, startedAt: '2026-11-30T06:00:05.000Z' }],
  },
});

export const AlreadyPresentSchema = z.object({
  /** FULL: the whole plan is on the target (the job finishes SKIPPED); PARTIAL: only the rest is done. */
  extent: z.enum(['FULL', 'PARTIAL']),
  commitSha: GitShaSchema,
});

export const ImplementationLogged = defineEvent({
  context: 'jobs',
  type: 'ImplementationLogged',
  schemaVersion: 1,
  data: z.object({
    ...fenced,
    taskId: ExternalRefSchema.nullable(),
    branch: GitRefSchema.nullable(),
    plan: z.string().max(20_000).nullable(),
    summary: z.string().min(1).max(20_000),
    alreadyPresent: AlreadyPresentSchema.nullable(),
    loggedAt: TimestampSchema,
  }),
  examples: {
    valid: [
      {
        ...fencedExample, taskId: 'T-533', branch: 'feat/story-1208', plan: 'add the migration',
        summary: 'Start implementation of T-533 on feat/story-1208.', alreadyPresent: null, loggedAt: '2026-11-30T06:00:06.000Z',
      },
      {
        ...fencedExample, taskId: 'T-533', branch: 'feat/story-1208', plan: null,
        summary: 'Work already present on main from commit 3f2c9a1.',
        alreadyPresent: { extent: 'FULL', commitSha: jobExampleIds.baseSha }, loggedAt: '2026-11-30T06:00:06.000Z',
      },
    ],
    // an empty summary is not a story-log entry
    invalid: [{ ...fencedExample, taskId: null, branch: null, plan: null, summary: '', alreadyPresent: null, loggedAt: '2026-11-30T06:00:06.000Z' }],
  },
});

export const CommitLogged = defineEvent({
  context: 'jobs',
  type: 'CommitLogged',
  schemaVersion: 1,
  data: z.object({
    ...fenced,
    commitSha: GitShaSchema,
    message: z.string().min(1).max(10_000),
    summary: z.string().min(1).max(20_000),
    loggedAt: TimestampSchema,
  }),
  examples: {
    valid: [{ ...fencedExample, commitSha: jobExampleIds.headSha, message: 'feat: add migration', summary: '1 file added', loggedAt: '2026-11-30T06:10:00.000Z' }],
    // a commit-log entry needs the hash
    invalid: [{ ...fencedExample, message: 'feat: add migration', summary: '1 file added', loggedAt: '2026-11-30T06:10:00.000Z' }],
  },
});

export const TestResultLogged = defineEvent({
  context: 'jobs',
  type: 'TestResultLogged',
  schemaVersion: 1,
  data: z.object({
    ...fenced,
    status: TestResultStatusSchema,
    summary: z.string().min(1).max(20_000),
    loggedAt: TimestampSchema,
  }),
  examples: {
    valid: [{ ...fencedExample, status: 'PASSED', summary: 'typecheck + 41 tests green', loggedAt: '2026-11-30T06:12:00.000Z' }],
    // only PASSED or FAILED
    invalid: [{ ...fencedExample, status: 'GREEN', summary: 'ok', loggedAt: '2026-11-30T06:12:00.000Z' }],
  },
});

export const JobPushReported = defineEvent({
  context: 'jobs',
  type: 'JobPushReported',
  schemaVersion: 1,
  data: z.object({
    ...fenced,
    branch: GitRefSchema,
    headSha: GitShaSchema,
    /** Set only when something was really pushed; null when the remote already had headSha. */
    pushedAt: TimestampSchema.nullable(),
    /** What verify found for headSha: the facts a later attempt finishes with if this one cannot (docs/jobs.md). */
    facts: VerificationFactsSchema.nullable().optional(),
    reportedAt: TimestampSchema,
  }),
  examples: {
    valid: [
      { ...fencedExample, branch: 'feat/story-1208', headSha: jobExampleIds.headSha, pushedAt: '2026-11-30T06:13:00.000Z', reportedAt: '2026-11-30T06:13:00.000Z' },
      { ...fencedExample, branch: 'feat/story-1208', headSha: jobExampleIds.headSha, pushedAt: null, reportedAt: '2026-11-30T06:13:00.000Z' },
    ],
    // pushedAt is null or a timestamp, never omitted
    invalid: [{ ...fencedExample, branch: 'feat/story-1208', headSha: jobExampleIds.headSha, reportedAt: '2026-11-30T06:13:00.000Z' }],
  },
});

export const JobFinished = defineEvent({
  context: 'jobs',
  type: 'JobFinished',
  schemaVersion: 1,
  data: z.object({
    ...fenced,
    jobStatus: TerminalJobStatusSchema,
    /** The status the job's task moves to; null when the job has no task or its kind does not move it. */
    taskStatus: TaskStatusSchema.nullable(),
    error: z.string().min(1).nullable(),
    facts: VerificationFactsSchema,
    baseSha: GitShaSchema.nullable(),
    headSha: GitShaSchema.nullable(),
    pushedAt: TimestampSchema.nullable(),
    finishedAt: TimestampSchema,
  }),
  examples: {
    valid: [
      {
        ...fencedExample, jobStatus: 'DONE', taskStatus: 'DONE', error: null,
        facts: {
          verifyResult: 'ALIGNED', newCommit: true, netDiff: { filesChanged: 2, insertions: 40, deletions: 3 },
          workAlreadyOnTarget: false, diffIdenticalToMergedBranch: false, failure: null, cancelled: false,
        },
        baseSha: jobExampleIds.baseSha, headSha: jobExampleIds.headSha, pushedAt: '2026-11-30T06:13:00.000Z',
        finishedAt: '2026-11-30T06:14:00.000Z',
      },
    ],
    // a finish is terminal: QUEUED is not a finishing status
    invalid: [
      {
        ...fencedExample, jobStatus: 'QUEUED', taskStatus: 'DONE', error: null,
        facts: {
          verifyResult: 'ALIGNED', newCommit: true, netDiff: { filesChanged: 2, insertions: 40, deletions: 3 },
          workAlreadyOnTarget: false, diffIdenticalToMergedBranch: false, failure: null, cancelled: false,
        },
        baseSha: null, headSha: null, pushedAt: null, finishedAt: '2026-11-30T06:14:00.000Z',
      },
    ],
  },
});

const claimEnd = {
  ...fenced,
  /** The attempt that ended. */
  attempt: z.number().int().positive(),
  /** REQUEUED: back to QUEUED as attempt + 1. FAILED: the last allowed attempt ended. */
  outcome: ClaimEndOutcomeSchema,
  nextAttempt: z.number().int().positive().nullable(),
  error: z.string().min(1).nullable(),
};

/** A requeue spends the attempt (next = attempt + 1) or, when the job is not at fault, keeps it (next = attempt). */
function claimEndIsConsistent(d: { attempt: number; outcome: string; nextAttempt: number | null; error: string | null }): boolean {
  return d.outcome === 'REQUEUED'
    ? (d.nextAttempt === d.attempt + 1 || d.nextAttempt === d.attempt) && d.error === null
    : d.nextAttempt === null && d.error !== null;
}
const claimEndMessage = 'REQUEUED carries nextAttempt = attempt + 1 (or attempt, when no attempt was spent) and no error; FAILED carries an error and no nextAttempt';

export const JobClaimRolledBack = defineEvent({
  context: 'jobs',
  type: 'JobClaimRolledBack',
  schemaVersion: 1,
  data: z
    .object({
      ...claimEnd,
      reason: z.string().min(1).max(2000),
      exitCode: z.number().int().nullable(),
      /** Whose fault (absent in events written before causes were recorded: JOB). Only JOB spends the attempt. */
      cause: RollbackCauseSchema.optional(),
      /** A requeue that spent no attempt is offered again only from this moment (a growing pause); null: at once. */
      offerNotBefore: TimestampSchema.nullable().optional(),
      rolledBackAt: TimestampSchema,
    })
    .refine(claimEndIsConsistent, claimEndMessage),
  examples: {
    valid: [
      {
        ...fencedExample, attempt: 1, outcome: 'REQUEUED', nextAttempt: 2, error: null,
        reason: 'agent exited with code 1 without finishing the job', exitCode: 1, rolledBackAt: '2026-11-30T06:05:00.000Z',
      },
      {
        ...fencedExample, attempt: 1, outcome: 'REQUEUED', nextAttempt: 1, error: null, cause: 'DEPENDENCY',
        reason: 'the worktree service did not answer acquire_worktree', exitCode: null,
        offerNotBefore: '2026-11-30T06:05:02.000Z', rolledBackAt: '2026-11-30T06:05:00.000Z',
      },
    ],
    // a requeue must move to the next attempt
    invalid: [
      // a requeue moves on by one attempt at most
      {
        ...fencedExample, attempt: 1, outcome: 'REQUEUED', nextAttempt: 3, error: null,
        reason: 'agent exited', exitCode: 1, rolledBackAt: '2026-11-30T06:05:00.000Z',
      },
    ],
  },
});

export const JobLeaseExpired = defineEvent({
  context: 'jobs',
  type: 'JobLeaseExpired',
  schemaVersion: 1,
  data: z
    .object({
      ...claimEnd,
      leaseExpiresAt: TimestampSchema,
      expiredAt: TimestampSchema,
      /**
       * Whether the claim had been started (`start_job`) before it expired. A runner starts its agent only
       * after its start is recorded, so false says no agent of the claim ever ran; absent in events of
       * job services before it was recorded (read as: it may have run).
       */
      started: z.boolean().optional(),
    })
    .refine(claimEndIsConsistent, claimEndMessage),
  examples: {
    valid: [
      {
        ...fencedExample, attempt: 1, outcome: 'REQUEUED', nextAttempt: 2, error: null,
        leaseExpiresAt: '2026-11-30T06:03:00.000Z', expiredAt: '2026-11-30T06:03:01.000Z',
      },
      {
        ...fencedExample, leaseToken: 3, attempt: 3, outcome: 'FAILED', nextAttempt: null,
        error: 'the lease of attempt 3 expired and 3 attempts is the maximum',
        leaseExpiresAt: '2026-11-30T06:03:00.000Z', expiredAt: '2026-11-30T06:03:01.000Z',
      },
    ],
    // FAILED without a sentence saying why
    invalid: [
      {
        ...fencedExample, attempt: 3, outcome: 'FAILED', nextAttempt: null, error: null,
        leaseExpiresAt: '2026-11-30T06:03:00.000Z', expiredAt: '2026-11-30T06:03:01.000Z',
      },
    ],
  },
});

export const JobCancelled = defineEvent({
  context: 'jobs',
  type: 'JobCancelled',
  schemaVersion: 1,
  data: z.object({
    jobId: JobIdSchema,
    previousStatus: JobStatusSchema,
    /** The lease the cancel revoked, if the job was claimed; later commands under it get STALE_FENCE. */
    revokedLeaseToken: LeaseTokenSchema.nullable(),
    reason: z.string().min(1).max(2000).nullable(),
    /** TO_DO when the job has a task it moves; null otherwise. */
    taskStatus: z.literal('TO_DO').nullable(),
    cancelledAt: TimestampSchema,
  }),
  examples: {
    valid: [
      { jobId: jobExampleIds.jobId, previousStatus: 'RUNNING', revokedLeaseToken: 2, reason: 'not needed any more', taskStatus: 'TO_DO', cancelledAt: '2026-11-30T06:07:00.000Z' },
    ],
    // a cancelled task goes back to TO_DO, not DONE
    invalid: [{ jobId: jobExampleIds.jobId, previousStatus: 'RUNNING', revokedLeaseToken: 2, reason: null, taskStatus: 'DONE', cancelledAt: '2026-11-30T06:07:00.000Z' }],
  },
});

export const JobRunStopped = defineEvent({
  context: 'jobs',
  type: 'JobRunStopped',
  schemaVersion: 1,
  data: z.object({
    /** The holder of the claim a cancel revoked says its agent is gone; only then does it give its worktree back. */
    ...fenced,
    stoppedAt: TimestampSchema,
  }),
  examples: {
    valid: [{ ...fencedExample, leaseToken: 2, stoppedAt: '2026-11-30T06:07:02.000Z' }],
    // the stop is reported under the revoked claim's token
    invalid: [{ jobId: jobExampleIds.jobId, runnerId: jobExampleIds.runnerId, stoppedAt: '2026-11-30T06:07:02.000Z' }],
  },
});

/**
 * The head a DONE job pushed failed its pull request's checks (docs/pr-service.md, PR-9): red CI is a
 * real error, so the job is FAILED after all and its task back IN_PROGRESS — the story's PR merges
 * only once a later job of that task is done on a head whose checks pass.
 */
export const JobChecksFailed = defineEvent({
  context: 'jobs',
  type: 'JobChecksFailed',
  schemaVersion: 1,
  data: z.object({
    jobId: JobIdSchema,
    headSha: GitShaSchema,
    prUrl: z.url(),
    failedChecks: z.array(z.string().min(1)).min(1),
    error: z.string().min(1),
    /** IN_PROGRESS when the job has a task it moves; null otherwise. */
    taskStatus: z.literal('IN_PROGRESS').nullable(),
    failedAt: TimestampSchema,
  }),
  examples: {
    valid: [
      {
        jobId: jobExampleIds.jobId, headSha: jobExampleIds.headSha, prUrl: 'https://github.com/acme/shop/pull/102', failedChecks: ['ci/test'],
        error: 'checks failed on https://github.com/acme/shop/pull/102: ci/test', taskStatus: 'IN_PROGRESS', failedAt: '2026-11-30T06:20:00.000Z',
      },
    ],
    // red checks name the checks
    invalid: [{ jobId: jobExampleIds.jobId, headSha: jobExampleIds.headSha, prUrl: 'https://github.com/acme/shop/pull/102', failedChecks: [], error: 'x', taskStatus: null, failedAt: '2026-11-30T06:20:00.000Z' }],
  },
});

/** Every job event contract, in the order of the lifecycle. */
export const jobEventContracts = [
  JobEnqueued,
  JobCoalesced,
  JobClaimed,
  JobLeaseRenewed,
  JobStarted,
  ImplementationLogged,
  CommitLogged,
  TestResultLogged,
  JobPushReported,
  JobFinished,
  JobClaimRolledBack,
  JobLeaseExpired,
  JobCancelled,
  JobRunStopped,
  JobChecksFailed,
] as const;

/** A job's events (one stream per job), as its decider emits them. */
export type JobEvent = EventsOf<typeof jobEventContracts>;
export type JobEventType = JobEvent['type'];
export const jobEventTypes = eventTypesOf(jobEventContracts);

export type JobEnqueuedData = z.output<typeof JobEnqueued.data>;
export type JobCoalescedData = z.output<typeof JobCoalesced.data>;
export type JobClaimedData = z.output<typeof JobClaimed.data>;
export type JobLeaseRenewedData = z.output<typeof JobLeaseRenewed.data>;
export type JobStartedData = z.output<typeof JobStarted.data>;
export type ImplementationLoggedData = z.output<typeof ImplementationLogged.data>;
export type CommitLoggedData = z.output<typeof CommitLogged.data>;
export type TestResultLoggedData = z.output<typeof TestResultLogged.data>;
export type JobPushReportedData = z.output<typeof JobPushReported.data>;
export type JobFinishedData = z.output<typeof JobFinished.data>;
export type JobClaimRolledBackData = z.output<typeof JobClaimRolledBack.data>;
export type JobLeaseExpiredData = z.output<typeof JobLeaseExpired.data>;
export type JobCancelledData = z.output<typeof JobCancelled.data>;
export type JobRunStoppedData = z.output<typeof JobRunStopped.data>;
export type JobChecksFailedData = z.output<typeof JobChecksFailed.data>;
