import { z } from 'zod';
import { RequestedAllowedToolSchema, RequestedModelSchema } from '../jobs/agent-config.js';
import { AgentProfileIdSchema, ParticipantAgentProfileIdSchema, ParticipantIdSchema, SessionPermissionModeSchema, StepIdSchema } from './values.js';

/*
 * A workflow definition as the engine stores it (the data of `WorkflowDefined`) and answers it.
 * Authors write YAML (snake_case, see docs/workflow-engine.md); the engine validates it with these
 * schemas and stores this normalised form: every list present, absent settings as null, each
 * action's `config` exactly as declared. An action type the engine does not know is accepted and
 * reported (it is warned about at dispatch); a known type with a malformed config is refused here,
 * except the one case the engine must report at dispatch instead (a fan-out's empty or absent role).
 */

/** Actions recorded on the task's agent session, outside the marker system. */
export const SessionActionTypes = [
  'reset_agent_context',
  'configure_session',
  'enable_plan_mode',
  'disable_plan_mode',
  'set_session_mode',
  'auto_start_agent',
] as const;
/** Actions the engine executes itself, each under a durable per-entry marker when declared on on_enter. */
export const EngineActionTypes = [
  'clear_decisions',
  'queue_run_for_each_participant',
  'queue_run',
  'run_code_review',
  'ensure_participant_seat',
] as const;
/** Actions that move the task; not allowed on on_enter. */
export const TransitionActionTypes = ['move_to_next', 'move_to_previous', 'move_to_step', 'switch_workflow'] as const;
export const KnownActionTypes = [...SessionActionTypes, ...EngineActionTypes, ...TransitionActionTypes] as const;

export type SessionActionType = (typeof SessionActionTypes)[number];
export type EngineActionType = (typeof EngineActionTypes)[number];
export type TransitionActionType = (typeof TransitionActionTypes)[number];
export type KnownActionType = (typeof KnownActionTypes)[number];

export function isKnownActionType(type: string): type is KnownActionType {
  return (KnownActionTypes as readonly string[]).includes(type);
}
export function isSessionActionType(type: string): type is SessionActionType {
  return (SessionActionTypes as readonly string[]).includes(type);
}
export function isEngineActionType(type: string): type is EngineActionType {
  return (EngineActionTypes as readonly string[]).includes(type);
}
export function isTransitionActionType(type: string): type is TransitionActionType {
  return (TransitionActionTypes as readonly string[]).includes(type);
}

export const QuorumRules = ['all_approve', 'all_decide', 'any_reject', 'majority_approve'] as const;
/** `all_approve`, `all_decide`, `any_reject`, `majority_approve` or `n_approve:<N>` (N ≥ 1). */
export const QuorumRuleSchema = z.union([z.enum(QuorumRules), z.string().regex(/^n_approve:[1-9][0-9]{0,3}$/, 'n_approve:<N> with N ≥ 1')]);
export type QuorumRule = z.infer<typeof QuorumRuleSchema>;

/** A transition's guard: a quorum of the step's decision-required participants, or a person's approval. */
export const GuardSchema = z.union([
  z.strictObject({ wait_for_quorum: QuorumRuleSchema }),
  z.strictObject({ requires_approval: z.literal(true) }),
]);
export type Guard = z.infer<typeof GuardSchema>;

const ConfigSchema = z.record(z.string(), z.unknown());
const ReasonSchema = z.string().min(1).max(200);
const PayloadSchema = z.record(z.string(), z.unknown()).nullable();

/**
 * The config each known type accepts. Unknown keys are kept and ignored (they never change an
 * idempotency key, AC-H7); a known key of the wrong shape is refused at import.
 */
const configSchemas: Record<KnownActionType, z.ZodType> = {
  reset_agent_context: z.looseObject({}),
  configure_session: z.looseObject({
    model: z.string().min(1).optional(),
    thinking_budget: z.number().int().min(0).optional(),
    permission_mode: SessionPermissionModeSchema.optional(),
    allowed_tools: z.array(z.string().min(1)).optional(),
  }),
  enable_plan_mode: z.looseObject({}),
  disable_plan_mode: z.looseObject({}),
  set_session_mode: z.looseObject({ mode: SessionPermissionModeSchema }),
  auto_start_agent: z.looseObject({
    prompt: z.string().min(1).max(100_000).optional(),
    agent_profile_id: AgentProfileIdSchema.optional(),
    /** The job's payload: where the runner finds the repository and branch (repositoryUrl, branch, ...). */
    payload: z.record(z.string(), z.unknown()).optional(),
  }),
  clear_decisions: z.looseObject({}),
  // `role` may be empty or absent: that is reported at dispatch (AC-E3), not refused here.
  queue_run_for_each_participant: z.looseObject({ role: z.string().max(100).optional(), reason: ReasonSchema.optional(), payload: PayloadSchema.optional() }),
  queue_run: z.looseObject({
    target: z.union([
      z.literal('primary'),
      z.literal('workspace.ceo_agent'),
      z.string().regex(/^participant_role:[^\s]+$/),
      z.string().regex(/^agent_profile_id:[^\s]+$/),
    ]),
    reason: ReasonSchema.optional(),
    payload: PayloadSchema.optional(),
    prompt: z.string().min(1).max(100_000).optional(),
  }),
  run_code_review: z.looseObject({ agent_profile_id: AgentProfileIdSchema.optional(), reason: ReasonSchema.optional() }),
  ensure_participant_seat: z.looseObject({
    role: z.string().min(1).max(100),
    agent_profile_id: ParticipantAgentProfileIdSchema,
    decision_required: z.boolean(),
  }),
  move_to_next: z.looseObject({}),
  move_to_previous: z.looseObject({}),
  move_to_step: z.looseObject({ step_id: StepIdSchema }),
  switch_workflow: z.looseObject({ workflow_id: z.string().regex(/^[a-z0-9][a-z0-9_-]{0,63}$/), step_id: StepIdSchema.optional() }),
};

/** One declared action: its type, its config as declared, and (transitions only) a guard. */
export const ActionSchema = z
  .strictObject({
    type: z.string().regex(/^[a-z][a-z0-9_]{0,63}$/, 'an action type is snake_case'),
    config: ConfigSchema,
    guard: GuardSchema.nullable(),
  })
  .superRefine((action, ctx) => {
    if (!isKnownActionType(action.type)) {
      if (action.guard !== null) ctx.addIssue({ code: 'custom', path: ['guard'], message: `only a transition takes a guard (${action.type} is not one the engine knows)` });
      return;
    }
    const parsed = configSchemas[action.type].safeParse(action.config);
    if (!parsed.success) {
      for (const issue of parsed.error.issues) {
        ctx.addIssue({ code: 'custom', path: ['config', ...issue.path.map((p) => (typeof p === 'symbol' ? String(p) : p))], message: issue.message });
      }
    }
    if (action.guard !== null && !isTransitionActionType(action.type)) {
      ctx.addIssue({ code: 'custom', path: ['guard'], message: `only a transition takes a guard, ${action.type} is not one` });
    }
  });
export type Action = z.infer<typeof ActionSchema>;

/** A participant seat declared on the workflow itself (template level: every task at the step has it). */
export const TemplateParticipantSchema = z.strictObject({
  id: ParticipantIdSchema,
  role: z.string().min(1).max(100),
  agentProfileId: ParticipantAgentProfileIdSchema,
  decisionRequired: z.boolean(),
  position: z.number().int().min(0),
});
export type TemplateParticipant = z.infer<typeof TemplateParticipantSchema>;

export const StepDefinitionSchema = z.strictObject({
  id: StepIdSchema,
  name: z.string().min(1).max(200),
  /** At most this many tasks admitted at once; null: no limit. */
  wipLimit: z.number().int().min(1).nullable(),
  /** The step prompt auto_start_agent gives the task's agent. */
  prompt: z.string().min(1).max(100_000).nullable(),
  /** The step's agent (auto_start_agent, run_code_review fall back to it). */
  agentProfileId: AgentProfileIdSchema.nullable(),
  participants: z.array(TemplateParticipantSchema),
  onEnter: z.array(ActionSchema),
  onTurnStart: z.array(ActionSchema),
  onTurnComplete: z.array(ActionSchema),
  onExit: z.array(ActionSchema),
});
export type StepDefinition = z.infer<typeof StepDefinitionSchema>;

export const TriggerNames = ['onEnter', 'onTurnStart', 'onTurnComplete', 'onExit'] as const;
export type TriggerName = (typeof TriggerNames)[number];

export const WorkflowDefinitionSchema = z
  .strictObject({
    name: z.string().min(1).max(200),
    /** What the workflow is for, as its author wrote it; absent when the YAML has none. */
    description: z.string().max(10_000).optional(),
    /** Where task start takes a task, and where the sprint run returns tasks to. */
    startStepId: StepIdSchema,
    /** The workspace's CEO agent, the target `workspace.ceo_agent` of queue_run. */
    ceoAgentProfileId: AgentProfileIdSchema.nullable(),
    steps: z.array(StepDefinitionSchema).min(1).max(100),
  })
  .superRefine((workflow, ctx) => {
    const ids = new Set<string>();
    workflow.steps.forEach((step, i) => {
      if (ids.has(step.id)) ctx.addIssue({ code: 'custom', path: ['steps', i, 'id'], message: `step id ${step.id} is used twice` });
      ids.add(step.id);
      const seats = new Set<string>();
      step.participants.forEach((p, j) => {
        if (seats.has(p.id)) ctx.addIssue({ code: 'custom', path: ['steps', i, 'participants', j, 'id'], message: `participant id ${p.id} is used twice in step ${step.id}` });
        seats.add(p.id);
      });
      for (const trigger of ['onEnter', 'onExit'] as const) {
        step[trigger].forEach((action, j) => {
          if (isTransitionActionType(action.type)) {
            ctx.addIssue({ code: 'custom', path: ['steps', i, trigger, j, 'type'], message: `${action.type} moves the task and cannot run on entering or leaving a step` });
          }
        });
      }
      for (const trigger of ['onTurnStart', 'onTurnComplete', 'onExit'] as const) {
        step[trigger].forEach((action, j) => {
          if (action.type === 'clear_decisions') {
            ctx.addIssue({ code: 'custom', path: ['steps', i, trigger, j, 'type'], message: 'clear_decisions starts a step entry\'s round of decisions and runs on on_enter only' });
          }
        });
      }
    });
    if (!ids.has(workflow.startStepId)) ctx.addIssue({ code: 'custom', path: ['startStepId'], message: `start step ${workflow.startStepId} is not a step of this workflow` });
    workflow.steps.forEach((step, i) => {
      for (const trigger of TriggerNames) {
        step[trigger].forEach((action, j) => {
          if (action.type !== 'move_to_step') return;
          const target = (action.config as { step_id?: unknown }).step_id;
          if (typeof target === 'string' && !ids.has(target)) {
            ctx.addIssue({ code: 'custom', path: ['steps', i, trigger, j, 'config', 'step_id'], message: `move_to_step names step ${target}, which this workflow does not have` });
          }
        });
      }
    });
  });
export type WorkflowDefinition = z.infer<typeof WorkflowDefinitionSchema>;

/**
 * What an imported definition's configure_session may not hold although the stored form takes it: its
 * `model` and `allowed_tools` become the agent's command line (`--model`, `--allowedTools`), so they are
 * held to the rules an enqueue's are (RequestedModelSchema, RequestedAllowedToolSchema) — refused at
 * import, naming the step, rather than failing every job of the task at its runner. The stored schema
 * above stays as it was: definitions imported before still read. Paths are the stored form's.
 */
const SessionCommandLineSchema = z.looseObject({
  model: RequestedModelSchema.optional(),
  allowed_tools: z.array(RequestedAllowedToolSchema).optional(),
});

export function sessionCommandLineIssues(definition: WorkflowDefinition): { path: (string | number)[]; message: string }[] {
  const issues: { path: (string | number)[]; message: string }[] = [];
  definition.steps.forEach((step, i) => {
    for (const trigger of TriggerNames) {
      step[trigger].forEach((action, j) => {
        if (action.type !== 'configure_session') return;
        const parsed = SessionCommandLineSchema.safeParse(action.config);
        if (parsed.success) return;
        for (const issue of parsed.error.issues) {
          issues.push({ path: ['steps', i, trigger, j, 'config', ...issue.path.map((p) => (typeof p === 'symbol' ? String(p) : p))], message: `step ${step.id}: ${issue.message}` });
        }
      });
    }
  });
  return issues;
}

const emptyStep = { wipLimit: null, prompt: null, agentProfileId: null, participants: [], onEnter: [], onTurnStart: [], onTurnComplete: [], onExit: [] };

/** The Office Default shape, as an example of the stored form. */
export const workflowDefinitionExample: WorkflowDefinition = {
  name: 'Office Default',
  description: 'Work, then review and approval by the task\'s participants',
  startStepId: 'work',
  ceoAgentProfileId: null,
  steps: [
    { id: 'work', name: 'Work', ...emptyStep, onTurnComplete: [{ type: 'move_to_next', config: {}, guard: null }] },
    {
      id: 'review',
      name: 'Review',
      ...emptyStep,
      onEnter: [
        { type: 'clear_decisions', config: {}, guard: null },
        { type: 'queue_run_for_each_participant', config: { role: 'reviewer', reason: 'review_started' }, guard: null },
      ],
      onTurnComplete: [
        { type: 'move_to_next', config: {}, guard: { wait_for_quorum: 'all_approve' } },
        { type: 'move_to_step', config: { step_id: 'work' }, guard: { wait_for_quorum: 'any_reject' } },
      ],
    },
    { id: 'done', name: 'Done', ...emptyStep },
  ],
};
