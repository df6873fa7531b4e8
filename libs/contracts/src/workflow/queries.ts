import { z } from 'zod';
import { CommandMetaSchema, NextCursorSchema, PageCursorSchema } from '../envelope.js';
import { defineCommand } from '../registry.js';
import { SessionViewSchema, StepEntryViewSchema, TaskViewSchema, WorkflowViewSchema } from './views.js';
import { StepIdSchema, TaskIdSchema, WorkflowIdSchema, workflowExampleIds as ids } from './values.js';

export const getWorkflow = defineCommand({
  context: 'workflow',
  name: 'get_workflow',
  request: CommandMetaSchema.extend({ workflowId: WorkflowIdSchema }),
  reply: WorkflowViewSchema,
  examples: { valid: [{ workflowId: ids.workflowId }], invalid: [{ workflowId: 'Office.Default' }] },
});

export const getTask = defineCommand({
  context: 'workflow',
  name: 'get_task',
  request: CommandMetaSchema.extend({ taskId: TaskIdSchema }),
  reply: TaskViewSchema,
  examples: { valid: [{ taskId: ids.taskId }], invalid: [{ taskId: 'T.533' }] },
});

/** The task's agent session as the runner needs it for the next job's command line. */
export const getTaskSession = defineCommand({
  context: 'workflow',
  name: 'get_task_session',
  request: CommandMetaSchema.extend({ taskId: TaskIdSchema }),
  reply: SessionViewSchema,
  examples: { valid: [{ taskId: ids.taskId }], invalid: [{}] },
});

export const listStepEntries = defineCommand({
  context: 'workflow',
  name: 'list_step_entries',
  request: CommandMetaSchema.extend({
    taskId: TaskIdSchema,
    stepId: StepIdSchema.optional(),
    /** At most this many entries a page (a page also ends at 512 KiB of them). */
    limit: z.number().int().min(1).max(500).default(100),
    /** Opaque: the nextCursor of the previous page; without it, the first page. */
    cursor: PageCursorSchema.optional(),
  }),
  /** By workflow, step and entrySeq; nextCursor is null on the last page (absent from an engine that does not page). */
  reply: z.object({ entries: z.array(StepEntryViewSchema), nextCursor: NextCursorSchema.optional() }),
  examples: {
    valid: [{ taskId: ids.taskId }, { taskId: ids.taskId, stepId: 'review' }, { taskId: ids.taskId, limit: 20, cursor: 'eyJxIjoibGlzdF9zdGVwX2VudHJpZXMifQ' }],
    invalid: [{ stepId: 'review' }, { taskId: ids.taskId, limit: 0 }, { taskId: ids.taskId, cursor: '' }],
  },
});

export const workflowQueryContracts = [getWorkflow, getTask, getTaskSession, listStepEntries] as const;
