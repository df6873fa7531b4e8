import type { SprintRunView } from '@gantry/contracts';
import type { SprintRun } from './state.js';

/** The sprint run as `get_sprint_run` answers it. */
export function sprintRunView(run: SprintRun): SprintRunView {
  return {
    sprintRunId: run.sprintRunId,
    sprintId: run.sprintId,
    productId: run.productId,
    status: run.status,
    repository: run.repository ?? null,
    branch: run.branch,
    prUrl: run.prUrl,
    taskIds: run.taskIds,
    doneTaskIds: run.doneTaskIds,
    pause: run.pause,
    failure: run.failure,
    createdAt: run.createdAt,
    updatedAt: run.updatedAt,
  };
}
