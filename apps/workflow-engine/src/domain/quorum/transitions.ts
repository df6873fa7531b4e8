import type { Action, EntryPath, WorkflowDefinition } from '@gantry/contracts';
import { nextStepId, previousStepId } from '../definitions/declaration.js';
import { guardHolds, type QuorumSeat, type RecordedDecision } from './quorum.js';

/*
 * Where a transition action takes a task (docs/workflow-engine.md, "Triggers other than
 * on_enter"), and which declared transition a recorded decision makes hold.
 */

export interface TransitionTarget {
  /** null: the task's own workflow. */
  workflowId: string | null;
  /** null with a workflowId: that workflow's start step. */
  stepId: string | null;
  entryPath: EntryPath;
}

/** The target of a transition action from `fromStepId`; null when there is none (move_to_next on the last step). */
export function transitionTarget(action: Action, definition: WorkflowDefinition, fromStepId: string): TransitionTarget | null {
  const config = action.config as { step_id?: string; workflow_id?: string };
  switch (action.type) {
    case 'move_to_next': {
      const stepId = nextStepId(definition, fromStepId);
      return stepId ? { workflowId: null, stepId, entryPath: 'turn_complete' } : null;
    }
    case 'move_to_previous': {
      const stepId = previousStepId(definition, fromStepId);
      return stepId ? { workflowId: null, stepId, entryPath: 'turn_complete' } : null;
    }
    case 'move_to_step':
      return config.step_id ? { workflowId: null, stepId: config.step_id, entryPath: 'turn_complete' } : null;
    case 'switch_workflow':
      return config.workflow_id ? { workflowId: config.workflow_id, stepId: config.step_id ?? null, entryPath: 'switch_workflow' } : null;
    default:
      return null;
  }
}

/**
 * The first guarded transition of the list whose guard holds now, for a newly recorded decision:
 * unguarded transitions and other actions wait for a turn to complete.
 */
export function transitionOnDecision(
  actions: readonly Action[],
  definition: WorkflowDefinition,
  fromStepId: string,
  seats: readonly QuorumSeat[],
  decisions: readonly RecordedDecision[],
): TransitionTarget | null {
  for (const action of actions) {
    if (action.guard === null) continue;
    if (!guardHolds(action.guard, seats, decisions)) continue;
    const target = transitionTarget(action, definition, fromStepId);
    if (target) return target;
  }
  return null;
}
