import { ErrorCode, failedChecksNamed, firstWithin, GantryError } from '@gantry/contracts';
import { unknownProduct, unleasableLease } from '../product/decider.js';
import type { SprintRunCommand } from './commands.js';
import { sprintRunEffects, type SprintRunEffect } from './effects.js';
import type { SprintRunEvent } from './events.js';
import { evolveSprintRun, initialSprintRunState, passedOverHead, remainingTasks, sprintRunExists, type SprintRun, type SprintRunState } from './state.js';

/**
 * The sprint run (docs/domain.md, "Sprint run"): QUEUED → RUNNING → PAUSED (merge conflict) → RUNNING → DONE, → FAILED,
 * → CANCELLED. Only a merge conflict pauses; failed checks and a failed task fail the run. A PAUSED or
 * FAILED run can be resumed; a DONE or CANCELLED one cannot. Commands that record facts from other
 * streams (a job claimed or finished, a PR event) are ignored — no events — once the run is DONE or
 * CANCELLED, so a late message never reopens it. A pull-request fact about a head the run has moved on
 * from — one its jobs pushed over, or one a resume answered — is passed over too (`passedOverHead`).
 */
export function decideSprintRun(command: SprintRunCommand, state: SprintRunState): SprintRunEvent[] {
  if (command.type === 'CreateSprintRun') {
    const d = command.data;
    if (sprintRunExists(state)) throw refuse(ErrorCode.INVALID_TRANSITION, `sprint run ${d.sprintRunId} already exists`);
    if (d.taskIds.length === 0) throw refuse(ErrorCode.PRECONDITION_FAILED, `sprint run ${d.sprintRunId} has no tasks to run`);
    if (d.product === null) throw unknownProduct(d.productId);
    // Its jobs' worktree leases are of this branch: one the worktree service refuses is refused here.
    const unleasable = unleasableLease({ repositoryUrl: d.product.cloneUrl, branch: d.branch, baseRef: d.product.targetBranch }, 'jobs.create_sprint_run', false);
    if (unleasable) throw unleasable;
    return [
      {
        type: 'SprintRunCreated',
        data: {
          sprintRunId: d.sprintRunId,
          sprintId: d.sprintId,
          productId: d.productId,
          taskIds: d.taskIds,
          branch: d.branch,
          prUrl: d.prUrl,
          createdAt: d.now,
          repository: d.product.repository,
          ...(Object.keys(d.taskPayloads).length > 0 ? { taskPayloads: d.taskPayloads } : {}),
          ...(d.configOverrides.product !== null || d.configOverrides.sprint !== null ? { configOverrides: d.configOverrides } : {}),
        },
      },
    ];
  }

  const run = existing(state, command.data.sprintRunId);
  const settled = run.status === 'DONE' || run.status === 'CANCELLED';

  switch (command.type) {
    case 'RecordSprintJobClaimed': {
      const d = command.data;
      if (run.status !== 'QUEUED') return [];
      return [{ type: 'SprintRunStarted', data: { sprintRunId: run.sprintRunId, jobId: d.jobId, startedAt: d.now } }];
    }

    case 'RecordSprintTaskDone': {
      const d = command.data;
      if (settled || run.doneTaskIds.includes(d.taskId)) return [];
      requireTask(run, d.taskId);
      // A task done means its job was claimed: the run started, though the claim's fact may come
      // later (the consumer hands a failed try back and goes on, docs/jobs.md "Sprint runs"). It
      // starts here, or its last task would leave it RUNNING with nothing left to run.
      const events: SprintRunEvent[] =
        run.status === 'QUEUED' ? [{ type: 'SprintRunStarted', data: { sprintRunId: run.sprintRunId, jobId: d.jobId, startedAt: d.now } }] : [];
      events.push({ type: 'SprintRunTaskCompleted', data: { sprintRunId: run.sprintRunId, taskId: d.taskId, jobId: d.jobId, completedAt: d.now } });
      const allDone = remainingTasks(run).every((t) => t === d.taskId);
      if (allDone && (run.status === 'RUNNING' || run.status === 'QUEUED')) events.push(completed(run, d.now));
      return events;
    }

    case 'RecordSprintHeadPushed': {
      const d = command.data;
      // A head is kept once, at its first report: heads only move forward (docs/pr-service.md, PR-15),
      // so a later report of it (an attempt that found it on the remote) says nothing new.
      if (settled || d.branch !== run.branch || (run.pushedHeads ?? []).some((h) => h.headSha === d.headSha)) return [];
      return [{ type: 'SprintRunHeadPushed', data: { sprintRunId: run.sprintRunId, jobId: d.jobId, headSha: d.headSha, position: d.position, recordedAt: d.now } }];
    }

    case 'RecordSprintTaskFailed': {
      const d = command.data;
      if (settled || run.status === 'FAILED') return [];
      requireTask(run, d.taskId);
      // A resume queued the task afresh because this job had ended: the resume answered its failure,
      // handled only now (the consumer lagged, or took it again after later events). Failing the
      // resumed run would cancel the jobs the resume queued (docs/jobs.md, "Sprint runs").
      if (d.superseded) return [];
      // Done already, by another job of the task: a resume that had not heard of that job's finish
      // queued the task again, and this second job found the work done before it. The task stays done.
      if (run.doneTaskIds.includes(d.taskId)) return [];
      return [
        {
          type: 'SprintRunFailed',
          data: {
            sprintRunId: run.sprintRunId,
            reason: 'TASK_FAILED',
            taskId: d.taskId,
            jobId: d.jobId,
            prUrl: null,
            failedChecks: [],
            error: `task ${d.taskId} failed: ${d.error}`,
            failedAt: d.now,
          },
        },
      ];
    }

    case 'RecordMergeConflict': {
      const d = command.data;
      if (settled || run.status === 'PAUSED' || passedOverHead(run, d.headSha) !== null) return [];
      if (run.status !== 'RUNNING') {
        throw refuse(ErrorCode.INVALID_TRANSITION, `sprint run ${run.sprintRunId} is ${run.status}: only a RUNNING sprint run pauses on a merge conflict`);
      }
      if (d.conflictingFiles.length === 0) {
        throw refuse(ErrorCode.PRECONDITION_FAILED, `a merge conflict on ${d.prUrl} must name its conflicting files`);
      }
      return [
        {
          type: 'SprintRunPaused',
          data: {
            sprintRunId: run.sprintRunId,
            reason: 'MERGE_CONFLICT',
            prUrl: d.prUrl,
            conflictingFiles: filesKeptOnPause(d.conflictingFiles),
            questionId: d.questionId,
            resumeInstructions:
              d.resumeInstructions ?? resumeInstructionsFor({
                sprintRunId: run.sprintRunId,
                branch: run.branch,
                prUrl: d.prUrl,
                conflictingFiles: d.conflictingFiles,
                conflictingFilesLeftOut: d.conflictingFilesLeftOut ?? 0,
              }),
            pausedAt: d.now,
            headSha: d.headSha,
          },
        },
      ];
    }

    case 'RecordChecksFailed': {
      const d = command.data;
      if (settled || run.status === 'FAILED' || passedOverHead(run, d.headSha) !== null) return [];
      const checks = d.failedChecks.length > 0 ? failedChecksNamed(d.failedChecks, d.failedChecksLeftOut) : 'unnamed checks';
      return [
        {
          type: 'SprintRunFailed',
          data: {
            sprintRunId: run.sprintRunId,
            reason: 'CHECKS_FAILED',
            taskId: null,
            jobId: null,
            prUrl: d.prUrl,
            failedChecks: d.failedChecks,
            error: `checks failed on ${d.prUrl}: ${checks}`,
            failedAt: d.now,
            headSha: d.headSha,
          },
        },
      ];
    }

    case 'ResumeSprintRun': {
      const d = command.data;
      if (run.status === 'DONE') throw refuse(ErrorCode.INVALID_TRANSITION, `sprint run ${run.sprintRunId} is DONE: there is nothing to resume`);
      if (run.status !== 'PAUSED' && run.status !== 'FAILED') {
        throw refuse(ErrorCode.INVALID_TRANSITION, `sprint run ${run.sprintRunId} is ${run.status}: only a PAUSED or FAILED sprint run can be resumed`);
      }
      const remaining = remainingTasks(run);
      const events: SprintRunEvent[] = [
        {
          type: 'SprintRunResumed',
          data: {
            sprintRunId: run.sprintRunId,
            from: run.status,
            resumeSeq: run.resumeSeq + 1,
            remainingTaskIds: remaining,
            actor: d.actor,
            note: d.note,
            resumedAt: d.now,
          },
        },
      ];
      if (remaining.length === 0) events.push(completed(run, d.now));
      return events;
    }

    case 'CancelSprintRun': {
      const d = command.data;
      if (settled) throw refuse(ErrorCode.INVALID_TRANSITION, `sprint run ${run.sprintRunId} is already ${run.status} and cannot be cancelled`);
      return [
        {
          type: 'SprintRunCancelled',
          data: { sprintRunId: run.sprintRunId, reason: d.reason, actor: d.actor, tasksBackToTodo: remainingTasks(run), cancelledAt: d.now },
        },
      ];
    }

    default:
      return assertNever(command);
  }
}

export const sprintRunDecider = {
  initialState: initialSprintRunState,
  decide: decideSprintRun,
  evolve: evolveSprintRun,
};

export interface SprintRunTransition {
  nextState: SprintRunState;
  events: SprintRunEvent[];
  effects: SprintRunEffect[];
}

/** One step of the state machine: the next state, the events that record it and the effects they request. */
export function transitionSprintRun(state: SprintRunState, command: SprintRunCommand): SprintRunTransition {
  const events = decideSprintRun(command, state);
  let nextState = state;
  const effects: SprintRunEffect[] = [];
  for (const event of events) {
    effects.push(...sprintRunEffects(event, nextState));
    nextState = evolveSprintRun(nextState, event);
  }
  return { nextState, events, effects };
}

/**
 * The conflicting files a pause keeps, as JSON (docs/jobs.md, "Sprint runs"): the pause, its question
 * and `get_sprint_run` carry them with more, so the pause keeps no more than the pr-service's event
 * names (MAX_PR_LIST_BYTES, the same 64 KiB) — an event of every file would be one the store refuses,
 * and the run would never pause.
 */
export const MAX_PAUSE_FILES_BYTES = 64 * 1024;
/** The conflicting files the resume instructions name; the rest are counted. */
const INSTRUCTION_FILES = 20;

/** The first conflicting files, as many as fit MAX_PAUSE_FILES_BYTES (at least one); the pull request lists them all. */
export function filesKeptOnPause(files: readonly string[]): string[] {
  return firstWithin(files, MAX_PAUSE_FILES_BYTES);
}

/** The standard instructions a paused sprint run carries, for the human or agent who resolves it: twenty files named, the rest (those the pr-service's event left out too) counted. */
export function resumeInstructionsFor(p: { sprintRunId: string; branch: string; prUrl: string; conflictingFiles: string[]; conflictingFilesLeftOut?: number }): string {
  const named = p.conflictingFiles.slice(0, INSTRUCTION_FILES).join(', ');
  const more = Math.max(p.conflictingFiles.length - INSTRUCTION_FILES, 0) + (p.conflictingFilesLeftOut ?? 0);
  return (
    `Merge the target branch into ${p.branch} and resolve the conflicts in ${named}${more > 0 ? ` and ${more} more files (the pull request lists them all)` : ''} ` +
    `(${p.prUrl}); push the resolution to ${p.branch}, then resume sprint run ${p.sprintRunId}.`
  );
}

function completed(run: SprintRun, now: string): SprintRunEvent {
  return { type: 'SprintRunCompleted', data: { sprintRunId: run.sprintRunId, branch: run.branch, prUrl: run.prUrl, completedAt: now } };
}

function existing(state: SprintRunState, sprintRunId: string): SprintRun {
  if (!sprintRunExists(state)) throw refuse(ErrorCode.NOT_FOUND, `sprint run ${sprintRunId} does not exist`);
  return state;
}

function requireTask(run: SprintRun, taskId: string): void {
  if (!run.taskIds.includes(taskId)) throw refuse(ErrorCode.PRECONDITION_FAILED, `task ${taskId} is not part of sprint run ${run.sprintRunId}`);
}

function refuse(code: ErrorCode, message: string): GantryError {
  return new GantryError(code, message);
}

function assertNever(value: never): never {
  throw new Error(`unhandled sprint run command ${JSON.stringify(value)}`);
}
