import { ErrorCode, GantryError, type EntryPath } from '@gantry/contracts';
import type { Placing, StepSeats, TaskCommand } from './commands.js';
import type { TaskEvent } from './events.js';
import { evolveTask, initialTaskState, stepKey, taskExists, type Task, type TaskState } from './state.js';

/*
 * The task: where it is on its workflow, which step entries it has had, and its agent session
 * (docs/workflow-engine.md, "Tasks and WIP admission"). Admission to a step allocates the step entry
 * (entry_seq, declaration digest) in the same event, so an entry exists exactly when an admission
 * committed. Two admissions racing for one task append at the same stream version: one fails.
 */

function requireTask(state: TaskState, taskId: string): Task {
  if (!taskExists(state)) throw new GantryError(ErrorCode.NOT_FOUND, `task ${taskId} does not exist`, { taskId });
  return state;
}

const hasSeat = (step: StepSeats) => step.wipLimit === null || step.occupied < step.wipLimit;

export function decideTask(command: TaskCommand, state: TaskState): TaskEvent[] {
  switch (command.type) {
    case 'CreateTask': {
      const d = command.data;
      if (state.status !== 'ABSENT') throw new GantryError(ErrorCode.INVALID_TRANSITION, `task ${d.taskId} already exists`, { taskId: d.taskId });
      const admitted = hasSeat(d.target);
      const created: TaskEvent = {
        type: 'TaskCreated',
        data: {
          taskId: d.taskId,
          productId: d.productId,
          title: d.title,
          workflowId: d.workflowId,
          stepId: d.target.stepId,
          admitted,
          primaryAgentProfileId: d.primaryAgentProfileId,
          sessionId: d.sessionId,
          createdAt: d.now,
        },
      };
      if (admitted) return [created];
      return [
        created,
        {
          type: 'TaskQueuedForStep',
          data: { taskId: d.taskId, workflowId: d.workflowId, stepId: d.target.stepId, waitingAt: { workflowId: d.workflowId, stepId: d.target.stepId, admitted: false }, requestedBy: 'task_created', queuedAt: d.now },
        },
      ];
    }
    case 'PlaceTask':
      return placeTask(requireTask(state, command.data.taskId), command.data.placing, command.data.now);
    case 'UpdateTaskTitle': {
      const task = requireTask(state, command.data.taskId);
      if (task.title === command.data.title) return [];
      return [{ type: 'TaskUpdated', data: { taskId: task.taskId, title: command.data.title, updatedAt: command.data.now } }];
    }
    case 'DeleteTask': {
      const task = requireTask(state, command.data.taskId);
      return [{ type: 'TaskDeleted', data: { taskId: task.taskId, deletedAt: command.data.now } }];
    }
    case 'ResetAgentContext': {
      const d = command.data;
      const task = requireTask(state, d.taskId);
      // The same reset again (its trigger's event handled again): the session is that one already,
      // perhaps started since, or a later reset replaced it; a second reset would start it afresh, or
      // switch the task back to the earlier session. A trigger's id is its event's, so a repeat is
      // told by the id alone.
      if (task.session.sessionId === d.sessionId || task.session.resetTo.includes(d.sessionId)) return [];
      return [{ type: 'AgentContextReset', data: { taskId: d.taskId, sessionId: d.sessionId, cause: d.cause, resetAt: d.now } }];
    }
    case 'ConfigureSession': {
      const d = command.data;
      requireTask(state, d.taskId);
      return [{ type: 'SessionConfigured', data: { taskId: d.taskId, settings: d.settings, cause: d.cause, configuredAt: d.now } }];
    }
    case 'SetSessionMode': {
      const d = command.data;
      requireTask(state, d.taskId);
      return [{ type: 'SessionModeSet', data: { taskId: d.taskId, mode: d.mode, cause: d.cause, setAt: d.now } }];
    }
    case 'ChangePlanMode': {
      const d = command.data;
      requireTask(state, d.taskId);
      return [{ type: 'PlanModeChanged', data: { taskId: d.taskId, enabled: d.enabled, cause: d.cause, changedAt: d.now } }];
    }
    case 'RecordAutoStart': {
      const d = command.data;
      const task = requireTask(state, d.taskId);
      // Its trigger handled again: the job service answered the run queued for it with the same job.
      if (task.session.autoStartedJobId === d.jobId) return [];
      return [{ type: 'AgentAutoStarted', data: { taskId: d.taskId, jobId: d.jobId, agentProfileId: d.agentProfileId, cause: d.cause, startedAt: d.now } }];
    }
    case 'MarkSessionStarted': {
      const d = command.data;
      const task = requireTask(state, d.taskId);
      if (task.session.started) return [];
      return [{ type: 'AgentSessionStarted', data: { taskId: d.taskId, sessionId: task.session.sessionId, jobId: d.jobId, startedAt: d.now } }];
    }
    default:
      return assertNever(command);
  }
}

/**
 * WIP admission. The target has a seat → admitted there (a step entry). The target is full →
 * the task is queued for it: a task that occupies a step keeps it while it waits; a task that
 * occupies none lands in the target's feeder if that has a seat (a step entry there), else it is
 * parked at the target. A promotion of a task parked at its target is admission in place.
 * Asking for the step the task already occupies changes nothing and is no entry.
 */
function placeTask(task: Task, placing: Placing, now: string): TaskEvent[] {
  const { workflowId, target } = placing;
  const at = task.placement;
  const sameWorkflow = at.workflowId === workflowId;
  if (sameWorkflow && at.stepId === target.stepId && at.admitted) return [];
  if (placing.entryPath === 'wip_promotion' && !(sameWorkflow && at.queuedForStepId === target.stepId)) return [];
  const from = { workflowId: at.workflowId, stepId: at.stepId, admitted: at.admitted };
  const admit = (step: StepSeats, entryPath: EntryPath): TaskEvent => ({
    type: 'TaskAdmittedToStep',
    data: {
      taskId: task.taskId,
      workflowId,
      stepId: step.stepId,
      entrySeq: (task.entrySeqs[stepKey(workflowId, step.stepId)] ?? 0) + 1,
      declarationDigest: step.declaration.digest,
      entryPath,
      requestedStepId: target.stepId,
      from,
      stepEntryRecorded: step.declaration.marked.length > 0,
      admittedAt: now,
    },
  });
  const queued = (waitingAt: { workflowId: string; stepId: string; admitted: boolean }): TaskEvent => ({
    type: 'TaskQueuedForStep',
    data: { taskId: task.taskId, workflowId, stepId: target.stepId, waitingAt, requestedBy: placing.entryPath, queuedAt: at.queuedForStepId === target.stepId && at.queuedSince ? at.queuedSince : now },
  });

  if (hasSeat(target)) {
    const inPlace = placing.entryPath === 'wip_promotion' && sameWorkflow && at.stepId === target.stepId && !at.admitted;
    return [admit(target, inPlace ? 'wip_promotion_in_place' : placing.entryPath)];
  }
  // Full. A task keeps the step it occupies in this workflow while it waits (a switch leaves the old workflow).
  const occupies = at.admitted && sameWorkflow && placing.entryPath !== 'switch_workflow';
  if (occupies) {
    if (at.queuedForStepId === target.stepId) return [];
    return [queued(from)];
  }
  const feeder = placing.feeder;
  if (feeder && feeder.stepId !== target.stepId && hasSeat(feeder)) {
    return [admit(feeder, placing.entryPath), queued({ workflowId, stepId: feeder.stepId, admitted: true })];
  }
  if (sameWorkflow && at.stepId === target.stepId && at.queuedForStepId === target.stepId) return [];
  return [queued({ workflowId, stepId: target.stepId, admitted: false })];
}

function assertNever(value: never): never {
  throw new Error(`unhandled task command ${JSON.stringify(value)}`);
}

/** Emmett's shape: initialState, decide, evolve (run by the application with decideWithin). */
export const taskDecider = {
  initialState: initialTaskState,
  decide: decideTask,
  evolve: evolveTask,
};
