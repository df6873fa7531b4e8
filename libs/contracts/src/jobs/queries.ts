import { z } from 'zod';
import { CommandMetaSchema } from '../envelope.js';
import { defineCommand } from '../registry.js';
import { JobKindSchema } from './agent-config.js';
import { jobExampleIds } from './events.js';
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
    cursor: z.string().min(1).max(500).optional(),
  }),
  reply: z.object({ jobs: z.array(JobViewSchema), nextCursor: z.string().nullable() }),
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

export const jobQueryContracts = [getJob, listJobs, getSprintRun] as const;
