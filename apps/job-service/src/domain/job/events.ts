import type { JobEvent } from '@gantry/contracts';

/** The job's events as the decider emits them: the contracts' (`data` is exactly the contract's event data). */
export type { JobEvent, JobEventType } from '@gantry/contracts';

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
