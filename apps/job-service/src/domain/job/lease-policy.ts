import type { JobKind } from '@gantry/contracts';

/** Attempts a job gets before an expired or rolled-back claim fails it. */
export const DEFAULT_MAX_ATTEMPTS = 3;

/** Sprint jobs renew every 60 s; their lease outlives two missed renewals. */
export const SPRINT_LEASE_RENEW_INTERVAL_MS = 60_000;
export const SPRINT_LEASE_DURATION_MS = 3 * SPRINT_LEASE_RENEW_INTERVAL_MS;
/** Other jobs do not renew, so their lease covers a whole agent run. */
export const DEFAULT_LEASE_DURATION_MS = 30 * 60_000;

export function defaultLeaseDurationMs(kind: JobKind): number {
  return kind === 'SPRINT_IMPLEMENTATION' ? SPRINT_LEASE_DURATION_MS : DEFAULT_LEASE_DURATION_MS;
}

export function addMs(iso: string, ms: number): string {
  return new Date(Date.parse(iso) + ms).toISOString();
}

/** A lease is expired from its expiry instant on: at `expiresAt` it no longer grants anything. */
export function isLeaseExpired(expiresAt: string, now: string): boolean {
  return Date.parse(now) >= Date.parse(expiresAt);
}

/**
 * A requeue that spends no attempt (the runner's or a dependency's fault, docs/jobs.md "Attempts") is
 * offered again after a pause that doubles with each such requeue in a row: 1 s, 2 s, 4 s … 60 s.
 */
export const FREE_REQUEUE_PAUSE_INITIAL_MS = 1_000;
export const FREE_REQUEUE_PAUSE_MAX_MS = 60_000;
/**
 * After this many requeues in a row that spent no attempt, the next one spends it after all: a
 * dependency down for good (about a quarter of an hour of pauses), or a job that takes its runner
 * down every time, must still end.
 */
export const MAX_FREE_REQUEUES = 20;

/** The pause before the offer that follows the `n`-th free requeue in a row (n ≥ 1). */
export function freeRequeuePauseMs(n: number): number {
  return Math.min(FREE_REQUEUE_PAUSE_MAX_MS, FREE_REQUEUE_PAUSE_INITIAL_MS * 2 ** Math.min(Math.max(n - 1, 0), 30));
}
