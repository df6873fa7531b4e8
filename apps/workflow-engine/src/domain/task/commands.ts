import type { EntryPath, SessionCause, SessionPermissionMode, SessionSettings } from '@gantry/contracts';
import type { StepDeclaration } from '../definitions/declaration.js';

/*
 * The task's commands. Time and ids come in here; so do the facts of WIP admission the application
 * read under the steps' admission locks: how many tasks occupy the target (and its feeder) now.
 */

/** One step as an admission sees it. */
export interface StepSeats {
  stepId: string;
  /** null: no WIP limit. */
  wipLimit: number | null;
  /** Tasks admitted there now, this task not counted. */
  occupied: number;
  declaration: StepDeclaration;
}

/** A request to put the task at a step, and what the application knows of the steps involved. */
export interface Placing {
  workflowId: string;
  target: StepSeats;
  /** The step declared before the target (where a task that occupies nothing waits for it); null for the first step. */
  feeder: StepSeats | null;
  entryPath: EntryPath;
}

export type TaskCommand =
  | {
      type: 'CreateTask';
      data: {
        taskId: string;
        productId: string;
        title: string;
        workflowId: string;
        primaryAgentProfileId: string | null;
        sessionId: string;
        target: StepSeats;
        now: string;
      };
    }
  | { type: 'PlaceTask'; data: { taskId: string; placing: Placing; now: string } }
  | { type: 'UpdateTaskTitle'; data: { taskId: string; title: string; now: string } }
  | { type: 'DeleteTask'; data: { taskId: string; now: string } }
  | { type: 'ResetAgentContext'; data: { taskId: string; sessionId: string; cause: SessionCause; now: string } }
  | { type: 'ConfigureSession'; data: { taskId: string; settings: SessionSettings; cause: SessionCause; now: string } }
  | { type: 'SetSessionMode'; data: { taskId: string; mode: SessionPermissionMode; cause: SessionCause; now: string } }
  | { type: 'ChangePlanMode'; data: { taskId: string; enabled: boolean; cause: SessionCause; now: string } }
  | { type: 'RecordAutoStart'; data: { taskId: string; jobId: string; agentProfileId: string | null; cause: SessionCause; now: string } }
  | { type: 'MarkSessionStarted'; data: { taskId: string; jobId: string; now: string } };

export type TaskCommandType = TaskCommand['type'];
