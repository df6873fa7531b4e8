import { deriveIdempotencyKey } from '@gantry/contracts';
import type { SprintRunEvent } from './events.js';
import { sprintRunExists, type SprintRunState } from './state.js';

/**
 * What a sprint-run transition asks the world to do, as data (ARCHITECTURE §5). An effect processor
 * carries each one out idempotently: the enqueue carries its own key, a question is keyed by its id,
 * marking a PR ready that is already ready is a success, cancelling a terminal job changes nothing.
 */
export type SprintRunEffect =
  | {
      type: 'ENQUEUE_SPRINT_JOB';
      sprintRunId: string;
      sprintId: string;
      productId: string;
      taskIds: string[];
      branch: string;
      idempotencyKey: string;
    }
  | {
      type: 'RAISE_QUESTION';
      sprintRunId: string;
      questionId: string;
      prUrl: string;
      conflictingFiles: string[];
      resumeInstructions: string;
    }
  | { type: 'MARK_PR_READY_FOR_REVIEW'; sprintRunId: string; branch: string; prUrl: string | null }
  | { type: 'CANCEL_SPRINT_JOBS'; sprintRunId: string; reason: string }
  | { type: 'RETURN_TASKS_TO_TODO'; sprintRunId: string; taskIds: string[] };

/** The key of the job a sprint run queues at creation (resumeSeq 0) and at each resume. */
export function sprintJobIdempotencyKey(sprintRunId: string, resumeSeq: number): string {
  return deriveIdempotencyKey('sprint-run', { sprintRunId, resumeSeq });
}

/** The effects one sprint-run event requests; `before` is the state the event applies to. */
export function sprintRunEffects(event: SprintRunEvent, before: SprintRunState): SprintRunEffect[] {
  switch (event.type) {
    case 'SprintRunCreated': {
      const d = event.data;
      return [
        {
          type: 'ENQUEUE_SPRINT_JOB',
          sprintRunId: d.sprintRunId,
          sprintId: d.sprintId,
          productId: d.productId,
          taskIds: d.taskIds,
          branch: d.branch,
          idempotencyKey: sprintJobIdempotencyKey(d.sprintRunId, 0),
        },
      ];
    }
    case 'SprintRunPaused': {
      const d = event.data;
      return [
        {
          type: 'RAISE_QUESTION',
          sprintRunId: d.sprintRunId,
          questionId: d.questionId,
          prUrl: d.prUrl,
          conflictingFiles: d.conflictingFiles,
          resumeInstructions: d.resumeInstructions,
        },
      ];
    }
    case 'SprintRunResumed': {
      const d = event.data;
      if (!sprintRunExists(before) || d.remainingTaskIds.length === 0) return [];
      return [
        {
          type: 'ENQUEUE_SPRINT_JOB',
          sprintRunId: d.sprintRunId,
          sprintId: before.sprintId,
          productId: before.productId,
          taskIds: d.remainingTaskIds,
          branch: before.branch,
          idempotencyKey: sprintJobIdempotencyKey(d.sprintRunId, d.resumeSeq),
        },
      ];
    }
    case 'SprintRunCompleted':
      return [{ type: 'MARK_PR_READY_FOR_REVIEW', sprintRunId: event.data.sprintRunId, branch: event.data.branch, prUrl: event.data.prUrl }];
    case 'SprintRunFailed':
      return [{ type: 'CANCEL_SPRINT_JOBS', sprintRunId: event.data.sprintRunId, reason: event.data.error }];
    case 'SprintRunCancelled': {
      const d = event.data;
      const effects: SprintRunEffect[] = [
        { type: 'CANCEL_SPRINT_JOBS', sprintRunId: d.sprintRunId, reason: d.reason ?? 'sprint run cancelled' },
      ];
      if (d.tasksBackToTodo.length > 0) effects.push({ type: 'RETURN_TASKS_TO_TODO', sprintRunId: d.sprintRunId, taskIds: d.tasksBackToTodo });
      return effects;
    }
    case 'SprintRunStarted':
    case 'SprintRunTaskCompleted':
      return [];
    default:
      return assertNever(event);
  }
}

function assertNever(value: never): never {
  throw new Error(`unhandled sprint run event ${JSON.stringify(value)}`);
}
