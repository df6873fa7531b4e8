import { ErrorCode, GantryError, type Action, type ActionFailure, type EntryPath, type QueuedRun, type SkipReason, type StepDefinition } from '@gantry/contracts';
import { isDatabaseUnreachable } from '@gantry/eventstore';
import { isTransient } from '@gantry/messaging';
import type { Task } from '../../domain/index.js';
import { RunQueueUnavailable } from '../../infrastructure/job-service/run-queue.js';
import type { StoredWorkflow } from '../../infrastructure/persistence/read-models.js';

export type Trigger = 'on_enter' | 'on_turn_start' | 'on_turn_complete' | 'on_exit';

/** One declared action being executed, with everything it may need to know. */
export interface ActionRun {
  trigger: Trigger;
  task: Task;
  workflow: StoredWorkflow;
  step: StepDefinition;
  position: number;
  action: Action;
  /** The entry (on_enter) or the occupancy (other triggers) the action runs for. */
  entrySeq: number;
  entryPath: EntryPath | null;
  /** What fired a trigger other than on_enter (an event id): its runs are keyed by it. */
  cause: string;
  correlationId: string;
}

export type ActionResult =
  | { outcome: 'done'; runs: QueuedRun[] }
  | { outcome: 'skipped'; reason: SkipReason }
  | { outcome: 'failed'; failure: ActionFailure; runs: QueuedRun[] };

export const fields = (run: ActionRun) => ({ taskId: run.task.taskId, workflowId: run.workflow.workflowId, stepId: run.step.id });

/**
 * An action's error that is no failure of the action: the same request may be sent again — an append
 * that met its stream kept busy past its patience (VERSION_CONFLICT, nothing written), a run the job
 * service did not take (RunQueueUnavailable, AC-L3), a service that did not answer, or the engine's
 * own database out of reach (a write that may have committed before its connection was lost: the
 * action's receipt or its run's key finds it when it is sent again).
 */
export function notDoneNow(error: unknown): boolean {
  if (error instanceof RunQueueUnavailable) return true;
  if (error instanceof GantryError && error.code === ErrorCode.VERSION_CONFLICT) return true;
  return isTransient(error) || isDatabaseUnreachable(error);
}
