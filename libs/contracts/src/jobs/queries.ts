import { z } from 'zod';
import { CommandMetaSchema, NextCursorSchema, PageCursorSchema } from '../envelope.js';
import { defineCommand } from '../registry.js';
import { JobKindSchema } from './agent-config.js';
import { CommitLogged, ImplementationLogged, jobExampleIds, TestResultLogged } from './events.js';
import { JobIdSchema, JobStatusSchema, ExternalRefSchema, RunnerIdSchema, SprintRunIdSchema } from './values.js';
import { JobViewSchema, SprintRunViewSchema } from './views.js';

export const getJob = defineCommand({
  context: 'jobs',
  name: 'get_job',
  request: CommandMetaSchema.extend({ jobId: JobIdSchema }),
  reply: JobViewSchema,
  examples: {
    valid: [{ jobId: jobExampleIds.jobId }],
    // upper-case uuid: job ids are written in lower case
    invalid: [{ jobId: 'job-7B1D3C9E-2F4A-4C1B-9E7D-0A1B2C3D4E5F' }],
  },
});

export const listJobs = defineCommand({
  context: 'jobs',
  name: 'list_jobs',
  request: CommandMetaSchema.extend({
    status: z.array(JobStatusSchema).min(1).optional(),
    kind: z.array(JobKindSchema).min(1).optional(),
    productId: ExternalRefSchema.optional(),
    sprintId: ExternalRefSchema.optional(),
    sprintRunId: SprintRunIdSchema.optional(),
    storyId: ExternalRefSchema.optional(),
    taskId: ExternalRefSchema.optional(),
    /** Jobs whose current claim this runner holds (a runner started again settles them). */
    runnerId: RunnerIdSchema.optional(),
    limit: z.number().int().min(1).max(500).default(100),
    /** Opaque: the nextCursor of the previous page. */
    cursor: PageCursorSchema.optional(),
  }),
  reply: z.object({ jobs: z.array(JobViewSchema), nextCursor: NextCursorSchema }),
  examples: {
    valid: [{ status: ['QUEUED', 'CLAIMED'], kind: ['TASK_IMPLEMENTATION'] }, { sprintId: 'SP-7', limit: 50 }, { storyId: 'ST-1208' }, { runnerId: 'runner-host1-01', status: ['CLAIMED', 'RUNNING'] }],
    invalid: [
      // an unknown status
      { status: ['WAITING'] },
      // at most 500 a page
      { limit: 10_000 },
    ],
  },
});

export const getSprintRun = defineCommand({
  context: 'jobs',
  name: 'get_sprint_run',
  request: CommandMetaSchema.extend({ sprintRunId: SprintRunIdSchema }),
  reply: SprintRunViewSchema,
  examples: {
    valid: [{ sprintRunId: jobExampleIds.sprintRunId }],
    // the sprint id is not the sprint run id
    invalid: [{ sprintRunId: 'SP-7' }],
  },
});

/**
 * One entry of a job's story log as it was logged (under which claim, when, and what it says): the
 * data of its ImplementationLogged, CommitLogged or TestResultLogged event, told apart by `kind`.
 */
export const StoryEntryViewSchema = z.discriminatedUnion('kind', [
  ImplementationLogged.data.extend({ kind: z.literal('implementation') }),
  CommitLogged.data.extend({ kind: z.literal('commit') }),
  TestResultLogged.data.extend({ kind: z.literal('test_result') }),
]);
export type StoryEntryView = z.infer<typeof StoryEntryViewSchema>;

/**
 * A job's story log, every attempt's entries in the order they were logged, a page at a time
 * (get_job carries only the current attempt's counts: docs/jobs.md, "The story log").
 */
export const getJobStory = defineCommand({
  context: 'jobs',
  name: 'get_job_story',
  request: CommandMetaSchema.extend({
    jobId: JobIdSchema,
    /** At most this many entries a page (a page also ends at 512 KiB of them). */
    limit: z.number().int().min(1).max(500).default(50),
    /** Opaque: the nextCursor of the previous page of this job's story; without it, the first page. */
    cursor: PageCursorSchema.optional(),
  }),
  reply: z.object({
    jobId: JobIdSchema,
    /** How many entries the job's story log holds in all, over every attempt (when this page was read). */
    total: z.number().int().min(0),
    entries: z.array(StoryEntryViewSchema),
    nextCursor: NextCursorSchema,
  }),
  examples: {
    valid: [{ jobId: jobExampleIds.jobId }, { jobId: jobExampleIds.jobId, limit: 10, cursor: 'eyJxIjoiZ2V0X2pvYl9zdG9yeSJ9' }],
    invalid: [{}, { jobId: jobExampleIds.jobId, limit: 0 }, { jobId: jobExampleIds.jobId, cursor: '' }],
  },
});

export const jobQueryContracts = [getJob, listJobs, getSprintRun, getJobStory] as const;
