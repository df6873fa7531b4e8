import type { EntryPath, SessionPermissionMode, SessionSettings } from '@gantry/contracts';
import type { TaskEvent } from './events.js';

export interface TaskPlacement {
  workflowId: string;
  stepId: string;
  /** true: the task occupies a seat at the step; false: it is parked there, waiting. */
  admitted: boolean;
  /** The full step the task waits for, if any. */
  queuedForStepId: string | null;
  queuedSince: string | null;
}

export interface TaskEntry {
  workflowId: string;
  stepId: string;
  entrySeq: number;
  entryPath: EntryPath;
  stepEntryRecorded: boolean;
  admittedAt: string;
}

export interface TaskSession {
  sessionId: string;
  /** A job of the task has started this session: the next one resumes it. */
  started: boolean;
  settings: SessionSettings;
  planMode: boolean;
  mode: SessionPermissionMode | null;
  /** Every session id a reset has given the task: a reset to one of them again is a repeat, not a new session. */
  resetTo: readonly string[];
  /** The job the last auto_start_agent started: the same start handled again is a repeat. */
  autoStartedJobId: string | null;
}

export interface Task {
  status: 'ACTIVE' | 'DELETED';
  taskId: string;
  productId: string;
  title: string;
  primaryAgentProfileId: string | null;
  createdAt: string;
  placement: TaskPlacement;
  /** The step entry the task is in now; null while it occupies the step it was created at, or is parked. */
  currentEntry: TaskEntry | null;
  /** The last entry_seq allocated per (workflow, step): the next entry is one higher. */
  entrySeqs: Record<string, number>;
  session: TaskSession;
}

export type TaskState = { status: 'ABSENT' } | Task;

/**
 * How many of the task's latest reset session ids its state keeps. A trigger run again is kept from
 * resetting a second time by its receipt (keyed by the event that fired it, docs/workflow-engine.md,
 * "Triggers other than on_enter"); the list is the decider's own check behind it, for the resets a
 * late repeat can still be about. Unbounded, every reset grew the task's state, which is folded at
 * each command and written whole to its `tasks` row at each of its events.
 */
export const RESETS_REMEMBERED = 32;

export const initialTaskState: TaskState = { status: 'ABSENT' };

export function taskExists(state: TaskState): state is Task {
  return state.status === 'ACTIVE';
}

export function stepKey(workflowId: string, stepId: string): string {
  return `${workflowId}/${stepId}`;
}

/**
 * Which occupancy of a step a job belongs to: the entry, or 0 for the occupancy the task was
 * created into. A job's turn counts only while the task is still in that occupancy.
 */
export function occupancyOf(task: Task): { workflowId: string; stepId: string; entrySeq: number } | null {
  if (!task.placement.admitted) return null;
  return { workflowId: task.placement.workflowId, stepId: task.placement.stepId, entrySeq: task.currentEntry?.entrySeq ?? 0 };
}

/** plan while plan mode is on, else the session mode, else the configured permission mode. */
export function effectivePermissionMode(session: TaskSession): SessionPermissionMode | null {
  if (session.planMode) return 'plan';
  return session.mode ?? session.settings.permissionMode;
}

const noSettings: SessionSettings = { model: null, thinkingBudget: null, permissionMode: null, allowedTools: null };

export function evolveTask(state: TaskState, event: TaskEvent): TaskState {
  if (event.type === 'TaskCreated') {
    const d = event.data;
    return {
      status: 'ACTIVE',
      taskId: d.taskId,
      productId: d.productId,
      title: d.title,
      primaryAgentProfileId: d.primaryAgentProfileId,
      createdAt: d.createdAt,
      placement: { workflowId: d.workflowId, stepId: d.stepId, admitted: d.admitted, queuedForStepId: null, queuedSince: null },
      currentEntry: null,
      entrySeqs: {},
      session: { sessionId: d.sessionId, started: false, settings: noSettings, planMode: false, mode: null, resetTo: [], autoStartedJobId: null },
    };
  }
  if (state.status === 'ABSENT') return state;
  const task = state;
  switch (event.type) {
    case 'TaskQueuedForStep': {
      const d = event.data;
      const placement = d.waitingAt.admitted
        ? { ...task.placement, queuedForStepId: d.stepId, queuedSince: d.queuedAt }
        : { workflowId: d.waitingAt.workflowId, stepId: d.waitingAt.stepId, admitted: false, queuedForStepId: d.stepId, queuedSince: d.queuedAt };
      return { ...task, placement, currentEntry: d.waitingAt.admitted ? task.currentEntry : null };
    }
    case 'TaskAdmittedToStep': {
      const d = event.data;
      return {
        ...task,
        placement: { workflowId: d.workflowId, stepId: d.stepId, admitted: true, queuedForStepId: null, queuedSince: null },
        currentEntry: { workflowId: d.workflowId, stepId: d.stepId, entrySeq: d.entrySeq, entryPath: d.entryPath, stepEntryRecorded: d.stepEntryRecorded, admittedAt: d.admittedAt },
        entrySeqs: { ...task.entrySeqs, [stepKey(d.workflowId, d.stepId)]: d.entrySeq },
      };
    }
    case 'TaskUpdated':
      return { ...task, title: event.data.title };
    case 'TaskDeleted':
      return { ...task, status: 'DELETED' };
    case 'AgentContextReset':
      return { ...task, session: { ...task.session, sessionId: event.data.sessionId, started: false, resetTo: [...task.session.resetTo.slice(1 - RESETS_REMEMBERED), event.data.sessionId] } };
    case 'SessionConfigured': {
      const s = event.data.settings;
      const was = task.session.settings;
      return {
        ...task,
        session: {
          ...task.session,
          settings: { model: s.model ?? was.model, thinkingBudget: s.thinkingBudget ?? was.thinkingBudget, permissionMode: s.permissionMode ?? was.permissionMode, allowedTools: s.allowedTools ?? was.allowedTools },
        },
      };
    }
    case 'SessionModeSet':
      return { ...task, session: { ...task.session, mode: event.data.mode } };
    case 'PlanModeChanged':
      return { ...task, session: { ...task.session, planMode: event.data.enabled } };
    case 'AgentAutoStarted':
      return { ...task, session: { ...task.session, autoStartedJobId: event.data.jobId } };
    case 'AgentSessionStarted':
      return event.data.sessionId === task.session.sessionId ? { ...task, session: { ...task.session, started: true } } : task;
    default:
      return assertNever(event);
  }
}

function assertNever(value: never): never {
  throw new Error(`unhandled task event ${JSON.stringify(value)}`);
}
