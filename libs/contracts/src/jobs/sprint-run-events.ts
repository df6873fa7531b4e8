import { z } from 'zod';
import { defineEvent, eventTypesOf, type EventsOf } from '../registry.js';
import { jobExampleIds } from './events.js';
import { GitRefSchema, GitShaSchema, JobIdSchema, JobPayloadSchema, ExternalRefSchema, SprintRunIdSchema, TimestampSchema } from './values.js';
import { RepositorySchema } from './products.js';
import { AgentConfigOverrideSchema } from './agent-config.js';

const sprintRunId = SprintRunIdSchema;
const at = '2026-11-30T07:00:00.000Z';
const prUrl = 'https://github.com/acme/shop/pull/102';

export const SprintRunCreated = defineEvent({
  context: 'jobs',
  type: 'SprintRunCreated',
  schemaVersion: 1,
  data: z.object({
    sprintRunId,
    sprintId: ExternalRefSchema,
    productId: ExternalRefSchema,
    /** The sprint's tasks in the order they are to be done. */
    taskIds: z.array(ExternalRefSchema).min(1).refine((ids) => new Set(ids).size === ids.length, 'task ids must be distinct'),
    branch: GitRefSchema,
    prUrl: z.url().nullable(),
    createdAt: TimestampSchema,
    /** The product's repository at creation; with the branch it names the run's pull request (absent from runs created before products existed). */
    repository: RepositorySchema.optional(),
    /** What each task's job hands its agent, as the create request named it. */
    taskPayloads: z.record(ExternalRefSchema, JobPayloadSchema).optional(),
    /** The product's and the sprint's configuration overrides its jobs are enqueued with (absent: none). */
    configOverrides: z.object({ product: AgentConfigOverrideSchema.nullable(), sprint: AgentConfigOverrideSchema.nullable() }).optional(),
  }),
  examples: {
    valid: [{ sprintRunId: jobExampleIds.sprintRunId, sprintId: 'SP-7', productId: 'product-42', taskIds: ['T-1', 'T-2'], branch: 'sprint/SP-7', prUrl: null, createdAt: at, repository: 'acme/shop' }],
    // a task listed twice would be "done" twice
    invalid: [{ sprintRunId: jobExampleIds.sprintRunId, sprintId: 'SP-7', productId: 'product-42', taskIds: ['T-1', 'T-1'], branch: 'sprint/SP-7', prUrl: null, createdAt: at }],
  },
});

export const SprintRunStarted = defineEvent({
  context: 'jobs',
  type: 'SprintRunStarted',
  schemaVersion: 1,
  data: z.object({ sprintRunId, jobId: JobIdSchema, startedAt: TimestampSchema }),
  examples: {
    valid: [{ sprintRunId: jobExampleIds.sprintRunId, jobId: jobExampleIds.jobId, startedAt: at }],
    // started by a job: the job id is required
    invalid: [{ sprintRunId: jobExampleIds.sprintRunId, startedAt: at }],
  },
});

export const SprintRunTaskCompleted = defineEvent({
  context: 'jobs',
  type: 'SprintRunTaskCompleted',
  schemaVersion: 1,
  data: z.object({ sprintRunId, taskId: ExternalRefSchema, jobId: JobIdSchema, completedAt: TimestampSchema }),
  examples: {
    valid: [{ sprintRunId: jobExampleIds.sprintRunId, taskId: 'T-1', jobId: jobExampleIds.jobId, completedAt: at }],
    // a sprint run id is sprintrun-<uuid>
    invalid: [{ sprintRunId: 'SP-7', taskId: 'T-1', jobId: jobExampleIds.jobId, completedAt: at }],
  },
});

/**
 * A job of the run reported pushing a head to the run's branch (its `JobPushReported`): the run keeps
 * its branch's heads, to tell a pull-request fact about the current head from one about a head its
 * jobs have pushed over (docs/jobs.md, "Sprint runs", SR-1).
 */
export const SprintRunHeadPushed = defineEvent({
  context: 'jobs',
  type: 'SprintRunHeadPushed',
  schemaVersion: 1,
  data: z.object({
    sprintRunId,
    jobId: JobIdSchema,
    headSha: GitShaSchema,
    /**
     * The push report's position in the job service's log. The jobs of a run push to its branch one
     * after the other, so a later push has a larger position, in whatever order the run learns of them.
     */
    position: z.number().int().positive(),
    recordedAt: TimestampSchema,
  }),
  examples: {
    valid: [{ sprintRunId: jobExampleIds.sprintRunId, jobId: jobExampleIds.jobId, headSha: jobExampleIds.headSha, position: 4711, recordedAt: at }],
    // a head is the full object id
    invalid: [{ sprintRunId: jobExampleIds.sprintRunId, jobId: jobExampleIds.jobId, headSha: '9e8d7c6', position: 4711, recordedAt: at }],
  },
});

export const SprintRunPaused = defineEvent({
  context: 'jobs',
  type: 'SprintRunPaused',
  schemaVersion: 1,
  data: z.object({
    sprintRunId,
    /** Only a merge conflict pauses a sprint run; red CI fails it. */
    reason: z.literal('MERGE_CONFLICT'),
    prUrl: z.url(),
    conflictingFiles: z.array(z.string().min(1)).min(1),
    /** The question raised for a human or agent to resolve the conflict. */
    questionId: ExternalRefSchema,
    resumeInstructions: z.string().min(1),
    pausedAt: TimestampSchema,
    /** The head the conflict was seen on (absent from pauses recorded before the run kept heads). */
    headSha: GitShaSchema.optional(),
  }),
  examples: {
    valid: [
      {
        sprintRunId: jobExampleIds.sprintRunId, reason: 'MERGE_CONFLICT', prUrl, conflictingFiles: ['src/app.ts'],
        questionId: 'question-17', resumeInstructions: 'Resolve src/app.ts on sprint/SP-7, push, then resume.', pausedAt: at,
      },
    ],
    // PAUSED always carries its context: no conflicting files is no conflict
    invalid: [
      { sprintRunId: jobExampleIds.sprintRunId, reason: 'MERGE_CONFLICT', prUrl, conflictingFiles: [], questionId: 'q', resumeInstructions: 'x', pausedAt: at },
      // checks failing never pause
      { sprintRunId: jobExampleIds.sprintRunId, reason: 'CHECKS_FAILED', prUrl, conflictingFiles: ['a'], questionId: 'q', resumeInstructions: 'x', pausedAt: at },
    ],
  },
});

export const SprintRunResumed = defineEvent({
  context: 'jobs',
  type: 'SprintRunResumed',
  schemaVersion: 1,
  data: z.object({
    sprintRunId,
    from: z.enum(['PAUSED', 'FAILED']),
    /** 1 for the first resume; part of the idempotency key of the job the resume queues. */
    resumeSeq: z.number().int().positive(),
    remainingTaskIds: z.array(ExternalRefSchema),
    actor: z.string().min(1).max(200).nullable(),
    note: z.string().max(2000).nullable(),
    resumedAt: TimestampSchema,
  }),
  examples: {
    valid: [{ sprintRunId: jobExampleIds.sprintRunId, from: 'PAUSED', resumeSeq: 1, remainingTaskIds: ['T-2'], actor: 'user-9', note: null, resumedAt: at }],
    // a DONE sprint run is never resumed
    invalid: [{ sprintRunId: jobExampleIds.sprintRunId, from: 'DONE', resumeSeq: 1, remainingTaskIds: [], actor: null, note: null, resumedAt: at }],
  },
});

export const SprintRunCompleted = defineEvent({
  context: 'jobs',
  type: 'SprintRunCompleted',
  schemaVersion: 1,
  data: z.object({ sprintRunId, branch: GitRefSchema, prUrl: z.url().nullable(), completedAt: TimestampSchema }),
  examples: {
    valid: [{ sprintRunId: jobExampleIds.sprintRunId, branch: 'sprint/SP-7', prUrl, completedAt: at }],
    // the PR url must be a URL
    invalid: [{ sprintRunId: jobExampleIds.sprintRunId, branch: 'sprint/SP-7', prUrl: 'pull 102', completedAt: at }],
  },
});

export const SprintRunFailed = defineEvent({
  context: 'jobs',
  type: 'SprintRunFailed',
  schemaVersion: 1,
  data: z.object({
    sprintRunId,
    reason: z.enum(['TASK_FAILED', 'CHECKS_FAILED']),
    taskId: ExternalRefSchema.nullable(),
    jobId: JobIdSchema.nullable(),
    prUrl: z.url().nullable(),
    failedChecks: z.array(z.string().min(1)),
    error: z.string().min(1),
    failedAt: TimestampSchema,
    /** CHECKS_FAILED: the head whose checks were red (absent from failures recorded before the run kept heads). */
    headSha: GitShaSchema.optional(),
  }),
  examples: {
    valid: [
      { sprintRunId: jobExampleIds.sprintRunId, reason: 'TASK_FAILED', taskId: 'T-2', jobId: jobExampleIds.jobId, prUrl: null, failedChecks: [], error: 'test failure: 2 failing', failedAt: at },
      { sprintRunId: jobExampleIds.sprintRunId, reason: 'CHECKS_FAILED', taskId: null, jobId: null, prUrl, failedChecks: ['ci/test'], error: 'checks failed: ci/test', failedAt: at },
      {
        sprintRunId: jobExampleIds.sprintRunId, reason: 'CHECKS_FAILED', taskId: null, jobId: null, prUrl, failedChecks: ['ci/test'], error: 'checks failed: ci/test', failedAt: at,
        headSha: jobExampleIds.headSha,
      },
    ],
    // a merge conflict is not a failure reason: it pauses
    invalid: [{ sprintRunId: jobExampleIds.sprintRunId, reason: 'MERGE_CONFLICT', taskId: null, jobId: null, prUrl, failedChecks: [], error: 'conflict', failedAt: at }],
  },
});

export const SprintRunCancelled = defineEvent({
  context: 'jobs',
  type: 'SprintRunCancelled',
  schemaVersion: 1,
  data: z.object({
    sprintRunId,
    reason: z.string().min(1).max(2000).nullable(),
    actor: z.string().min(1).max(200).nullable(),
    /** The tasks not done, which go back to TO_DO. */
    tasksBackToTodo: z.array(ExternalRefSchema),
    cancelledAt: TimestampSchema,
  }),
  examples: {
    valid: [{ sprintRunId: jobExampleIds.sprintRunId, reason: 'scope changed', actor: 'user-9', tasksBackToTodo: ['T-2'], cancelledAt: at }],
    // the tasks to return are a list, even when there is one
    invalid: [{ sprintRunId: jobExampleIds.sprintRunId, reason: null, actor: null, tasksBackToTodo: 'T-2', cancelledAt: at }],
  },
});

export const sprintRunEventContracts = [
  SprintRunCreated,
  SprintRunStarted,
  SprintRunTaskCompleted,
  SprintRunHeadPushed,
  SprintRunPaused,
  SprintRunResumed,
  SprintRunCompleted,
  SprintRunFailed,
  SprintRunCancelled,
] as const;

/** A sprint run's events (one stream per sprint run), as its decider emits them. */
export type SprintRunEvent = EventsOf<typeof sprintRunEventContracts>;
export type SprintRunEventType = SprintRunEvent['type'];
export const sprintRunEventTypes = eventTypesOf(sprintRunEventContracts);

export type SprintRunCreatedData = z.output<typeof SprintRunCreated.data>;
export type SprintRunStartedData = z.output<typeof SprintRunStarted.data>;
export type SprintRunTaskCompletedData = z.output<typeof SprintRunTaskCompleted.data>;
export type SprintRunHeadPushedData = z.output<typeof SprintRunHeadPushed.data>;
export type SprintRunPausedData = z.output<typeof SprintRunPaused.data>;
export type SprintRunResumedData = z.output<typeof SprintRunResumed.data>;
export type SprintRunCompletedData = z.output<typeof SprintRunCompleted.data>;
export type SprintRunFailedData = z.output<typeof SprintRunFailed.data>;
export type SprintRunCancelledData = z.output<typeof SprintRunCancelled.data>;
