import type { AgentConfigOverride, JobPayload } from '@gantry/contracts';
import type { ProductResolution } from '../product/view.js';

/**
 * The sprint run's commands. The user's: create, resume, cancel. The rest record facts learnt from
 * events — a sprint job claimed / finished (jobs) and a merge conflict / failed checks (prs) — and
 * are sent by the application layer's consumers. Time and ids (the question id too) come in here.
 */
/** The levels of the configuration cascade a sprint run gives its jobs (the job's own level is the kind's defaults' last). */
export interface SprintConfigOverrides {
  product: AgentConfigOverride | null;
  sprint: AgentConfigOverride | null;
}

export type SprintRunCommand =
  | {
      type: 'CreateSprintRun';
      data: {
        sprintRunId: string;
        sprintId: string;
        productId: string;
        taskIds: string[];
        branch: string;
        prUrl: string | null;
        taskPayloads: Record<string, JobPayload>;
        /** The product's and the sprint's configuration overrides, for every job of the run. */
        configOverrides: SprintConfigOverrides;
        /** The run's product as registered now; null when it is not registered (the create is refused). */
        product: ProductResolution | null;
        now: string;
      };
    }
  | { type: 'RecordSprintJobClaimed'; data: { sprintRunId: string; jobId: string; now: string } }
  | { type: 'RecordSprintTaskDone'; data: { sprintRunId: string; taskId: string; jobId: string; now: string } }
  | {
      type: 'RecordSprintHeadPushed';
      /** `position`: the push report's position in the job service's log, which orders the run's pushes. */
      data: { sprintRunId: string; jobId: string; branch: string; headSha: string; position: number; now: string };
    }
  | {
      type: 'RecordSprintTaskFailed';
      /**
       * `superseded`: the run has a newer job for the task, which a resume queued because this one had
       * ended: the resume answered this failure, whenever it is handled.
       */
      /** `jobId`: null when the task's job could not be queued at all (its enqueue refused). */
      data: { sprintRunId: string; taskId: string; jobId: string | null; error: string; superseded: boolean; now: string };
    }
  | {
      type: 'RecordMergeConflict';
      data: {
        sprintRunId: string;
        prUrl: string;
        conflictingFiles: string[];
        /** How many more files are in conflict than the pr-service's event names (docs/pr-service.md, "How large its events and answers may be"). */
        conflictingFilesLeftOut: number;
        /** The head the conflict was seen on. */
        headSha: string;
        /** The id of the question the pause raises for a human or agent. */
        questionId: string;
        /** When null, the standard instructions of `resumeInstructionsFor` are used. */
        resumeInstructions: string | null;
        now: string;
      };
    }
  | {
      type: 'RecordChecksFailed';
      /** `failedChecksLeftOut`: the failed checks the pr-service's event counts but does not name (docs/pr-service.md, "How large its events and answers may be"). */
      data: { sprintRunId: string; prUrl: string; failedChecks: string[]; failedChecksLeftOut?: number; headSha: string; now: string };
    }
  | { type: 'ResumeSprintRun'; data: { sprintRunId: string; actor: string | null; note: string | null; now: string } }
  | { type: 'CancelSprintRun'; data: { sprintRunId: string; reason: string | null; actor: string | null; now: string } };

export type SprintRunCommandType = SprintRunCommand['type'];
