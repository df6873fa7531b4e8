import type { Action, ActionFailure, EntryPath, QueuedRun, SkipReason, StepDefinition } from '@gantry/contracts';
import type { Task } from '../../domain/index.js';
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
