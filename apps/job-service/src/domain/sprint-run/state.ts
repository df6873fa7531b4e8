import type { JobPayload, SprintRunStatus } from '@gantry/contracts';
import type { SprintConfigOverrides } from './commands.js';
import type { SprintRunEvent } from './events.js';

export const NO_CONFIG_OVERRIDES: SprintConfigOverrides = { product: null, sprint: null };

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

/** A head a job of the run reported pushing to its branch, with the report's position in the job service's log. */
export interface SprintRunHead {
  headSha: string;
  position: number;
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
  /** The product's and the sprint's configuration overrides its jobs are enqueued with (absent from runs created before them). */
  configOverrides?: SprintConfigOverrides;
  doneTaskIds: string[];
  branch: string;
  prUrl: string | null;
  pause: SprintRunPause | null;
  failure: SprintRunFailure | null;
  resumeSeq: number;
  /**
   * The heads the run's jobs pushed to its branch, as it learnt of them (absent, like the two lists
   * below, from runs and view rows from before the run kept heads: read as empty).
   */
  pushedHeads?: SprintRunHead[];
  /** The heads of the pull-request facts that paused or failed the run since it was last resumed. */
  factHeads?: string[];
  /** The heads whose pause or failure a resume answered. */
  answeredHeads?: string[];
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

/** The newest head the run's jobs pushed: the one reported last in the job service's log, whenever the run learnt of it. */
export function currentHead(run: Pick<SprintRun, 'pushedHeads'>): SprintRunHead | null {
  let newest: SprintRunHead | null = null;
  for (const head of run.pushedHeads ?? []) if (newest === null || head.position > newest.position) newest = head;
  return newest;
}

/**
 * Why a pull-request fact about `headSha` is passed over, or null when it acts (docs/jobs.md, "Sprint
 * runs", SR-1): PUSHED_OVER, a head the run's jobs pushed and a later push of theirs replaced;
 * ANSWERED, a head whose pause or failure a resume answered. A head the run never heard of acts: a
 * person's push, or a job's push whose report the run has not handled yet — either may be the branch
 * as it is now.
 */
export function passedOverHead(run: SprintRun, headSha: string): 'PUSHED_OVER' | 'ANSWERED' | null {
  if ((run.answeredHeads ?? []).includes(headSha)) return 'ANSWERED';
  if (!(run.pushedHeads ?? []).some((h) => h.headSha === headSha)) return null;
  return currentHead(run)?.headSha === headSha ? null : 'PUSHED_OVER';
}

const withFactHead = (run: SprintRun, headSha: string | undefined): string[] | undefined =>
  headSha === undefined ? run.factHeads : [...(run.factHeads ?? []), headSha];

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
      configOverrides: d.configOverrides ?? NO_CONFIG_OVERRIDES,
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
    case 'SprintRunHeadPushed': {
      const { headSha, position } = event.data;
      return { ...state, pushedHeads: [...(state.pushedHeads ?? []), { headSha, position }], updatedAt: event.data.recordedAt };
    }
    case 'SprintRunPaused': {
      const { sprintRunId: _id, headSha, ...pause } = event.data;
      return { ...state, status: 'PAUSED', prUrl: event.data.prUrl, pause, factHeads: withFactHead(state, headSha), updatedAt: event.data.pausedAt };
    }
    case 'SprintRunResumed':
      return {
        ...state,
        status: 'RUNNING',
        pause: null,
        failure: null,
        resumeSeq: event.data.resumeSeq,
        // The resume answers what paused or failed the run, and so every fact about those heads.
        factHeads: [],
        answeredHeads: [...(state.answeredHeads ?? []), ...(state.factHeads ?? [])],
        updatedAt: event.data.resumedAt,
      };
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
        factHeads: withFactHead(state, d.headSha),
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
