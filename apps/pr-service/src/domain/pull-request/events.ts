import type {
  PullRequestAutoMergeDisabledData,
  PullRequestAutoMergeEnabledData,
  PullRequestAutoMergeRefusedData,
  PullRequestChecksFailedData,
  PullRequestChecksPassedData,
  PullRequestClosedData,
  PullRequestEffectFailedData,
  PullRequestFlowStartedData,
  PullRequestHeadMovedData,
  PullRequestMergeConflictData,
  PullRequestMergedData,
  PullRequestMergeFailedData,
  PullRequestMergeRequestedData,
  PullRequestOpenedData,
  PullRequestReadyForReviewData,
  PullRequestScopeTaskDoneData,
  PullRequestScopeTaskQueuedData,
  PullRequestScopeTaskReopenedData,
  PullRequestSprintRunDoneData,
} from '@gantry/contracts';

/** The pull request's events as the decider emits them; `data` is exactly the contract's. */
export type PullRequestEvent =
  | { type: 'PullRequestScopeTaskQueued'; data: PullRequestScopeTaskQueuedData }
  | { type: 'PullRequestScopeTaskDone'; data: PullRequestScopeTaskDoneData }
  | { type: 'PullRequestScopeTaskReopened'; data: PullRequestScopeTaskReopenedData }
  | { type: 'PullRequestSprintRunDone'; data: PullRequestSprintRunDoneData }
  | { type: 'PullRequestFlowStarted'; data: PullRequestFlowStartedData }
  | { type: 'PullRequestHeadMoved'; data: PullRequestHeadMovedData }
  | { type: 'PullRequestOpened'; data: PullRequestOpenedData }
  | { type: 'PullRequestChecksPassed'; data: PullRequestChecksPassedData }
  | { type: 'PullRequestChecksFailed'; data: PullRequestChecksFailedData }
  | { type: 'PullRequestMergeConflict'; data: PullRequestMergeConflictData }
  | { type: 'PullRequestMergeRequested'; data: PullRequestMergeRequestedData }
  | { type: 'PullRequestAutoMergeEnabled'; data: PullRequestAutoMergeEnabledData }
  | { type: 'PullRequestAutoMergeRefused'; data: PullRequestAutoMergeRefusedData }
  | { type: 'PullRequestAutoMergeDisabled'; data: PullRequestAutoMergeDisabledData }
  | { type: 'PullRequestMergeFailed'; data: PullRequestMergeFailedData }
  | { type: 'PullRequestMerged'; data: PullRequestMergedData }
  | { type: 'PullRequestClosed'; data: PullRequestClosedData }
  | { type: 'PullRequestReadyForReview'; data: PullRequestReadyForReviewData }
  | { type: 'PullRequestEffectFailed'; data: PullRequestEffectFailedData };

export type PullRequestEventType = PullRequestEvent['type'];
