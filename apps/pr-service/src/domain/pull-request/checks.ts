/**
 * A check as GitHub reports it on a head — a check run or a commit status, normalised (the latest of
 * each name only). GitHub's combined status leaves check runs out and says `pending` when there are
 * no statuses at all, so both kinds are read and judged together here.
 */
export interface ReportedCheck {
  name: string;
  source: 'check_run' | 'status';
  /** PENDING: queued, in progress, or a pending status. SUCCESS: success, neutral or skipped. FAILURE: anything else that concluded. */
  state: 'PENDING' | 'SUCCESS' | 'FAILURE';
  /** GitHub's own word (a check run's conclusion or a status's state), for the failure report. */
  conclusion: string | null;
  detailsUrl: string | null;
}

export type ChecksVerdict =
  | { verdict: 'GREEN'; passed: string[] }
  | { verdict: 'RED'; failed: ReportedCheck[] }
  | { verdict: 'PENDING'; waitingFor: string[] }
  /** Nothing reported at all: not green (PR-4). */
  | { verdict: 'NONE' };

/**
 * The verdict on a head (PR-4). With required checks, only those count: each must be reported and
 * succeed; one that failed makes it RED; one not reported yet or still running keeps it PENDING.
 * Without required checks, every reported check counts, and a head with none reported is NONE.
 */
export function checksVerdict(requiredChecks: readonly string[], reported: readonly ReportedCheck[]): ChecksVerdict {
  if (requiredChecks.length === 0 && reported.length === 0) return { verdict: 'NONE' };
  const relevant = requiredChecks.length > 0 ? reported.filter((c) => requiredChecks.includes(c.name)) : [...reported];
  const failed = relevant.filter((c) => c.state === 'FAILURE');
  if (failed.length > 0) return { verdict: 'RED', failed };
  const missing = requiredChecks.filter((name) => !relevant.some((c) => c.name === name));
  const running = relevant.filter((c) => c.state === 'PENDING').map((c) => c.name);
  if (missing.length > 0 || running.length > 0) return { verdict: 'PENDING', waitingFor: [...missing, ...running] };
  return { verdict: 'GREEN', passed: relevant.map((c) => c.name) };
}
