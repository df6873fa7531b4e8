import { deriveIdempotencyKey, type JobPayload } from '@gantry/contracts';
import type { SprintRunEvent } from './events.js';
import type { SprintConfigOverrides } from './commands.js';
import { NO_CONFIG_OVERRIDES, remainingTasks, sprintRunExists, type SprintRun, type SprintRunState } from './state.js';

/**
 * What a sprint-run transition asks the world to do, as data (docs/architecture.md, "Effects are data"). An effect processor
 * carries each one out idempotently: the enqueue carries its own key, a question is keyed by its id,
 * marking a PR ready that is already ready is a success, cancelling a terminal job changes nothing.
 */
export type SprintRunEffect =
  | {
      /**
       * The run's next SPRINT_IMPLEMENTATION job, on the sprint branch: `jobs` are its remaining tasks in
       * the run's order, and only the first of them is queued, once no job of a task still open is queued
       * or running (`nextSprintJob`). The tasks build on each other on one branch, so they run one after
       * the other: all at once, a later task could be claimed first, or two runner hosts could push the
       * branch at the same time.
       */
      type: 'ENQUEUE_NEXT_SPRINT_JOB';
      sprintRunId: string;
      sprintId: string;
      productId: string;
      branch: string;
      /** The product's and the sprint's levels of the configuration cascade, as the run was created with. */
      configOverrides: SprintConfigOverrides;
      /** `payload` only for a task the run was given one for. */
      jobs: SprintJobRequest[];
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

export interface SprintJobRequest {
  taskId: string;
  idempotencyKey: string;
  payload?: JobPayload;
}

/**
 * Which of an ENQUEUE_NEXT_SPRINT_JOB's tasks to queue now, or null: none while a job of a task the run
 * has not seen done is queued or running (`tasksUnderWay`: the tasks of the run's jobs in those
 * statuses); else the first task not done. A job left for a task done already (a resume that had not
 * heard of its DONE queued it again) does not hold the next task back: it finds the work done.
 */
export function nextSprintJob(
  effect: { jobs: readonly SprintJobRequest[] },
  run: Pick<SprintRun, 'doneTaskIds'>,
  tasksUnderWay: readonly string[],
): SprintJobRequest | null {
  if (tasksUnderWay.some((taskId) => !run.doneTaskIds.includes(taskId))) return null;
  return effect.jobs.find((job) => !run.doneTaskIds.includes(job.taskId)) ?? null;
}

/** The key of a task's job, queued at creation (resumeSeq 0) or at a resume: a resume queues afresh. */
export function sprintJobIdempotencyKey(sprintRunId: string, resumeSeq: number, taskId: string): string {
  return deriveIdempotencyKey('sprint-run', { sprintRunId, resumeSeq, taskId });
}

type RunOfJobs = Pick<SprintRun, 'sprintRunId' | 'sprintId' | 'productId' | 'branch' | 'configOverrides' | 'taskPayloads'>;

/** The request for the run's next job among `taskIds` (in the run's order), keyed under `resumeSeq`. */
function enqueueNext(run: RunOfJobs, resumeSeq: number, taskIds: string[]): SprintRunEffect {
  const payloads = run.taskPayloads ?? {};
  return {
    type: 'ENQUEUE_NEXT_SPRINT_JOB',
    sprintRunId: run.sprintRunId,
    sprintId: run.sprintId,
    productId: run.productId,
    branch: run.branch,
    configOverrides: run.configOverrides ?? NO_CONFIG_OVERRIDES,
    jobs: taskIds.map((taskId) => ({
      taskId,
      idempotencyKey: sprintJobIdempotencyKey(run.sprintRunId, resumeSeq, taskId),
      ...(payloads[taskId] ? { payload: payloads[taskId] } : {}),
    })),
  };
}

/** The effects one sprint-run event requests; `before` is the state the event applies to. */
export function sprintRunEffects(event: SprintRunEvent, before: SprintRunState): SprintRunEffect[] {
  switch (event.type) {
    case 'SprintRunCreated':
      return [enqueueNext(event.data, 0, event.data.taskIds)];
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
      return [enqueueNext(before, d.resumeSeq, d.remainingTaskIds)];
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
    case 'SprintRunTaskCompleted': {
      // Its job is done: the next task's turn, under the run's current resume (the keys its resume used).
      if (!sprintRunExists(before)) return [];
      const remaining = remainingTasks(before).filter((taskId) => taskId !== event.data.taskId);
      return remaining.length === 0 ? [] : [enqueueNext(before, before.resumeSeq, remaining)];
    }
    case 'SprintRunStarted':
    case 'SprintRunHeadPushed':
      return [];
    default:
      return assertNever(event);
  }
}

function assertNever(value: never): never {
  throw new Error(`unhandled sprint run event ${JSON.stringify(value)}`);
}
