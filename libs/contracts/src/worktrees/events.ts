import { z } from 'zod';
import { defineEvent, eventTypesOf, type EventsOf } from '../registry.js';
import { BaseRefSchema, BranchNameSchema, RepositoryUrlSchema, WorktreeKeySchema } from './git-names.js';
import {
  LeaseDurationMsSchema,
  WorktreeLeaseIdSchema,
  WorktreeLeaseTokenSchema,
  WorktreePreparationFaultSchema,
  WorktreeReleasePendingCauseSchema,
  WorktreeReleaseReasonSchema,
} from './commands.js';

/*
 * The events of a WorktreeLease stream (one stream per worktree key: its lock, its leases and
 * their fencing tokens). An event that requests an effect carries everything the effect needs.
 */

const Iso = z.iso.datetime({ offset: true });
const Sha = z.string().regex(/^[0-9a-f]{40}([0-9a-f]{24})?$/, 'a full commit SHA');
const Lease = { worktreeKey: WorktreeKeySchema, leaseId: WorktreeLeaseIdSchema };
/** What a lease was asked for with: the request's fields, and those of a lease carried into a new epoch. */
const LeaseRequest = {
  ...Lease,
  jobId: z.string().min(1),
  jobLeaseToken: z.number().int().positive(),
  repositoryUrl: RepositoryUrlSchema,
  branch: BranchNameSchema,
  baseRef: BaseRefSchema,
  leaseDurationMs: LeaseDurationMsSchema,
  lockDeadline: Iso,
  requestedAt: Iso,
};
const Held = { ...Lease, token: WorktreeLeaseTokenSchema };

const key = 'shop-feature-checkout-1a2b3c4d5e6f';
const leaseId = '0b7a4c3e-2f7d-4b8e-9a51-6c2d1e0f9a11';
const sha = '4b825dc642cb6eb9a060e54bf8d69288fbee4904';
const at = '2026-11-30T06:00:00.000Z';
const held = { worktreeKey: key, leaseId, token: 4 };

export const WorktreeLeaseRequested = defineEvent({
  context: 'worktrees',
  type: 'WorktreeLeaseRequested',
  schemaVersion: 1,
  data: z.object(LeaseRequest),
  examples: {
    valid: [
      {
        worktreeKey: key,
        leaseId,
        jobId: 'job-7f3a',
        jobLeaseToken: 3,
        repositoryUrl: 'https://github.com/acme/shop.git',
        branch: 'feature/checkout',
        baseRef: 'main',
        leaseDurationMs: 600_000,
        lockDeadline: '2026-11-30T06:05:00.000Z',
        requestedAt: at,
      },
    ],
    invalid: [
      { worktreeKey: key, leaseId, jobId: 'j', jobLeaseToken: 1, repositoryUrl: 'ext::sh', branch: 'x', baseRef: 'main', leaseDurationMs: 60_000, lockDeadline: at, requestedAt: at },
      { worktreeKey: '../etc', leaseId, jobId: 'j', jobLeaseToken: 1, repositoryUrl: '/srv/x.git', branch: 'x', baseRef: 'main', leaseDurationMs: 60_000, lockDeadline: at, requestedAt: at },
    ],
  },
});

export const WorktreeLockQueued = defineEvent({
  context: 'worktrees',
  type: 'WorktreeLockQueued',
  schemaVersion: 1,
  data: z.object({ ...Lease, position: z.number().int().positive(), lockDeadline: Iso, queuedAt: Iso }),
  examples: {
    valid: [{ worktreeKey: key, leaseId, position: 1, lockDeadline: at, queuedAt: at }],
    invalid: [{ worktreeKey: key, leaseId, position: 0, lockDeadline: at, queuedAt: at }],
  },
});

export const WorktreeLockAcquired = defineEvent({
  context: 'worktrees',
  type: 'WorktreeLockAcquired',
  schemaVersion: 1,
  data: z.object({
    ...Held,
    jobId: z.string().min(1),
    repositoryUrl: RepositoryUrlSchema,
    branch: BranchNameSchema,
    baseRef: BaseRefSchema,
    /**
     * Written by older versions only, and not obeyed: a lease being prepared does not expire (its
     * holder has no token to renew it with yet); its expiry starts with `WorktreeSynced`.
     */
    expiresAt: Iso.optional(),
    acquiredAt: Iso,
  }),
  examples: {
    valid: [
      { ...held, jobId: 'job-7f3a', repositoryUrl: '/srv/git/shop.git', branch: 'feature/checkout', baseRef: 'main', acquiredAt: at },
      { ...held, jobId: 'job-7f3a', repositoryUrl: '/srv/git/shop.git', branch: 'feature/checkout', baseRef: 'main', expiresAt: at, acquiredAt: at },
    ],
    invalid: [
      { ...held, token: 0, jobId: 'job-7f3a', repositoryUrl: '/srv/git/shop.git', branch: 'feature/checkout', baseRef: 'main', expiresAt: at, acquiredAt: at },
    ],
  },
});

export const WorktreeLockTimedOut = defineEvent({
  context: 'worktrees',
  type: 'WorktreeLockTimedOut',
  schemaVersion: 1,
  data: z.object({ ...Lease, lockDeadline: Iso, timedOutAt: Iso }),
  examples: {
    valid: [{ worktreeKey: key, leaseId, lockDeadline: at, timedOutAt: at }],
    invalid: [{ worktreeKey: key, leaseId: 'x', lockDeadline: at, timedOutAt: at }],
  },
});

export const WorktreeLeaseRequestWithdrawn = defineEvent({
  context: 'worktrees',
  type: 'WorktreeLeaseRequestWithdrawn',
  schemaVersion: 1,
  data: z.object({ ...Lease, reason: WorktreeReleaseReasonSchema, withdrawnAt: Iso }),
  examples: {
    valid: [{ worktreeKey: key, leaseId, reason: 'job_terminal', withdrawnAt: at }],
    invalid: [{ worktreeKey: key, leaseId, reason: 'bored', withdrawnAt: at }],
  },
});

export const WorktreeCreated = defineEvent({
  context: 'worktrees',
  type: 'WorktreeCreated',
  schemaVersion: 1,
  data: z.object({ ...Held, path: z.string().min(1), createdAt: Iso }),
  examples: {
    valid: [{ ...held, path: '/var/lib/gantry/worktrees/x', createdAt: at }],
    invalid: [{ ...held, path: '', createdAt: at }],
  },
});

export const WorktreeReused = defineEvent({
  context: 'worktrees',
  type: 'WorktreeReused',
  schemaVersion: 1,
  data: z.object({ ...Held, path: z.string().min(1), reusedAt: Iso }),
  examples: {
    valid: [{ ...held, path: '/var/lib/gantry/worktrees/x', reusedAt: at }],
    invalid: [{ ...held, reusedAt: at }],
  },
});

/** The worktree is ready: synced to the base ref, at `baseSha`. */
export const WorktreeSynced = defineEvent({
  context: 'worktrees',
  type: 'WorktreeSynced',
  schemaVersion: 1,
  data: z.object({ ...Held, baseSha: Sha, expiresAt: Iso, syncedAt: Iso }),
  examples: {
    valid: [{ ...held, baseSha: sha, expiresAt: at, syncedAt: at }],
    invalid: [{ ...held, baseSha: 'HEAD', expiresAt: at, syncedAt: at }],
  },
});

export const WorktreeSyncFailed = defineEvent({
  context: 'worktrees',
  type: 'WorktreeSyncFailed',
  schemaVersion: 1,
  data: z.object({
    ...Held,
    stage: z.enum(['create_or_reuse', 'sync']),
    reason: z.string().min(1).max(4000),
    /** Whose fault it is; absent on events recorded before the service told them apart (taken as HOST). */
    fault: WorktreePreparationFaultSchema.optional(),
    failedAt: Iso,
  }),
  examples: {
    valid: [
      { ...held, stage: 'sync', reason: 'local branch has 2 commits not on origin and the base moved', failedAt: at },
      { ...held, stage: 'create_or_reuse', reason: 'PRECONDITION_FAILED: base ref release-9 is not a branch, tag or commit of the origin', fault: 'JOB', failedAt: at },
    ],
    invalid: [{ ...held, stage: 'push', reason: 'x', failedAt: at }],
  },
});

export const WorktreeLeaseRenewed = defineEvent({
  context: 'worktrees',
  type: 'WorktreeLeaseRenewed',
  schemaVersion: 1,
  data: z.object({
    ...Held,
    expiresAt: Iso,
    renewedAt: Iso,
    /**
     * Renewed by the worktree service at its start, for the holder: while the service was down no
     * holder could renew, and that time does not count against a lease (docs/worktrees.md, "When a
     * lease ends"). Absent on a holder's own renewal.
     */
    resumedAtStart: z.literal(true).optional(),
    /**
     * Renewed by the worktree service for the holder when its own connection to NATS came back: while
     * it was gone no holder could reach it, and its sweep expired nothing (docs/worktrees.md, "When a
     * lease ends").
     */
    resumedAfterBusLoss: z.literal(true).optional(),
  }),
  examples: {
    valid: [
      { ...held, expiresAt: at, renewedAt: at },
      { ...held, expiresAt: at, renewedAt: at, resumedAtStart: true },
      { ...held, expiresAt: at, renewedAt: at, resumedAfterBusLoss: true },
    ],
    invalid: [{ ...held, expiresAt: 'tomorrow', renewedAt: at }],
  },
});

export const WorktreeLeaseExpired = defineEvent({
  context: 'worktrees',
  type: 'WorktreeLeaseExpired',
  schemaVersion: 1,
  data: z.object({ ...Held, expiresAt: Iso, expiredAt: Iso }),
  examples: {
    valid: [{ ...held, expiresAt: at, expiredAt: at }],
    invalid: [{ ...held, expiresAt: at }],
  },
});

export const WorktreeReleaseRequested = defineEvent({
  context: 'worktrees',
  type: 'WorktreeReleaseRequested',
  schemaVersion: 1,
  data: z.object({
    ...Held,
    reason: WorktreeReleaseReasonSchema,
    /** Remove the worktree after rescuing it (hygiene), or keep it clean for the next lease. */
    removeWorktree: z.boolean(),
    /** The branch the worktree serves (its HEAD stays there through a rescue). */
    branch: BranchNameSchema,
    requestedAt: Iso,
  }),
  examples: {
    valid: [
      { ...held, reason: 'released', removeWorktree: false, branch: 'feature/checkout', requestedAt: at },
      { ...held, reason: 'stale_reset', removeWorktree: true, branch: 'feature/checkout', requestedAt: at },
    ],
    invalid: [{ ...held, reason: 'forgot', removeWorktree: false, branch: 'feature/checkout', requestedAt: at }],
  },
});

/**
 * The lease's claim ended by someone other than its holder (docs/worktrees.md): the lease stays
 * held — nobody else gets the worktree — until its holder releases it with its token, or it expires.
 */
export const WorktreeReleasePending = defineEvent({
  context: 'worktrees',
  type: 'WorktreeReleasePending',
  schemaVersion: 1,
  data: z.object({ ...Held, cause: WorktreeReleasePendingCauseSchema, pendingSince: Iso }),
  examples: {
    valid: [
      { ...held, cause: 'job_cancelled', pendingSince: at },
      { ...held, cause: 'claim_superseded', pendingSince: at },
    ],
    invalid: [{ ...held, cause: 'released', pendingSince: at }],
  },
});

/** A dirty worktree's changes (tracked and untracked) were committed to a rescue branch. */
export const WorktreeRescued = defineEvent({
  context: 'worktrees',
  type: 'WorktreeRescued',
  schemaVersion: 1,
  data: z.object({ ...Held, rescueBranch: BranchNameSchema, rescueSha: Sha, rescuedAt: Iso }),
  examples: {
    valid: [{ ...held, rescueBranch: `gantry/rescue/${key}/20261130T060000000Z`, rescueSha: sha, rescuedAt: at }],
    invalid: [{ ...held, rescueBranch: 'gantry/rescue/..', rescueSha: sha, rescuedAt: at }],
  },
});

export const WorktreeReleased = defineEvent({
  context: 'worktrees',
  type: 'WorktreeReleased',
  schemaVersion: 1,
  data: z.object({ ...Held, reason: WorktreeReleaseReasonSchema, removed: z.boolean(), releasedAt: Iso }),
  examples: {
    valid: [{ ...held, reason: 'job_terminal', removed: false, releasedAt: at }],
    invalid: [{ ...held, reason: 'job_terminal', releasedAt: at }],
  },
});

/**
 * Hygiene: an idle worktree (no holder, nobody waiting) is to be removed — after rescuing any
 * changes it holds: the least recently used of a repository over its cap of worktrees, or one
 * whose directory start-up reconciliation found gone (the eviction then only completes the record).
 */
export const WorktreeEvictionRequested = defineEvent({
  context: 'worktrees',
  type: 'WorktreeEvictionRequested',
  schemaVersion: 1,
  data: z.object({
    worktreeKey: WorktreeKeySchema,
    repositoryUrl: RepositoryUrlSchema,
    branch: BranchNameSchema,
    /** Why it goes: the repository has more worktrees than its cap, or its directory is gone (found at start-up). */
    reason: z.enum(['over_capacity', 'missing']),
    requestedAt: Iso,
  }),
  examples: {
    valid: [
      { worktreeKey: key, repositoryUrl: '/srv/git/shop.git', branch: 'feature/checkout', reason: 'over_capacity', requestedAt: at },
      { worktreeKey: key, repositoryUrl: '/srv/git/shop.git', branch: 'feature/checkout', reason: 'missing', requestedAt: at },
    ],
    invalid: [{ worktreeKey: key, repositoryUrl: '/srv/git/shop.git', branch: 'feature/checkout', reason: 'bored', requestedAt: at }],
  },
});

/** The idle worktree was removed (`git worktree remove` + prune); its changes, if any, went to a rescue branch first. */
export const WorktreeEvicted = defineEvent({
  context: 'worktrees',
  type: 'WorktreeEvicted',
  schemaVersion: 1,
  data: z.object({
    worktreeKey: WorktreeKeySchema,
    rescueBranch: BranchNameSchema.nullable(),
    rescueSha: Sha.nullable(),
    removed: z.boolean(),
    evictedAt: Iso,
  }),
  examples: {
    valid: [
      { worktreeKey: key, rescueBranch: null, rescueSha: null, removed: true, evictedAt: at },
      { worktreeKey: key, rescueBranch: `gantry/rescue/${key}/20261130T060000000Z`, rescueSha: sha, removed: true, evictedAt: at },
    ],
    invalid: [{ worktreeKey: key, rescueBranch: null, rescueSha: null, evictedAt: at }],
  },
});

/**
 * Closing the books of a worktree key's stream: a stream that has grown long ends here, and the key
 * goes on in the stream of the next epoch, which opens with what the past leaves to the future
 * (WorktreeBooksOpened). No command is decided on a closed stream again, so no command replays more
 * than one epoch (docs/worktrees.md).
 */
export const WorktreeBooksClosed = defineEvent({
  context: 'worktrees',
  type: 'WorktreeBooksClosed',
  schemaVersion: 1,
  data: z.object({ worktreeKey: WorktreeKeySchema, epoch: z.number().int().nonnegative(), nextEpoch: z.number().int().positive(), closedAt: Iso }),
  examples: {
    valid: [{ worktreeKey: key, epoch: 0, nextEpoch: 1, closedAt: at }],
    invalid: [{ worktreeKey: key, epoch: 0, nextEpoch: 0, closedAt: at }],
  },
});

/** A lease that had not ended when the books were closed: it goes on, unchanged, in the next epoch. */
const CarriedLeaseSchema = z.object({
  ...LeaseRequest,
  status: z.enum(['acquiring_lock', 'creating_or_reusing', 'syncing', 'ready', 'releasing']),
  token: WorktreeLeaseTokenSchema.nullable(),
  path: z.string().min(1).nullable(),
  baseSha: Sha.nullable(),
  expiresAt: Iso.nullable(),
  releaseReason: WorktreeReleaseReasonSchema.nullable(),
  removeWorktree: z.boolean(),
  releasePending: z.object({ cause: WorktreeReleasePendingCauseSchema, since: Iso }).nullable(),
});

/**
 * The first event of an epoch's stream: the fencing token last granted (the next grant gets one
 * more), the worktree as it was left, and — when the books were closed while the key was in use —
 * its lock (holder and waiters in line), the leases that had not ended and an eviction under way.
 */
export const WorktreeBooksOpened = defineEvent({
  context: 'worktrees',
  type: 'WorktreeBooksOpened',
  schemaVersion: 1,
  data: z.object({
    worktreeKey: WorktreeKeySchema,
    epoch: z.number().int().positive(),
    lastToken: z.number().int().nonnegative(),
    /** Where the key's worktree is, or null when it was removed. */
    path: z.string().min(1).nullable(),
    repositoryUrl: RepositoryUrlSchema,
    branch: BranchNameSchema,
    /** Absent: nobody held or waited for the key. */
    lock: z.object({ holder: WorktreeLeaseIdSchema.nullable(), waiters: z.array(z.object({ leaseId: WorktreeLeaseIdSchema, deadline: Iso })) }).optional(),
    leases: z.array(CarriedLeaseSchema).optional(),
    eviction: z.object({ repositoryUrl: RepositoryUrlSchema, branch: BranchNameSchema, requestedAt: Iso }).nullable().optional(),
    openedAt: Iso,
  }),
  examples: {
    valid: [
      { worktreeKey: key, epoch: 1, lastToken: 41, path: '/var/lib/gantry/worktrees/x', repositoryUrl: '/srv/git/shop.git', branch: 'feature/checkout', openedAt: at },
      {
        worktreeKey: key, epoch: 2, lastToken: 42, path: '/var/lib/gantry/worktrees/x', repositoryUrl: '/srv/git/shop.git', branch: 'feature/checkout',
        lock: { holder: leaseId, waiters: [] },
        leases: [
          {
            worktreeKey: key, leaseId, jobId: 'job-7f3a', jobLeaseToken: 2, repositoryUrl: '/srv/git/shop.git', branch: 'feature/checkout', baseRef: 'main',
            leaseDurationMs: 600_000, lockDeadline: at, requestedAt: at, status: 'ready', token: 42, path: '/var/lib/gantry/worktrees/x', baseSha: sha,
            expiresAt: at, releaseReason: null, removeWorktree: false, releasePending: null,
          },
        ],
        eviction: null,
        openedAt: at,
      },
      { worktreeKey: key, epoch: 3, lastToken: 97, path: null, repositoryUrl: 'https://github.com/acme/shop.git', branch: 'feature/checkout', openedAt: at },
    ],
    invalid: [{ worktreeKey: key, epoch: 0, lastToken: 41, path: null, repositoryUrl: '/srv/git/shop.git', branch: 'feature/checkout', openedAt: at }],
  },
});

export const worktreeEventContracts = [
  WorktreeLeaseRequested,
  WorktreeLockQueued,
  WorktreeLockAcquired,
  WorktreeLockTimedOut,
  WorktreeLeaseRequestWithdrawn,
  WorktreeCreated,
  WorktreeReused,
  WorktreeSynced,
  WorktreeSyncFailed,
  WorktreeLeaseRenewed,
  WorktreeLeaseExpired,
  WorktreeReleasePending,
  WorktreeReleaseRequested,
  WorktreeRescued,
  WorktreeReleased,
  WorktreeEvictionRequested,
  WorktreeEvicted,
  WorktreeBooksClosed,
  WorktreeBooksOpened,
] as const;

/** A worktree key's events (its lock, its leases and their tokens; one stream per key and epoch), as the WorktreeLease decider emits them. */
export type WorktreeLeaseEvent = EventsOf<typeof worktreeEventContracts>;
export type WorktreeLeaseEventType = WorktreeLeaseEvent['type'];
export const worktreeLeaseEventTypes = eventTypesOf(worktreeEventContracts);
