import { deriveWorktreeKey } from '@gantry/contracts';
import type { WorktreeLeaseCommand } from '../worktree-lease/commands.js';
import type { WorktreeLeaseEvent } from '../worktree-lease/events.js';

/** One worktree key's story, built from small pieces, for the WorktreeLease specifications. */
export const repositoryUrl = 'https://github.com/acme/shop.git';
export const branch = 'feature/checkout';
export const worktreeKey = deriveWorktreeKey(repositoryUrl, branch);
export const path = `/var/lib/gantry/worktrees/${worktreeKey}`;
export const sha = '4b825dc642cb6eb9a060e54bf8d69288fbee4904';
export const A = '0b7a4c3e-2f7d-4b8e-9a51-6c2d1e0f9a11';
export const B = '1c8b5d4f-3a8e-4c9f-8b62-7d3e2f1a0b22';
export const C = '2d9c6e5a-4b9f-4dab-9c73-8e4f3a2b1c33';
export const T0 = '2026-11-30T06:00:00.000Z';
export const at = (seconds: number) => new Date(Date.parse(T0) + seconds * 1000).toISOString();

export const jobOf: Record<string, string> = { [A]: 'job-a', [B]: 'job-b', [C]: 'job-c' };

export function request(leaseId: string, now: string, overrides: Partial<Extract<WorktreeLeaseCommand, { type: 'RequestWorktreeLease' }>['data']> = {}): WorktreeLeaseCommand {
  return {
    type: 'RequestWorktreeLease',
    data: {
      worktreeKey,
      leaseId,
      jobId: jobOf[leaseId]!,
      jobLeaseToken: 1,
      repositoryUrl,
      branch,
      baseRef: 'main',
      leaseDurationMs: 600_000,
      lockTimeoutMs: 60_000,
      now,
      ...overrides,
    },
  };
}

// ---- event builders: the history of the specifications ----
export const requested = (leaseId: string, now: string, jobLeaseToken = 1): WorktreeLeaseEvent => ({
  type: 'WorktreeLeaseRequested',
  data: {
    worktreeKey, leaseId, jobId: jobOf[leaseId]!, jobLeaseToken, repositoryUrl, branch, baseRef: 'main',
    leaseDurationMs: 600_000, lockDeadline: new Date(Date.parse(now) + 60_000).toISOString(), requestedAt: now,
  },
});
export const acquired = (leaseId: string, token: number, now: string): WorktreeLeaseEvent => ({
  type: 'WorktreeLockAcquired',
  data: {
    worktreeKey, leaseId, token, jobId: jobOf[leaseId]!, repositoryUrl, branch, baseRef: 'main', acquiredAt: now,
  },
});
export const queued = (leaseId: string, position: number, now: string): WorktreeLeaseEvent => ({
  type: 'WorktreeLockQueued',
  data: { worktreeKey, leaseId, position, lockDeadline: new Date(Date.parse(now) + 60_000).toISOString(), queuedAt: now },
});
export const timedOut = (leaseId: string, lockDeadline: string, now: string): WorktreeLeaseEvent => ({
  type: 'WorktreeLockTimedOut',
  data: { worktreeKey, leaseId, lockDeadline, timedOutAt: now },
});
export const created = (leaseId: string, token: number, now: string): WorktreeLeaseEvent => ({
  type: 'WorktreeCreated', data: { worktreeKey, leaseId, token, path, createdAt: now },
});
export const synced = (leaseId: string, token: number, now: string): WorktreeLeaseEvent => ({
  type: 'WorktreeSynced',
  data: { worktreeKey, leaseId, token, baseSha: sha, expiresAt: new Date(Date.parse(now) + 600_000).toISOString(), syncedAt: now },
});
export const releaseRequested = (leaseId: string, token: number, now: string, reason: 'released' | 'job_terminal' | 'expired' | 'stale_reset' | 'shutdown' = 'released', removeWorktree = false): WorktreeLeaseEvent => ({
  type: 'WorktreeReleaseRequested',
  data: { worktreeKey, leaseId, token, reason, removeWorktree, branch, requestedAt: now },
});
export const released = (leaseId: string, token: number, now: string, reason: 'released' | 'job_terminal' | 'expired' | 'stale_reset' | 'shutdown' = 'released', removed = false): WorktreeLeaseEvent => ({
  type: 'WorktreeReleased', data: { worktreeKey, leaseId, token, reason, removed, releasedAt: now },
});

export const pending = (leaseId: string, token: number, cause: 'job_cancelled' | 'job_lease_expired' | 'claim_superseded' | 'claim_unknown', now: string): WorktreeLeaseEvent => ({
  type: 'WorktreeReleasePending', data: { worktreeKey, leaseId, token, cause, pendingSince: now },
});

/** A held by token 1, granted at T0. */
export const aAcquired = [requested(A, T0), acquired(A, 1, T0)];
/** A ready at token 1 (synced at T0+2s). */
export const aReady = [...aAcquired, created(A, 1, at(1)), synced(A, 1, at(2))];
/** A ready, B waiting behind it (requested at T0+10s). */
export const aReadyBWaiting = [...aReady, requested(B, at(10)), queued(B, 1, at(10))];

