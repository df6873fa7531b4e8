import type { JobPayload, SprintRunStatus } from '@gantry/contracts';
import type { SprintRunEvent } from './events.js';

export interface SprintRunPause {
  reason: 'MERGE_CONFLICT';
  prUrl: string;
  conflictingFiles: string[];
  questionId: string;
  resumeInstructions: string;
  pausedAt: string;
}

export interface SprintRunFailure {
  reason: 'TASK_FAILED' | 'CHECKS_FAILED';
  taskId: string | null;
  error: string;
}

export interface SprintRun {
  status: SprintRunStatus;
  sprintRunId: string;
  sprintId: string;
  productId: string;
  /** The product's repository at creation; null for runs created before products existed. */
  repository: string | null;
  taskIds: string[];
  /** What each task's job hands its agent (absent from runs created before payloads). */
  taskPayloads?: Record<string, JobPayload>;
  doneTaskIds: string[];
  branch: string;
  prUrl: string | null;
  pause: SprintRunPause | null;
  failure: SprintRunFailure | null;
  resumeSeq: number;
  createdAt: string;
  updatedAt: string;
}

export type SprintRunState = { status: 'ABSENT' } | SprintRun;

export const initialSprintRunState: SprintRunState = { status: 'ABSENT' };

export function sprintRunExists(state: SprintRunState): state is SprintRun {
  return state.status !== 'ABSENT';
}

export function remainingTasks(run: Pick<SprintRun, 'taskIds' | 'doneTaskIds'>): string[] {
  return run.taskIds.filter((t) => !run.doneTaskIds.includes(t));
}

export function evolveSprintRun(state: SprintRunState, event: SprintRunEvent): SprintRunState {
  if (event.type === 'SprintRunCreated') {
    const d = event.data;
    return {
      status: 'QUEUED',
      sprintRunId: d.sprintRunId,
      sprintId: d.sprintId,
      productId: d.productId,
      repository: d.repository ?? null,
      taskIds: d.taskIds,
      taskPayloads: d.taskPayloads ?? {},
      doneTaskIds: [],
      branch: d.branch,
      prUrl: d.prUrl,
      pause: null,
      failure: null,
      resumeSeq: 0,
      createdAt: d.createdAt,
      updatedAt: d.createdAt,
    };
  }
  if (!sprintRunExists(state)) return state;
  switch (event.type) {
    case 'SprintRunStarted':
      return { ...state, status: 'RUNNING', updatedAt: event.data.startedAt };
    case 'SprintRunTaskCompleted':
      return { ...state, doneTaskIds: [...state.doneTaskIds, event.data.taskId], updatedAt: event.data.completedAt };
    case 'SprintRunPaused': {
      const { sprintRunId: _id, ...pause } = event.data;
      return { ...state, status: 'PAUSED', prUrl: event.data.prUrl, pause, updatedAt: event.data.pausedAt };
    }
    case 'SprintRunResumed':
      return { ...state, status: 'RUNNING', pause: null, failure: null, resumeSeq: event.data.resumeSeq, updatedAt: event.data.resumedAt };
    case 'SprintRunCompleted':
      return { ...state, status: 'DONE', prUrl: event.data.prUrl ?? state.prUrl, updatedAt: event.data.completedAt };
    case 'SprintRunFailed': {
      const d = event.data;
      return {
        ...state,
        status: 'FAILED',
        pause: null,
        prUrl: d.prUrl ?? state.prUrl,
        failure: { reason: d.reason, taskId: d.taskId, error: d.error },
        updatedAt: d.failedAt,
      };
    }
    case 'SprintRunCancelled':
      return { ...state, status: 'CANCELLED', pause: null, updatedAt: event.data.cancelledAt };
    default:
      return assertNever(event);
  }
}

function assertNever(value: never): never {
  throw new Error(`unhandled sprint run event ${JSON.stringify(value)}`);
}
