import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import {
  ErrorCode,
  GantryError,
  isKnownActionType,
  issuesOf,
  TriggerNames,
  WorkflowDefinitionSchema,
  type ValidationIssue,
  type WorkflowDefinition,
} from '@gantry/contracts';

/*
 * A workflow as its author writes it (docs/workflow-engine.md, "Definitions"): YAML, snake_case.
 * It is checked twice with zod: once in this authored shape (what keys exist, what type each has),
 * then in the stored shape (cross references, each known action's config). Every issue is reported
 * with the path the author wrote, and a refused definition changes nothing. Reading the author's
 * YAML is the engine's edge: the domain sees only the stored shape from @gantry/contracts.
 */

const YamlActionSchema = z.strictObject({
  type: z.string(),
  config: z.record(z.string(), z.unknown()).nullable().optional(),
  guard: z.unknown().optional(),
});

const YamlParticipantSchema = z.strictObject({
  id: z.string().optional(),
  role: z.string(),
  agent_profile_id: z.string(),
  decision_required: z.boolean(),
  position: z.number().int().min(0).optional(),
});

const actions = z.array(YamlActionSchema).nullable().optional();

const YamlStepSchema = z.strictObject({
  id: z.string(),
  name: z.string(),
  wip_limit: z.number().int().nullable().optional(),
  prompt: z.string().nullable().optional(),
  agent_profile_id: z.string().nullable().optional(),
  participants: z.array(YamlParticipantSchema).nullable().optional(),
  on_enter: actions,
  on_turn_start: actions,
  on_turn_complete: actions,
  on_exit: actions,
});

const YamlWorkflowSchema = z.strictObject({
  name: z.string(),
  description: z.string().optional(),
  start_step: z.string().optional(),
  ceo_agent_profile_id: z.string().nullable().optional(),
  steps: z.array(YamlStepSchema),
});

type YamlStep = z.infer<typeof YamlStepSchema>;

/** An action type the engine does not know, where it was declared. */
export interface UnknownActionNotice {
  stepId: string;
  trigger: 'on_enter' | 'on_turn_start' | 'on_turn_complete' | 'on_exit';
  position: number;
  type: string;
}

export interface ParsedWorkflow {
  definition: WorkflowDefinition;
  unknownActions: UnknownActionNotice[];
}

const AUTHORED_NAMES: Record<string, string> = {
  startStepId: 'start_step',
  ceoAgentProfileId: 'ceo_agent_profile_id',
  wipLimit: 'wip_limit',
  agentProfileId: 'agent_profile_id',
  decisionRequired: 'decision_required',
  onEnter: 'on_enter',
  onTurnStart: 'on_turn_start',
  onTurnComplete: 'on_turn_complete',
  onExit: 'on_exit',
};

const TRIGGER_YAML = { onEnter: 'on_enter', onTurnStart: 'on_turn_start', onTurnComplete: 'on_turn_complete', onExit: 'on_exit' } as const;

function refuse(issues: ValidationIssue[]): never {
  const summary = issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ');
  throw new GantryError(ErrorCode.INVALID_COMMAND, `invalid workflow definition: ${summary}`, undefined, issues);
}

function normaliseStep(step: YamlStep) {
  const list = (a: YamlStep['on_enter']) => (a ?? []).map((x) => ({ type: x.type, config: x.config ?? {}, guard: (x.guard ?? null) as never }));
  return {
    id: step.id,
    name: step.name,
    wipLimit: step.wip_limit ?? null,
    prompt: step.prompt ?? null,
    agentProfileId: step.agent_profile_id ?? null,
    participants: (step.participants ?? []).map((p, i) => ({
      id: p.id ?? `${step.id}-seat-${i}`,
      role: p.role,
      agentProfileId: p.agent_profile_id,
      decisionRequired: p.decision_required,
      position: p.position ?? i,
    })),
    onEnter: list(step.on_enter),
    onTurnStart: list(step.on_turn_start),
    onTurnComplete: list(step.on_turn_complete),
    onExit: list(step.on_exit),
  };
}

/** Parses and validates a workflow's YAML; a refusal is INVALID_COMMAND with every zod issue. */
export function parseWorkflowYaml(text: string): ParsedWorkflow {
  let raw: unknown;
  try {
    raw = parseYaml(text);
  } catch (error) {
    refuse([{ path: [], message: `not valid YAML: ${(error as Error).message.split('\n')[0]}`, code: 'invalid_yaml' }]);
  }
  const authored = YamlWorkflowSchema.safeParse(raw);
  if (!authored.success) refuse(issuesOf(authored.error));
  const w = authored.data;
  const normalised = {
    name: w.name,
    startStepId: w.start_step ?? w.steps[0]?.id ?? '',
    ceoAgentProfileId: w.ceo_agent_profile_id ?? null,
    steps: w.steps.map(normaliseStep),
  };
  const stored = WorkflowDefinitionSchema.safeParse(normalised);
  if (!stored.success) {
    refuse(issuesOf(stored.error).map((issue) => ({ ...issue, path: issue.path.map((p) => (typeof p === 'string' ? (AUTHORED_NAMES[p] ?? p) : p)) })));
  }
  const definition = stored.data;
  const unknownActions: UnknownActionNotice[] = [];
  for (const step of definition.steps) {
    for (const trigger of TriggerNames) {
      step[trigger].forEach((action, position) => {
        if (!isKnownActionType(action.type)) unknownActions.push({ stepId: step.id, trigger: TRIGGER_YAML[trigger], position, type: action.type });
      });
    }
  }
  return { definition, unknownActions };
}
