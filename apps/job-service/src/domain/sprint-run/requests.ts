import type {
  cancelSprintRun,
  createSprintRun,
  PullRequestChecksFailedData,
  PullRequestMergeConflictData,
  RequestOf,
  resumeSprintRun,
} from '@gantry/contracts';
import type { JobEvent } from '../job/events.js';
import type { Job } from '../job/state.js';
import type { ProductResolution } from '../product/view.js';
import type { SprintRunCommand } from './commands.js';

type Clock = { now: string };

export function createSprintRunCommand(
  request: RequestOf<typeof createSprintRun>,
  context: Clock & { sprintRunId: string; product: ProductResolution | null },
): Extract<SprintRunCommand, { type: 'CreateSprintRun' }> {
  return {
    type: 'CreateSprintRun',
    data: {
      sprintRunId: context.sprintRunId,
      sprintId: request.sprintId,
      productId: request.productId,
      taskIds: request.taskIds,
      branch: request.branch,
      prUrl: request.prUrl ?? null,
      taskPayloads: request.taskPayloads ?? {},
      configOverrides: { product: request.configOverrides?.product ?? null, sprint: request.configOverrides?.sprint ?? null },
      product: context.product,
      now: context.now,
    },
  };
}

export function resumeSprintRunCommand(request: RequestOf<typeof resumeSprintRun>, context: Clock): Extract<SprintRunCommand, { type: 'ResumeSprintRun' }> {
  return {
    type: 'ResumeSprintRun',
    data: { sprintRunId: request.sprintRunId, actor: request.actor ?? null, note: request.note ?? null, now: context.now },
  };
}

export function cancelSprintRunCommand(request: RequestOf<typeof cancelSprintRun>, context: Clock): Extract<SprintRunCommand, { type: 'CancelSprintRun' }> {
  return {
    type: 'CancelSprintRun',
    data: { sprintRunId: request.sprintRunId, reason: request.reason ?? null, actor: request.actor ?? null, now: context.now },
  };
}

/** A PR's merge conflict, for the sprint run whose branch the PR is (found by the caller). */
export function mergeConflictCommand(
  event: PullRequestMergeConflictData,
  context: Clock & { sprintRunId: string; questionId: string },
): Extract<SprintRunCommand, { type: 'RecordMergeConflict' }> {
  return {
    type: 'RecordMergeConflict',
    data: {
      sprintRunId: context.sprintRunId,
      prUrl: event.prUrl,
      conflictingFiles: event.conflictingFiles,
      conflictingFilesLeftOut: event.conflictingFilesLeftOut ?? 0,
      headSha: event.headSha,
      questionId: context.questionId,
      resumeInstructions: null,
      now: context.now,
    },
  };
}

export function checksFailedCommand(
  event: PullRequestChecksFailedData,
  context: Clock & { sprintRunId: string },
): Extract<SprintRunCommand, { type: 'RecordChecksFailed' }> {
  return {
    type: 'RecordChecksFailed',
    data: { sprintRunId: context.sprintRunId, prUrl: event.prUrl, failedChecks: event.failedChecks.map((c) => c.name), failedChecksLeftOut: event.failedChecksLeftOut ?? 0, headSha: event.headSha, now: context.now },
  };
}

/**
 * What a sprint job's event means for its sprint run, or null when it means nothing:
 * the first claim starts the run; a DONE or SKIPPED finish completes the task (SKIPPED: the work
 * was already there); a FAILED finish, or a claim that failed after its last attempt, fails it;
 * so does a job cancelled on its own (the caller passes over the cancels the run itself asked for,
 * which run the other way). Whether a failed job was
 * superseded by a newer job of its task is the jobs view's to say (the caller sets `superseded`).
 * A push report gives the run its branch's head; `position` is the event's position in the job
 * service's log, which orders the pushes. `job` is the job's state after the event.
 */
export function sprintRunCommandFor(event: JobEvent, job: Job, context: Clock & { position: number }): SprintRunCommand | null {
  if (job.sprintRunId === null) return null;
  const sprintRunId = job.sprintRunId;
  switch (event.type) {
    case 'JobClaimed':
      return { type: 'RecordSprintJobClaimed', data: { sprintRunId, jobId: job.jobId, now: context.now } };
    case 'JobPushReported': {
      const { branch, headSha } = event.data;
      return { type: 'RecordSprintHeadPushed', data: { sprintRunId, jobId: job.jobId, branch, headSha, position: context.position, now: context.now } };
    }
    case 'JobFinished': {
      if (job.taskId === null) return null;
      const d = event.data;
      if (d.jobStatus === 'DONE' || d.jobStatus === 'SKIPPED') {
        return { type: 'RecordSprintTaskDone', data: { sprintRunId, taskId: job.taskId, jobId: job.jobId, now: context.now } };
      }
      if (d.jobStatus === 'FAILED') {
        return { type: 'RecordSprintTaskFailed', data: { sprintRunId, taskId: job.taskId, jobId: job.jobId, error: d.error ?? 'the job failed', superseded: false, now: context.now } };
      }
      // CANCELLED: its runner reported the run cancelled; the task is as undone as after a cancel.
      return { type: 'RecordSprintTaskFailed', data: { sprintRunId, taskId: job.taskId, jobId: job.jobId, error: 'its job was cancelled', superseded: false, now: context.now } };
    }
    case 'JobCancelled': {
      // A job of the run cancelled on its own (not by the run's failure or cancel: the reaction passes
      // those over): its task will not be done, and a run left RUNNING would wait for it for ever. The
      // run fails, naming the task; a resume queues it again (docs/jobs.md, "Sprint runs").
      if (job.taskId === null) return null;
      const reason = event.data.reason;
      return {
        type: 'RecordSprintTaskFailed',
        data: { sprintRunId, taskId: job.taskId, jobId: job.jobId, error: `its job was cancelled${reason ? `: ${reason}` : ''}`, superseded: false, now: context.now },
      };
    }
    case 'JobClaimRolledBack':
    case 'JobLeaseExpired':
      if (job.taskId === null || event.data.outcome !== 'FAILED') return null;
      return {
        type: 'RecordSprintTaskFailed',
        data: { sprintRunId, taskId: job.taskId, jobId: job.jobId, error: event.data.error ?? 'the job failed', superseded: false, now: context.now },
      };
    default:
      return null;
  }
}
