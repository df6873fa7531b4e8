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
