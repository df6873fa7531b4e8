import { isTerminalJobStatus, type WorktreeReleasePendingCause } from '@gantry/contracts';

/*
 * What this service knows of a job (learned from the jobs stream) and what it means for a lease of
 * one of the job's claims (docs/worktrees.md, "When a lease ends"). Pure: the application feeds it
 * the `job_statuses` row and acts on the verdict.
 */

/**
 * Who ended the job's latest claim: its holder (a finish, a rollback, a confirmed stop) or the job
 * service (a cancel, an expired lease) — `service_before_start` when its lease expired before the claim
 * was started: a runner starts its agent only once its start is recorded, so no agent of it ever ran.
 */
export type ClaimEndedBy = 'holder' | 'service' | 'service_before_start';

/** A claim ended so has no agent left in its worktree: its leases are released at once. */
export const noAgentLeft = (endedBy: ClaimEndedBy | null): boolean => endedBy === 'holder' || endedBy === 'service_before_start';

export interface KnownJob {
  readonly status: string;
  /** The latest claim (lease token) the service saw; null before any. */
  readonly leaseToken: number | null;
  readonly endedBy: ClaimEndedBy | null;
}

export type ClaimVerdict =
  /** The claim is live, or nothing proves it ended. */
  | { readonly kind: 'keep' }
  /** Its holder ended it: no agent of it runs any more; release now. */
  | { readonly kind: 'release' }
  /** It ended elsewhere: its holder's agent may still run; the lease waits for its holder's release or its expiry. */
  | { readonly kind: 'await_holder'; readonly cause: WorktreeReleasePendingCause };

const KEEP: ClaimVerdict = { kind: 'keep' };
const awaitHolder = (cause: WorktreeReleasePendingCause): ClaimVerdict => ({ kind: 'await_holder', cause });

/**
 * The verdict on a lease of claim `claim` of a job. `complete` says every job event has been handled;
 * without it only what proves the claim ended counts (an event still on its way may be its start).
 */
export function claimVerdict(job: KnownJob | undefined, claim: number, complete: boolean): ClaimVerdict {
  if (!job) return complete ? awaitHolder('claim_unknown') : KEEP;
  const latest = job.leaseToken;
  if (latest !== null && latest > claim) return awaitHolder('claim_superseded');
  const terminal = isTerminalJobStatus(job.status);
  if (latest === claim && (terminal || job.status === 'QUEUED')) {
    if (noAgentLeft(job.endedBy)) return { kind: 'release' };
    return awaitHolder(job.status === 'CANCELLED' ? 'job_cancelled' : 'job_lease_expired');
  }
  // The job ended without this service seeing this claim.
  if (terminal) return awaitHolder(job.status === 'CANCELLED' ? 'job_cancelled' : 'claim_unknown');
  if (job.status === 'QUEUED' && complete) return awaitHolder('claim_unknown');
  return KEEP;
}
