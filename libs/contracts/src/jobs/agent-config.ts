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
