import { z } from 'zod';
import { CommandMetaSchema } from '../envelope.js';
import { defineCommand } from '../registry.js';
import { ExternalRefSchema, IdempotencyKeySchema, JobIdSchema, LeaseTokenSchema, RunnerIdSchema, SprintRunIdSchema } from '../jobs/values.js';
import { jobExampleIds } from '../jobs/events.js';
import { RequestedModelSchema } from '../jobs/agent-config.js';
import { PlacementReplySchema } from './views.js';
import {
  NewAgentProfileIdSchema,
  AgentProfileIdSchema,
  ParticipantAgentProfileIdSchema,
  ParticipantIdSchema,
  StepIdSchema,
  TaskIdSchema,
  TaskProductIdSchema,
  VerdictSchema,
  WorkflowIdSchema,
  workflowExampleIds as ids,
} from './values.js';

/** The shipped workflow templates (docs/workflow-engine.md, "Office Default"). */
export const WorkflowTemplateSchema = z.enum(['office_default']);

const officeYaml = 'name: Small\nsteps:\n  - id: work\n    name: Work\n';

// ---------------------------------------------------------------------------------------------
// Definitions

export const importWorkflow = defineCommand({
  context: 'workflow',
  name: 'import_workflow',
  request: CommandMetaSchema.extend({
    workflowId: WorkflowIdSchema,
    /** The workflow as YAML (docs/workflow-engine.md, "Definitions"). Exactly one of yaml and template. */
    yaml: z.string().min(1).max(1_000_000).optional(),
    template: WorkflowTemplateSchema.optional(),
    idempotencyKey: IdempotencyKeySchema,
  }).refine((r) => (r.yaml === undefined) !== (r.template === undefined), { message: 'give either yaml or template', path: ['yaml'] }),
  reply: z.object({
    workflowId: WorkflowIdSchema,
    version: z.number().int().positive(),
    /** Accepted but worth knowing: action types the engine does not know (they are skipped and warned at dispatch), and n_approve:K quorums asking more approvals than the step declares seats. */
    warnings: z.array(z.object({ stepId: StepIdSchema, trigger: z.string(), position: z.number().int().min(0), type: z.string(), message: z.string() })),
  }),
  examples: {
    valid: [
      { workflowId: 'office-default', template: 'office_default', idempotencyKey: 'product-42/import:office-default-1' },
      { workflowId: 'small', yaml: officeYaml, idempotencyKey: 'product-42/import:small-1' },
    ],
    invalid: [
      // neither a YAML text nor a template
      { workflowId: 'small', idempotencyKey: 'p/import:1' },
      // a workflow id is lower case
      { workflowId: 'Office Default', template: 'office_default', idempotencyKey: 'p/import:1' },
    ],
  },
});

export const registerAgentProfile = defineCommand({
  context: 'workflow',
  name: 'register_agent_profile',
  request: CommandMetaSchema.extend({
    agentProfileId: NewAgentProfileIdSchema,
    model: RequestedModelSchema,
    thinkingBudget: z.number().int().min(0),
    idempotencyKey: IdempotencyKeySchema,
  }),
  reply: z.object({ agentProfileId: AgentProfileIdSchema }),
  examples: {
    valid: [{ agentProfileId: ids.agentProfileId, model: 'claude-opus-4-7', thinkingBudget: 12000, idempotencyKey: 'product-42/profile:reviewer-1' }],
    invalid: [
      { agentProfileId: 'profile reviewer', model: 'claude-opus-4-7', thinkingBudget: 12000, idempotencyKey: 'p/profile:1' },
      { agentProfileId: 'profile.reviewer', model: 'claude-opus-4-7', thinkingBudget: 12000, idempotencyKey: 'p/profile:1' },
      // a model the agent CLI would read as an option
      { agentProfileId: 'profile-reviewer', model: '-p', thinkingBudget: 12000, idempotencyKey: 'p/profile:1' },
    ],
  },
});

export const addStepParticipant = defineCommand({
  context: 'workflow',
  name: 'add_step_participant',
  request: CommandMetaSchema.extend({
    taskId: TaskIdSchema,
    workflowId: WorkflowIdSchema,
    stepId: StepIdSchema,
    participantId: ParticipantIdSchema,
    role: z.string().min(1).max(100),
    /** '' leaves the seat without an agent: a fan-out reports it as a failure for that seat. */
    agentProfileId: ParticipantAgentProfileIdSchema,
    decisionRequired: z.boolean(),
    position: z.number().int().min(0),
    idempotencyKey: IdempotencyKeySchema,
  }),
  reply: z.object({ participantId: ParticipantIdSchema }),
  examples: {
    valid: [
      {
        taskId: ids.taskId, workflowId: ids.workflowId, stepId: 'review', participantId: ids.participantId, role: 'reviewer',
        agentProfileId: ids.agentProfileId, decisionRequired: true, position: 0, idempotencyKey: 'product-42/seat:T-533-reviewer-1',
      },
    ],
    invalid: [
      // whether the seat's decision counts towards a quorum is never assumed
      { taskId: ids.taskId, workflowId: ids.workflowId, stepId: 'review', participantId: 'x', role: 'reviewer', agentProfileId: '', position: 0, idempotencyKey: 'p/seat:1' },
    ],
  },
});

export const removeStepParticipant = defineCommand({
  context: 'workflow',
  name: 'remove_step_participant',
  request: CommandMetaSchema.extend({ participantId: ParticipantIdSchema, idempotencyKey: IdempotencyKeySchema }),
  reply: z.object({ participantId: ParticipantIdSchema }),
  examples: {
    valid: [{ participantId: ids.participantId, idempotencyKey: 'product-42/unseat:T-533-reviewer-1' }],
    invalid: [{ participantId: ids.participantId }],
  },
});

// ---------------------------------------------------------------------------------------------
// Tasks and the entry paths

export const createTask = defineCommand({
  context: 'workflow',
  name: 'create_task',
  request: CommandMetaSchema.extend({
    taskId: TaskIdSchema,
    productId: TaskProductIdSchema,
    title: z.string().min(1).max(500),
    workflowId: WorkflowIdSchema,
    /** Where the task is created; the workflow's start step when absent. Creation is not a step entry. */
    stepId: StepIdSchema.optional(),
    primaryAgentProfileId: AgentProfileIdSchema.optional(),
    idempotencyKey: IdempotencyKeySchema,
  }),
  reply: PlacementReplySchema,
  examples: {
    valid: [{ taskId: ids.taskId, productId: ids.productId, title: 'Add the cart migration', workflowId: ids.workflowId, idempotencyKey: 'product-42/task:T-533' }],
    invalid: [{ taskId: 'T 533', productId: ids.productId, title: 'x', workflowId: ids.workflowId, idempotencyKey: 'p/task:1' }],
  },
});

export const moveTask = defineCommand({
  context: 'workflow',
  name: 'move_task',
  request: CommandMetaSchema.extend({ taskId: TaskIdSchema, toStepId: StepIdSchema, idempotencyKey: IdempotencyKeySchema }),
  reply: PlacementReplySchema,
  examples: {
    valid: [{ taskId: ids.taskId, toStepId: 'review', idempotencyKey: 'product-42/move:T-533-review-1' }],
    invalid: [{ taskId: ids.taskId, idempotencyKey: 'p/move:1' }],
  },
});

export const updateTask = defineCommand({
  context: 'workflow',
  name: 'update_task',
  request: CommandMetaSchema.extend({
    taskId: TaskIdSchema,
    title: z.string().min(1).max(500).optional(),
    /** A step change through the generic update is a step entry like any other. */
    workflowStepId: StepIdSchema.optional(),
    idempotencyKey: IdempotencyKeySchema,
  }).refine((r) => r.title !== undefined || r.workflowStepId !== undefined, { message: 'an update changes the title, the step or both', path: ['title'] }),
  reply: PlacementReplySchema,
  examples: {
    valid: [{ taskId: ids.taskId, workflowStepId: 'review', idempotencyKey: 'product-42/update:T-533-7' }, { taskId: ids.taskId, title: 'Renamed', idempotencyKey: 'p/update:2' }],
    invalid: [{ taskId: ids.taskId, idempotencyKey: 'p/update:1' }],
  },
});

export const startTask = defineCommand({
  context: 'workflow',
  name: 'start_task',
  request: CommandMetaSchema.extend({ taskId: TaskIdSchema, idempotencyKey: IdempotencyKeySchema }),
  reply: PlacementReplySchema,
  examples: {
    valid: [{ taskId: ids.taskId, idempotencyKey: 'product-42/start:T-533' }],
    invalid: [{ taskId: ids.taskId, idempotencyKey: 'no-scope' }],
  },
});

export const switchWorkflow = defineCommand({
  context: 'workflow',
  name: 'switch_workflow',
  request: CommandMetaSchema.extend({
    taskId: TaskIdSchema,
    toWorkflowId: WorkflowIdSchema,
    /** The start step of the target workflow when absent. */
    toStepId: StepIdSchema.optional(),
    idempotencyKey: IdempotencyKeySchema,
  }),
  reply: PlacementReplySchema,
  examples: {
    valid: [{ taskId: ids.taskId, toWorkflowId: 'hotfix', toStepId: 'triage', idempotencyKey: 'product-42/switch:T-533-hotfix' }],
    invalid: [{ taskId: ids.taskId, toWorkflowId: 'Hot Fix', idempotencyKey: 'p/switch:1' }],
  },
});

export const deleteTask = defineCommand({
  context: 'workflow',
  name: 'delete_task',
  request: CommandMetaSchema.extend({ taskId: TaskIdSchema, idempotencyKey: IdempotencyKeySchema }),
  reply: z.object({ taskId: TaskIdSchema, deleted: z.literal(true) }),
  examples: {
    valid: [{ taskId: ids.taskId, idempotencyKey: 'product-42/delete:T-533' }],
    invalid: [{ taskId: '', idempotencyKey: 'p/delete:1' }],
  },
});

/** The sprint run's RETURN_TASKS_TO_TODO: each known task goes back to its workflow's start step. */
export const returnTasksToTodo = defineCommand({
  context: 'workflow',
  name: 'return_tasks_to_todo',
  request: CommandMetaSchema.extend({
    sprintRunId: SprintRunIdSchema.optional(),
    /** The job service's task references; those that are not tasks of this engine are reported back, not refused. */
    taskIds: z.array(ExternalRefSchema).min(1).max(1000),
    idempotencyKey: IdempotencyKeySchema,
  }),
  reply: z.object({ returned: z.array(PlacementReplySchema), unknownTaskIds: z.array(z.string()) }),
  examples: {
    valid: [{ sprintRunId: jobExampleIds.sprintRunId, taskIds: ['T-1', 'T-2'], idempotencyKey: 'sprint-run:0f3c5e7a9b1d' }],
    invalid: [{ taskIds: [], idempotencyKey: 'sprint-run:1' }],
  },
});

// ---------------------------------------------------------------------------------------------
// Decisions

const DecisionReplySchema = z.object({
  decisionId: z.string(),
  entrySeq: z.number().int().min(0),
  /** The move the decision's quorum caused, if it caused one. */
  moved: PlacementReplySchema.nullable(),
  /** The move the decision's quorum called for and the engine refused (a target workflow or step that does not exist); the decision stands. */
  transitionRefused: z.object({ code: z.string(), message: z.string() }).nullable().optional(),
});

export const recordDecision = defineCommand({
  context: 'workflow',
  name: 'record_decision',
  request: CommandMetaSchema.extend({
    taskId: TaskIdSchema,
    stepId: StepIdSchema,
    /** The seat the decision counts for; a person may also decide without one (requires_approval). */
    participantId: ParticipantIdSchema.optional(),
    verdict: VerdictSchema,
    comment: z.string().max(20_000).optional(),
    /** Who decides: a person's id (never an e-mail address in a key, but a name here is fine). */
    actor: z.string().min(1).max(200),
    idempotencyKey: IdempotencyKeySchema,
  }),
  reply: DecisionReplySchema,
  examples: {
    valid: [{ taskId: ids.taskId, stepId: 'review', participantId: ids.participantId, verdict: 'approve', actor: 'user-17', idempotencyKey: 'product-42/decide:T-533-r2-1' }],
    // a person's decision names the person
    invalid: [{ taskId: ids.taskId, stepId: 'review', verdict: 'approve', idempotencyKey: 'p/decide:1' }],
  },
});

/** A REVIEW job's agent deciding through the runner, under the job's claim. */
export const recordReviewDecision = defineCommand({
  context: 'workflow',
  name: 'record_review_decision',
  request: CommandMetaSchema.extend({
    jobId: JobIdSchema,
    runnerId: RunnerIdSchema,
    leaseToken: LeaseTokenSchema,
    verdict: VerdictSchema,
    comment: z.string().max(20_000).optional(),
    idempotencyKey: IdempotencyKeySchema,
  }),
  reply: DecisionReplySchema,
  examples: {
    valid: [{ jobId: jobExampleIds.jobId, runnerId: jobExampleIds.runnerId, leaseToken: 1, verdict: 'reject', comment: 'the migration is not reversible', idempotencyKey: 'runner-host1-01/decide:job-7b1d3c9e-1' }],
    // the fence is part of the request
    invalid: [{ jobId: jobExampleIds.jobId, runnerId: jobExampleIds.runnerId, verdict: 'approve', idempotencyKey: 'r/decide:1' }],
  },
});

export const workflowCommandContracts = [
  importWorkflow,
  registerAgentProfile,
  addStepParticipant,
  removeStepParticipant,
  createTask,
  moveTask,
  updateTask,
  startTask,
  switchWorkflow,
  deleteTask,
  returnTasksToTodo,
  recordDecision,
  recordReviewDecision,
] as const;

