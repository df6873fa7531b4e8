import { z } from 'zod';
import { AgentConfigSchema, EffortLevelSchema, JobKindSchema } from './agent-config.js';
import {
  GitRefSchema,
  GitShaSchema,
  JobIdSchema,
  JobPayloadSchema,
  JobStatusSchema,
  LeaseTokenSchema,
  ExternalRefSchema,
  PlanCheckSchema,
  RunnerIdSchema,
  SprintRunIdSchema,
  SprintRunStatusSchema,
  TaskStatusSchema,
  TimestampSchema,
  VerifyResultSchema,
} from './values.js';
import { jobExampleIds } from './events.js';

/** A job as the queries answer it (the jobs projection). */
export const JobViewSchema = z.object({
  jobId: JobIdSchema,
  kind: JobKindSchema,
  status: JobStatusSchema,
  productId: ExternalRefSchema,
  storyId: ExternalRefSchema.nullable(),
  sprintId: ExternalRefSchema.nullable(),
  sprintRunId: SprintRunIdSchema.nullable(),
  taskId: ExternalRefSchema.nullable(),
  reason: z.string().nullable(),
  agentProfileId: z.string().nullable(),
  prompts: z.array(z.string()),
  /** Every payload the job received: the first request's and each coalesced one's. */
  payloads: z.array(JobPayloadSchema),
  attempt: z.number().int().positive(),
  maxAttempts: z.number().int().positive(),
  /**
   * While the job is queued after a hand-back that kept its attempt (cause RUNNER or DEPENDENCY): the
   * moment its pause ends, from which it is offered and may be claimed again. Null otherwise, and when
   * a job service of an earlier version, which does not say, answers.
   */
  offerNotBefore: TimestampSchema.nullable().default(null),
  /**
   * The idempotency keys of the enqueue requests that made the job or joined it (coalesced), oldest
   * first: who queued it can find its own request's job by them before that request's answer reaches
   * it. Empty when a job service of an earlier version, which does not say, answers.
   */
  enqueueKeys: z.array(z.string()).default([]),
  lease: z
    .object({ runnerId: RunnerIdSchema, leaseToken: LeaseTokenSchema, leaseExpiresAt: TimestampSchema })
    .nullable(),
  agentConfig: AgentConfigSchema.nullable(),
  effort: EffortLevelSchema.nullable(),
  baseRef: GitRefSchema.nullable(),
  /** Resolved against the product at enqueue; null for jobs enqueued before products existed. */
  repository: z.string().nullable(),
  repositoryUrl: z.string().nullable(),
  branch: GitRefSchema.nullable(),
  targetBranch: GitRefSchema.nullable(),
  baseSha: GitShaSchema.nullable(),
  headSha: GitShaSchema.nullable(),
  pushedAt: TimestampSchema.nullable(),
  taskStatus: TaskStatusSchema.nullable(),
  error: z.string().nullable(),
  storyLog: z.object({
    implementationEntries: z.number().int().min(0),
    commitEntries: z.number().int().min(0),
    testResultEntries: z.number().int().min(0),
  }),
  /** What the finishing attempt's verify found: its result, the head it looked at (also when nothing was pushed) and the plan check. */
  verification: z
    .object({ result: VerifyResultSchema, headSha: GitShaSchema.nullable(), planCheck: PlanCheckSchema.nullable() })
    .nullable(),
  /** The claim a cancel revoked, and when its runner confirmed that its agent had stopped (null until then). */
  cancelledRun: z.object({ runnerId: RunnerIdSchema, leaseToken: LeaseTokenSchema, stoppedAt: TimestampSchema.nullable() }).nullable(),
  enqueuedAt: TimestampSchema,
  claimedAt: TimestampSchema.nullable(),
  startedAt: TimestampSchema.nullable(),
  finishedAt: TimestampSchema.nullable(),
});
export type JobView = z.infer<typeof JobViewSchema>;

export const SprintRunViewSchema = z.object({
  sprintRunId: SprintRunIdSchema,
  sprintId: ExternalRefSchema,
  productId: ExternalRefSchema,
  status: SprintRunStatusSchema,
  /** The product's repository (`owner/name`); null for runs created before products existed. */
  repository: z.string().nullable(),
  branch: GitRefSchema,
  prUrl: z.string().nullable(),
  taskIds: z.array(ExternalRefSchema),
  doneTaskIds: z.array(ExternalRefSchema),
  /** Set while PAUSED: why, where, and how to continue. */
  pause: z
    .object({
      reason: z.literal('MERGE_CONFLICT'),
      prUrl: z.string(),
      conflictingFiles: z.array(z.string()),
      questionId: ExternalRefSchema,
      resumeInstructions: z.string(),
      pausedAt: TimestampSchema,
    })
    .nullable(),
  failure: z.object({ reason: z.enum(['TASK_FAILED', 'CHECKS_FAILED']), error: z.string(), taskId: ExternalRefSchema.nullable() }).nullable(),
  createdAt: TimestampSchema,
  updatedAt: TimestampSchema,
});
export type SprintRunView = z.infer<typeof SprintRunViewSchema>;

export const exampleJobView: JobView = {
  jobId: jobExampleIds.jobId,
  kind: 'TASK_IMPLEMENTATION',
  status: 'CLAIMED',
  productId: 'product-42',
  storyId: 'ST-1208',
  sprintId: null,
  sprintRunId: null,
  taskId: 'T-533',
  reason: null,
  agentProfileId: null,
  prompts: ['Implement T-533'],
  payloads: [{ plan: 'add the migration' }],
  attempt: 1,
  maxAttempts: 3,
  offerNotBefore: null,
  enqueueKeys: ['product-42/task-implementation:T-533'],
  lease: { runnerId: jobExampleIds.runnerId, leaseToken: 1, leaseExpiresAt: '2026-11-30T06:03:00.000Z' },
  agentConfig: { model: 'claude-sonnet-4-6', thinkingBudget: 6000, permissionMode: 'bypassPermissions', allowedTools: ['Read'], maxTurns: 200 },
  effort: 'medium',
  baseRef: 'feat/story-1208',
  repository: 'acme/shop',
  repositoryUrl: 'https://github.com/acme/shop.git',
  branch: 'feat/story-1208',
  targetBranch: 'main',
  baseSha: jobExampleIds.baseSha,
  headSha: null,
  pushedAt: null,
  taskStatus: null,
  error: null,
  storyLog: { implementationEntries: 0, commitEntries: 0, testResultEntries: 0 },
  verification: null,
  cancelledRun: null,
  enqueuedAt: '2026-11-30T06:00:00.000Z',
  claimedAt: '2026-11-30T06:00:01.000Z',
  startedAt: null,
  finishedAt: null,
};
