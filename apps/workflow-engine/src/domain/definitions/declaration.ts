import { canonicalHash, isSessionActionType, type Action, type StepDefinition, type WorkflowDefinition } from '@gantry/contracts';

/*
 * What the engine reads of a step's on_enter declaration. "Position" is always the index in the
 * whole declared list, session-owned actions included (docs/workflow-engine.md, "Step entries").
 */

export interface MarkedPosition {
  position: number;
  kind: string;
}

/**
 * The positions that hold a durable marker: every declared action that is not session-owned —
 * the engine-owned types and any type the engine does not know (it is marked skipped(unrecognised)).
 */
export function markedPositions(onEnter: readonly Action[]): MarkedPosition[] {
  return onEnter.flatMap((action, position) => (isSessionActionType(action.type) ? [] : [{ position, kind: action.type }]));
}

/** A step needs a step-entry record exactly when something in its on_enter holds a marker. */
export function needsStepEntryRecord(onEnter: readonly Action[]): boolean {
  return markedPositions(onEnter).length > 0;
}

/**
 * The declaration digest: over the ordered (position, type) pairs of the whole on_enter list, not
 * over config. An inserted, removed or reordered action changes it; a changed config does not.
 */
export function declarationDigest(onEnter: readonly Action[]): string {
  return canonicalHash(onEnter.map((action, position) => [position, action.type]));
}

export function stepOf(definition: WorkflowDefinition, stepId: string): StepDefinition | null {
  return definition.steps.find((s) => s.id === stepId) ?? null;
}

export function nextStepId(definition: WorkflowDefinition, stepId: string): string | null {
  const i = definition.steps.findIndex((s) => s.id === stepId);
  return i === -1 ? null : (definition.steps[i + 1]?.id ?? null);
}

export function previousStepId(definition: WorkflowDefinition, stepId: string): string | null {
  const i = definition.steps.findIndex((s) => s.id === stepId);
  return i <= 0 ? null : definition.steps[i - 1]!.id;
}

/** The feeder of a step is the step declared before it: where a task waits for a full step when it occupies none. */
export const feederOf = previousStepId;

/** What an admission needs to know of the step it admits to: the digest and the marked positions. */
export interface StepDeclaration {
  stepId: string;
  digest: string;
  marked: MarkedPosition[];
}

export function stepDeclaration(step: StepDefinition): StepDeclaration {
  return { stepId: step.id, digest: declarationDigest(step.onEnter), marked: markedPositions(step.onEnter) };
}
