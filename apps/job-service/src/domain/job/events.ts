import type {
  CommitLoggedData,
  ImplementationLoggedData,
  JobCancelledData,
  JobChecksFailedData,
  JobClaimRolledBackData,
  JobClaimedData,
  JobCoalescedData,
  JobEnqueuedData,
  JobFinishedData,
  JobLeaseExpiredData,
  JobLeaseRenewedData,
  JobPushReportedData,
  JobRunStoppedData,
  JobStartedData,
  TestResultLoggedData,
} from '@gantry/contracts';

/** The job's events as the decider emits them; `data` is exactly the contract's event data. */
export type JobEvent =
  | { type: 'JobEnqueued'; data: JobEnqueuedData }
  | { type: 'JobCoalesced'; data: JobCoalescedData }
  | { type: 'JobClaimed'; data: JobClaimedData }
  | { type: 'JobLeaseRenewed'; data: JobLeaseRenewedData }
  | { type: 'JobStarted'; data: JobStartedData }
  | { type: 'ImplementationLogged'; data: ImplementationLoggedData }
  | { type: 'CommitLogged'; data: CommitLoggedData }
  | { type: 'TestResultLogged'; data: TestResultLoggedData }
  | { type: 'JobPushReported'; data: JobPushReportedData }
  | { type: 'JobFinished'; data: JobFinishedData }
  | { type: 'JobClaimRolledBack'; data: JobClaimRolledBackData }
  | { type: 'JobLeaseExpired'; data: JobLeaseExpiredData }
  | { type: 'JobCancelled'; data: JobCancelledData }
  | { type: 'JobRunStopped'; data: JobRunStoppedData }
  | { type: 'JobChecksFailed'; data: JobChecksFailedData };

export type JobEventType = JobEvent['type'];

/** Events after which the job is terminal: the worktree-service releases its lease on these. */
export function isTerminalJobEvent(event: JobEvent): boolean {
  switch (event.type) {
    case 'JobFinished':
    case 'JobCancelled':
      return true;
    case 'JobClaimRolledBack':
    case 'JobLeaseExpired':
      return event.data.outcome === 'FAILED';
    default:
      return false;
  }
}
