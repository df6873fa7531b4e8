import { deriveIdempotencyKey, type JobPayload } from '@gantry/contracts';
import type { SprintRunEvent } from './events.js';
import type { SprintConfigOverrides } from './commands.js';
import { NO_CONFIG_OVERRIDES, sprintRunExists, type SprintRunState } from './state.js';

/**
 * What a sprint-run transition asks the world to do, as data (docs/architecture.md, "Effects are data"). An effect processor
 * carries each one out idempotently: the enqueue carries its own key, a question is keyed by its id,
 * marking a PR ready that is already ready is a success, cancelling a terminal job changes nothing.
 */
export type SprintRunEffect =
  | {
      /** One SPRINT_IMPLEMENTATION job per task, in order, all on the sprint branch (its worktree lease serialises them). */
      type: 'ENQUEUE_SPRINT_JOBS';
      sprintRunId: string;
      sprintId: string;
      productId: string;
      branch: string;
      /** The product's and the sprint's levels of the configuration cascade, as the run was created with. */
      configOverrides: SprintConfigOverrides;
      /** `payload` only for a task the run was given one for. */
      jobs: { taskId: string; idempotencyKey: string; payload?: JobPayload }[];
    }
  | {
      type: 'RAISE_QUESTION';
      sprintRunId: string;
      questionId: string;
      prUrl: string;
      conflictingFiles: string[];
      resumeInstructions: string;
    }
  /** The pr-service's `mark_pr_ready_for_review` for the run's (repository, branch); repository null for runs created before products. */
  | { type: 'MARK_PR_READY_FOR_REVIEW'; sprintRunId: string; repository: string | null; branch: string; prUrl: string | null }
  | { type: 'CANCEL_SPRINT_JOBS'; sprintRunId: string; reason: string }
  | { type: 'RETURN_TASKS_TO_TODO'; sprintRunId: string; taskIds: string[] };

/** The key of a task's job, queued at creation (resumeSeq 0) or at a resume: a resume queues afresh. */
export function sprintJobIdempotencyKey(sprintRunId: string, resumeSeq: number, taskId: string): string {
  return deriveIdempotencyKey('sprint-run', { sprintRunId, resumeSeq, taskId });
}

const jobsFor = (sprintRunId: string, resumeSeq: number, taskIds: string[], payloads: Record<string, JobPayload> = {}) =>
  taskIds.map((taskId) => ({
    taskId,
    idempotencyKey: sprintJobIdempotencyKey(sprintRunId, resumeSeq, taskId),
    ...(payloads[taskId] ? { payload: payloads[taskId] } : {}),
  }));

/** The effects one sprint-run event requests; `before` is the state the event applies to. */
export function sprintRunEffects(event: SprintRunEvent, before: SprintRunState): SprintRunEffect[] {
  switch (event.type) {
    case 'SprintRunCreated': {
      const d = event.data;
      return [
        {
          type: 'ENQUEUE_SPRINT_JOBS',
          sprintRunId: d.sprintRunId,
          sprintId: d.sprintId,
          productId: d.productId,
          branch: d.branch,
          configOverrides: d.configOverrides ?? NO_CONFIG_OVERRIDES,
          jobs: jobsFor(d.sprintRunId, 0, d.taskIds, d.taskPayloads),
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
          type: 'ENQUEUE_SPRINT_JOBS',
          sprintRunId: d.sprintRunId,
          sprintId: before.sprintId,
          productId: before.productId,
          branch: before.branch,
          configOverrides: before.configOverrides ?? NO_CONFIG_OVERRIDES,
          jobs: jobsFor(d.sprintRunId, d.resumeSeq, d.remainingTaskIds, before.taskPayloads),
        },
      ];
    }
    case 'SprintRunCompleted': {
      const repository = sprintRunExists(before) ? (before.repository ?? null) : null;
      return [{ type: 'MARK_PR_READY_FOR_REVIEW', sprintRunId: event.data.sprintRunId, repository, branch: event.data.branch, prUrl: event.data.prUrl }];
    }
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
    case 'SprintRunHeadPushed':
      return [];
    default:
      return assertNever(event);
  }
}

function assertNever(value: never): never {
  throw new Error(`unhandled sprint run event ${JSON.stringify(value)}`);
}
