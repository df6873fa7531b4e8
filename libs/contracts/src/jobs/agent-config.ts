import { z } from 'zod';

export const JobKinds = [
  'IDEA_GRILL',
  'IDEA_MAKE_PLAN',
  'PLAN_CHAT',
  'TASK_IMPLEMENTATION',
  'SPRINT_IMPLEMENTATION',
  'REVIEW',
] as const;
export const JobKindSchema = z.enum(JobKinds);
export type JobKind = z.infer<typeof JobKindSchema>;

export const PermissionModeSchema = z.enum(['acceptEdits', 'bypassPermissions', 'default', 'plan']);
export type PermissionMode = z.infer<typeof PermissionModeSchema>;

export const EffortLevelSchema = z.enum(['medium', 'high', 'xhigh', 'max']);
export type EffortLevel = z.infer<typeof EffortLevelSchema>;

/** The agent configuration a job runs with, resolved at claim and recorded for cost attribution. */
export const AgentConfigSchema = z.object({
  model: z.string().min(1),
  thinkingBudget: z.number().int().min(0),
  permissionMode: PermissionModeSchema,
  allowedTools: z.array(z.string().min(1)),
  /** Recorded only; never passed to the CLI. */
  maxTurns: z.number().int().positive(),
});
export type AgentConfig = z.infer<typeof AgentConfigSchema>;

/**
 * Why `tool` is not one rule of the agent CLI's `--allowedTools`, or null. The CLI splits the list on
 * commas and blanks outside parentheses (`Bash(git commit:*)` is one rule); a separator outside them
 * would silently turn one configured rule into two, and an unbalanced parenthesis into something else.
 */
export function allowedToolProblem(tool: string): string | null {
  const outsideParentheses = tool.replace(/\([^()]*\)/g, '');
  return /[,\s()]/.test(outsideParentheses) ? `allowed tool "${tool}" has a comma, blank or unbalanced parenthesis outside its rule` : null;
}

/** A partial override at one level of the cascade (product, sprint, job). */
export const AgentConfigOverrideSchema = AgentConfigSchema.partial();
export type AgentConfigOverride = z.infer<typeof AgentConfigOverrideSchema>;

/**
 * Thinking budget → the CLI's `--effort`: 0 → no flag; 1–6000 → medium; 6001–12000 → high;
 * 12001–24000 → xhigh; above 24000 → max.
 */
export function effortForThinkingBudget(budget: number): EffortLevel | null {
  if (!Number.isInteger(budget) || budget < 0) throw new RangeError(`thinking budget must be a whole number ≥ 0, got ${budget}`);
  if (budget === 0) return null;
  if (budget <= 6000) return 'medium';
  if (budget <= 12000) return 'high';
  if (budget <= 24000) return 'xhigh';
  return 'max';
}

/**
 * A model name as a request may give it: it becomes the value of the agent CLI's `--model`, so it may
 * not start with `-`, which the CLI would read as an option of its own (docs/jobs.md, "What the runner
 * takes"; the runner refuses such a job too, for one recorded before this rule).
 */
export const RequestedModelSchema = z
  .string()
  .min(1)
  .max(200)
  .refine((model) => !model.startsWith('-'), 'a model name does not start with "-": the agent CLI would read it as an option')
  .refine((model) => !model.includes('\u0000'), 'a model name has no NUL character: no command line can carry one');

/**
 * An allowed tool as a request (or an imported workflow's configure_session) may give it: one rule of
 * the CLI's list (allowedToolProblem), not starting with `-` — first in the list, the CLI would read it
 * as an option, and the runner refuses the job (buildAgentCommand).
 */
export const RequestedAllowedToolSchema = z
  .string()
  .min(1)
  .max(200)
  .superRefine((tool, ctx) => {
    const problem = tool.startsWith('-') ? `allowed tool "${tool}" starts with "-": the agent CLI would read it as an option` : allowedToolProblem(tool);
    if (problem) ctx.addIssue({ code: 'custom', message: problem });
  });

/**
 * The agent profile a workflow run is queued for. A REVIEW job takes its model and thinking
 * budget from here; the other kinds only record which profile asked.
 */
export const AgentProfileSchema = z.object({
  id: z.string().min(1).max(200).regex(/^[^\s]+$/, 'an agent profile id has no whitespace'),
  model: z.string().min(1),
  thinkingBudget: z.number().int().min(0),
});
export type AgentProfile = z.infer<typeof AgentProfileSchema>;

/** A kind's defaults; `null` model/budget means "taken from the agent profile" (REVIEW). */
export interface KindDefaults {
  model: string | null;
  thinkingBudget: number | null;
  permissionMode: PermissionMode;
  allowedTools: readonly string[];
  maxTurns: number;
}

/** Every tool the runner's MCP server offers, as the agent CLI names them (`mcp__<server>__<tool>`). */
export const MCP_SERVER_NAME = 'gantry';
export const GantryToolNames = [
  'log_implementation',
  'log_commit',
  'log_test_result',
  'update_job_status',
  'ask_question',
] as const;
export type GantryToolName = (typeof GantryToolNames)[number];

export function qualifiedToolName(tool: GantryToolName): string {
  return `mcp__${MCP_SERVER_NAME}__${tool}`;
}

/**
 * The allowed tools plus every gantry tool not yet among them: the story-log obligation cannot be
 * met when the agent may not call them, and the tool server offers nothing else (no claim,
 * heartbeat or queue tools). Applied when the configuration is resolved, so the list recorded on
 * the job is exactly the one the agent's command line gets.
 */
/**
 * The tool a REVIEW job's agent records its decision with (approve / reject, with a comment); the
 * runner offers it to REVIEW jobs only and forwards it to the workflow engine under the job's claim
 * (docs/workflow-engine.md, AC-R1).
 */
export const REVIEW_DECISION_TOOL = 'record_decision' as const;

export function withGantryTools(tools: readonly string[]): string[] {
  const all = [...tools];
  for (const tool of GantryToolNames.map(qualifiedToolName)) if (!all.includes(tool)) all.push(tool);
  return all;
}

const READ_TOOLS = ['Read', 'Glob', 'Grep'] as const;
const WRITE_TOOLS = ['Edit', 'Write', 'Bash'] as const;
const STORY_LOG_TOOLS = [
  'mcp__gantry__log_implementation',
  'mcp__gantry__log_commit',
  'mcp__gantry__log_test_result',
] as const;

/**
 * The kind defaults (docs/jobs.md, "Kinds and their configuration"): model, thinking budget,
 * permission mode, allowed tools and max_turns per kind.
 * No kind gets the claim/heartbeat tools: the agent never claims or renews its own job.
 */
export const KIND_DEFAULTS: Readonly<Record<JobKind, Readonly<KindDefaults>>> = {
  IDEA_GRILL: {
    model: 'claude-sonnet-4-6',
    thinkingBudget: 12000,
    permissionMode: 'acceptEdits',
    allowedTools: [...READ_TOOLS, 'WebSearch', 'WebFetch', ...STORY_LOG_TOOLS],
    maxTurns: 40,
  },
  IDEA_MAKE_PLAN: {
    model: 'claude-opus-4-7',
    thinkingBudget: 24000,
    permissionMode: 'acceptEdits',
    allowedTools: [...READ_TOOLS, 'WebSearch', 'WebFetch', ...STORY_LOG_TOOLS],
    maxTurns: 60,
  },
  PLAN_CHAT: {
    model: 'claude-sonnet-4-6',
    thinkingBudget: 6000,
    permissionMode: 'acceptEdits',
    allowedTools: [...READ_TOOLS, ...STORY_LOG_TOOLS],
    maxTurns: 20,
  },
  TASK_IMPLEMENTATION: {
    model: 'claude-sonnet-4-6',
    thinkingBudget: 6000,
    permissionMode: 'bypassPermissions',
    allowedTools: [...READ_TOOLS, ...WRITE_TOOLS, ...STORY_LOG_TOOLS],
    maxTurns: 200,
  },
  SPRINT_IMPLEMENTATION: {
    model: 'claude-sonnet-4-6',
    thinkingBudget: 6000,
    permissionMode: 'bypassPermissions',
    allowedTools: [...READ_TOOLS, ...WRITE_TOOLS, ...STORY_LOG_TOOLS],
    maxTurns: 400,
  },
  REVIEW: {
    model: null,
    thinkingBudget: null,
    permissionMode: 'acceptEdits',
    allowedTools: [...READ_TOOLS, 'Bash', ...STORY_LOG_TOOLS, `mcp__${MCP_SERVER_NAME}__${REVIEW_DECISION_TOOL}`],
    maxTurns: 60,
  },
};

/**
 * The configuration cascade: kind defaults (REVIEW: model and budget from the agent profile)
 * → product → sprint → job. Later levels win field by field; `undefined` fields do not override.
 * Throws a RangeError for a REVIEW without an agent profile — there is no model to run.
 */
export function resolveAgentConfig(
  kind: JobKind,
  productOverride?: AgentConfigOverride | null,
  sprintOverride?: AgentConfigOverride | null,
  jobOverride?: AgentConfigOverride | null,
  agentProfile?: AgentProfile | null,
): AgentConfig {
  const defaults = KIND_DEFAULTS[kind];
  const model = defaults.model ?? agentProfile?.model;
  const thinkingBudget = defaults.thinkingBudget ?? agentProfile?.thinkingBudget;
  if (model === undefined || thinkingBudget === undefined) {
    throw new RangeError(`a ${kind} job takes its model and thinking budget from its agent profile, and it has none`);
  }
  let config: AgentConfig = {
    model,
    thinkingBudget,
    permissionMode: defaults.permissionMode,
    allowedTools: [...defaults.allowedTools],
    maxTurns: defaults.maxTurns,
  };
  for (const override of [productOverride, sprintOverride, jobOverride]) {
    if (!override) continue;
    config = {
      model: override.model ?? config.model,
      thinkingBudget: override.thinkingBudget ?? config.thinkingBudget,
      permissionMode: override.permissionMode ?? config.permissionMode,
      allowedTools: override.allowedTools ? [...override.allowedTools] : config.allowedTools,
      maxTurns: override.maxTurns ?? config.maxTurns,
    };
  }
  return AgentConfigSchema.parse({ ...config, allowedTools: withGantryTools(config.allowedTools) });
}
