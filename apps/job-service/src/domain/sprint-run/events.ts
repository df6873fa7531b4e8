import type {
  SprintRunCancelledData,
  SprintRunCompletedData,
  SprintRunCreatedData,
  SprintRunFailedData,
  SprintRunPausedData,
  SprintRunResumedData,
  SprintRunStartedData,
  SprintRunTaskCompletedData,
} from '@gantry/contracts';

export type SprintRunEvent =
  | { type: 'SprintRunCreated'; data: SprintRunCreatedData }
  | { type: 'SprintRunStarted'; data: SprintRunStartedData }
  | { type: 'SprintRunTaskCompleted'; data: SprintRunTaskCompletedData }
  | { type: 'SprintRunPaused'; data: SprintRunPausedData }
  | { type: 'SprintRunResumed'; data: SprintRunResumedData }
  | { type: 'SprintRunCompleted'; data: SprintRunCompletedData }
  | { type: 'SprintRunFailed'; data: SprintRunFailedData }
  | { type: 'SprintRunCancelled'; data: SprintRunCancelledData };
