import { z } from 'zod';
import { CommandMetaSchema } from '../envelope.js';
import { defineCommand } from '../registry.js';
import { jobExampleIds } from './events.js';
import { RequestedConfigOverrideSchema } from './commands.js';
import { LeasedBranchNameSchema } from '../worktrees/git-names.js';
import { jsonBytes, MAX_JOB_REQUEST_BYTES, MAX_SPRINT_TASK_PAYLOAD_BYTES, tooLargeMessage } from './sizes.js';
import { IdempotencyKeySchema, ExternalRefSchema, JobPayloadSchema, SprintRunIdSchema, SprintRunStatusSchema } from './values.js';

const SprintRunRefReply = z.object({ sprintRunId: SprintRunIdSchema, status: SprintRunStatusSchema });

export const createSprintRun = defineCommand({
  context: 'jobs',
  name: 'create_sprint_run',
  request: CommandMetaSchema.extend({
    sprintId: ExternalRefSchema,
    productId: ExternalRefSchema,
    taskIds: z.array(ExternalRefSchema).min(1).refine((ids) => new Set(ids).size === ids.length, 'task ids must be distinct'),
    /**
     * A branch name the worktree service and the runners accept (`branchNameProblem`, and not a folder of
     * the rescue branches, `leasedBranchProblem`; nor, checked by the job service with the product's
     * repository, in the rescue folder of one of its worktree keys, `rescueFolderProblem`): its jobs work
     * and push there.
     */
    branch: LeasedBranchNameSchema,
    prUrl: z.url().optional(),
    /** What each task's job hands its agent (its plan, in the agent's terms); a task without one gets none. */
    taskPayloads: z.record(ExternalRefSchema, JobPayloadSchema).optional(),
    /**
     * The configuration cascade above the job for every job of the run, resumed ones too: the
     * product's overrides, then the sprint's (docs/jobs.md, "Kinds and their configuration").
     */
    configOverrides: z
      .object({
        product: RequestedConfigOverrideSchema.optional(),
        sprint: RequestedConfigOverrideSchema.optional(),
      })
      .optional(),
    idempotencyKey: IdempotencyKeySchema,
  })
    .refine((r) => Object.keys(r.taskPayloads ?? {}).every((t) => r.taskIds.includes(t)), {
      message: 'taskPayloads names only tasks of the sprint run',
      path: ['taskPayloads'],
    })
    .superRefine((r, ctx) => {
      // Each task payload becomes its job's payload; the run's event carries them all.
      const { taskPayloads, ...rest } = r;
      let bytes = jsonBytes(rest);
      for (const [taskId, payload] of Object.entries(taskPayloads ?? {})) {
        const payloadBytes = jsonBytes(payload);
        bytes += payloadBytes + jsonBytes(taskId) + 2;
        if (payloadBytes > MAX_SPRINT_TASK_PAYLOAD_BYTES) {
          ctx.addIssue({
            code: 'custom', path: ['taskPayloads', taskId],
            message: tooLargeMessage(`the payload of task ${taskId}`, payloadBytes, MAX_SPRINT_TASK_PAYLOAD_BYTES, 'MAX_SPRINT_TASK_PAYLOAD_BYTES, MAX_JOB_INPUT_BYTES less room for its prompt'),
          });
          return;
        }
      }
      if (bytes > MAX_JOB_REQUEST_BYTES) ctx.addIssue({ code: 'custom', path: [], message: tooLargeMessage('the sprint run request', bytes, MAX_JOB_REQUEST_BYTES, 'MAX_JOB_REQUEST_BYTES') });
    }),
  reply: SprintRunRefReply,
  examples: {
    valid: [
      { sprintId: 'SP-7', productId: 'product-42', taskIds: ['T-1', 'T-2'], branch: 'sprint/SP-7', idempotencyKey: 'product-42/sprint-run:SP-7-1' },
      { sprintId: 'SP-8', productId: 'product-42', taskIds: ['T-3'], branch: 'sprint/SP-8', taskPayloads: { 'T-3': { plan: 'add the index' } }, idempotencyKey: 'product-42/sprint-run:SP-8-1' },
    ],
    invalid: [
      // a sprint run with no tasks has nothing to run
      { sprintId: 'SP-7', productId: 'product-42', taskIds: [], branch: 'sprint/SP-7', idempotencyKey: 'p/sprint-run:1' },
      // ".." is not allowed in a git ref
      { sprintId: 'SP-7', productId: 'product-42', taskIds: ['T-1'], branch: 'sprint/../main', idempotencyKey: 'p/sprint-run:1' },
      // nor a branch name git refuses (a part starting with ".")
      { sprintId: 'SP-7', productId: 'product-42', taskIds: ['T-1'], branch: 'sprint/.SP-7', idempotencyKey: 'p/sprint-run:1' },
      // the folder of the worktrees' rescue branches: the worktree service leases no such branch
      { sprintId: 'SP-7', productId: 'product-42', taskIds: ['T-1'], branch: 'gantry', idempotencyKey: 'p/sprint-run:1' },
      // a payload for a task the run does not have
      { sprintId: 'SP-7', productId: 'product-42', taskIds: ['T-1'], branch: 'sprint/SP-7', taskPayloads: { 'T-9': { plan: 'x' } }, idempotencyKey: 'p/sprint-run:1' },
      // a task payload its job could not carry: over MAX_SPRINT_TASK_PAYLOAD_BYTES as JSON
      { sprintId: 'SP-7', productId: 'product-42', taskIds: ['T-1'], branch: 'sprint/SP-7', taskPayloads: { 'T-1': { plan: '\u0001'.repeat(45_000) } }, idempotencyKey: 'p/sprint-run:1' },
    ],
  },
});

export const resumeSprintRun = defineCommand({
  context: 'jobs',
  name: 'resume_sprint_run',
  request: CommandMetaSchema.extend({
    sprintRunId: SprintRunIdSchema,
    note: z.string().max(2000).optional(),
    idempotencyKey: IdempotencyKeySchema,
  }),
  reply: SprintRunRefReply,
  examples: {
    valid: [{ sprintRunId: jobExampleIds.sprintRunId, note: 'conflict in src/app.ts resolved', idempotencyKey: 'product-42/resume:sprintrun-5a6b-1' }],
    // which sprint run?
    invalid: [{ idempotencyKey: 'p/resume:1' }],
  },
});

export const cancelSprintRun = defineCommand({
  context: 'jobs',
  name: 'cancel_sprint_run',
  request: CommandMetaSchema.extend({
    sprintRunId: SprintRunIdSchema,
    reason: z.string().min(1).max(2000).optional(),
    idempotencyKey: IdempotencyKeySchema,
  }),
  reply: SprintRunRefReply,
  examples: {
    valid: [{ sprintRunId: jobExampleIds.sprintRunId, reason: 'scope changed', idempotencyKey: 'product-42/cancel-sprint-run:sprintrun-5a6b' }],
    // an empty reason is no reason; leave it out instead
    invalid: [{ sprintRunId: jobExampleIds.sprintRunId, reason: '', idempotencyKey: 'p/cancel:1' }],
  },
});

export const sprintRunCommandContracts = [createSprintRun, resumeSprintRun, cancelSprintRun] as const;
