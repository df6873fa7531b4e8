import { z } from 'zod';
import { CommandMetaSchema } from '../envelope.js';
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
  request: CommandMetaSchema.extend({ taskId: TaskIdSchema, stepId: StepIdSchema.optional() }),
  reply: z.object({ entries: z.array(StepEntryViewSchema) }),
  examples: { valid: [{ taskId: ids.taskId }, { taskId: ids.taskId, stepId: 'review' }], invalid: [{ stepId: 'review' }] },
});

export const workflowQueryContracts = [getWorkflow, getTask, getTaskSession, listStepEntries] as const;
