import { z } from 'zod';
import { defineCommand } from '../registry.js';
import { ErrorCode, GantryError, isGantryError } from '../errors.js';
import { CommandMetaSchema, NextCursorSchema, PageCursorSchema } from '../envelope.js';
import { JobIdSchema, LeaseTokenSchema } from '../jobs/values.js';
import { leaseNamesProblem, RepositoryUrlSchema, WorktreeKeySchema } from './git-names.js';

export const WorktreeLeaseIdSchema = z.uuid();
/** The fencing token of a worktree lease: one higher at each grant for the same worktree key. */
export const WorktreeLeaseTokenSchema = z.number().int().positive();
/** Bounds of a lease: at least 1 s, at most 24 h (renew for longer). */
export const LeaseDurationMsSchema = z.number().int().min(1_000).max(86_400_000);
/** How long an acquirer waits in line for the lock; at most 1 h. */
export const LockTimeoutMsSchema = z.number().int().min(0).max(3_600_000);
const IdempotencyKeySchema = z.string().min(1).max(200);
const IsoTimestampSchema = z.iso.datetime({ offset: true });
const ShaSchema = z.string().regex(/^[0-9a-f]{40}([0-9a-f]{24})?$/, 'a full commit SHA');

export const WorktreeLeaseStatusSchema = z.enum([
  'acquiring_lock',
  'creating_or_reusing',
  'syncing',
  'ready',
  'releasing',
  'released',
  'lock_timeout',
  'sync_failed',
  'stale_released',
  'withdrawn',
]);
export type WorktreeLeaseStatus = z.infer<typeof WorktreeLeaseStatusSchema>;

export const WorktreeReleaseReasonSchema = z.enum(['released', 'job_terminal', 'expired', 'stale_reset', 'shutdown']);
export type WorktreeReleaseReason = z.infer<typeof WorktreeReleaseReasonSchema>;

/**
 * Why a ready lease waits for its holder's release instead of being released at once: its claim
 * ended by someone other than its holder — a cancel, the job's lease expiring, a newer claim of the
 * job, or a claim the service never heard of — while the holder's agent may still be running in it.
 */
export const WorktreeReleasePendingCauseSchema = z.enum(['job_cancelled', 'job_lease_expired', 'claim_superseded', 'claim_unknown']);
export type WorktreeReleasePendingCause = z.infer<typeof WorktreeReleasePendingCauseSchema>;

/**
 * Whose fault a lease that could not be prepared (`sync_failed`) is (docs/worktrees.md, "Whose fault a
 * refused lease is"): `JOB` when the origin lacks what the job names (its base ref) — every host would
 * refuse it alike —, `HOST` for anything of the host that made it (its disk, its shared clone, its
 * paths, its git). A lease that failed before the service told them apart counts as `HOST`.
 */
export const WorktreePreparationFaultSchema = z.enum(['JOB', 'HOST']);
export type WorktreePreparationFault = z.infer<typeof WorktreePreparationFaultSchema>;

// ---- acquire_worktree ----------------------------------------------------------------------

const acquireExample = {
  jobId: 'job-0f1e2d3c-4b5a-4968-8776-655443322110',
  jobLeaseToken: 3,
  repositoryUrl: 'https://github.com/acme/shop.git',
  branch: 'feature/checkout',
  baseRef: 'main',
  leaseDurationMs: 600_000,
  idempotencyKey: 'acquire:job-0f1e2d3c:3',
};

export const AcquireWorktreeRequestSchema = CommandMetaSchema.extend({
  jobId: JobIdSchema,
  /** The job claim's fencing token: the lease belongs to this claim of the job. */
  jobLeaseToken: LeaseTokenSchema,
  /** The repository, branch and base ref are held together to leaseNamesProblem (below). */
  repositoryUrl: z.string(),
  branch: z.string(),
  baseRef: z.string(),
  leaseDurationMs: LeaseDurationMsSchema,
  /** How long to wait in line for the lock; the service's default when absent. */
  lockTimeoutMs: LockTimeoutMsSchema.optional(),
  idempotencyKey: IdempotencyKeySchema,
}).superRefine((request, ctx) => {
  // Together: whether a branch is in a rescue folder is known only with its repository.
  const refused = leaseNamesProblem(request);
  if (refused) ctx.addIssue({ code: 'custom', message: refused.problem, path: [refused.name], input: request[refused.name] });
});
export type AcquireWorktreeRequest = z.infer<typeof AcquireWorktreeRequestSchema>;

/**
 * What is left of a lease by the worktree service's clock as it answers — reckoned at every answer, so
 * also for a command asked again under its key and answered from its receipt, whose lease may have
 * begun or been renewed long before, or resumed at a start since. A caller counts it from when it sent
 * the try that got the answer, never reading `expiresAt` against its own clock (docs/jobs.md, "A
 * runner's clock"). Absent from a worktree service that does not say.
 */
const LeaseLeftMsSchema = z.number().int().nonnegative().optional();

export const WorktreeLeaseGrantSchema = z.object({
  leaseId: WorktreeLeaseIdSchema,
  token: WorktreeLeaseTokenSchema,
  worktreeKey: WorktreeKeySchema,
  path: z.string().min(1),
  expiresAt: IsoTimestampSchema,
  /** The commit the worktree was synced to: the job's base_sha. */
  baseSha: ShaSchema,
  expiresInMs: LeaseLeftMsSchema,
});
export type WorktreeLeaseGrant = z.infer<typeof WorktreeLeaseGrantSchema>;

const grantExample = {
  leaseId: '0b7a4c3e-2f7d-4b8e-9a51-6c2d1e0f9a11',
  token: 4,
  worktreeKey: 'shop-feature-checkout-1a2b3c4d5e6f',
  path: '/var/lib/gantry/worktrees/shop-feature-checkout-1a2b3c4d5e6f',
  expiresAt: '2026-11-30T06:10:00.000Z',
  baseSha: '4b825dc642cb6eb9a060e54bf8d69288fbee4904',
};

export const acquireWorktree = defineCommand({
  context: 'worktrees',
  name: 'acquire_worktree',
  request: AcquireWorktreeRequestSchema,
  reply: WorktreeLeaseGrantSchema,
  examples: {
    valid: [
      acquireExample,
      { ...acquireExample, repositoryUrl: 'git@github.com:acme/shop.git', baseRef: '4b825dc642cb6eb9a060e54bf8d69288fbee4904' },
      { ...acquireExample, repositoryUrl: 'ssh://git@host.example/acme/shop.git', lockTimeoutMs: 0 },
      { ...acquireExample, repositoryUrl: 'file:///srv/git/shop.git' },
      { ...acquireExample, repositoryUrl: '/srv/git/shop.git', correlationId: 'corr-1' },
    ],
    invalid: [
      { ...acquireExample, branch: 'gantry/rescue/shop-main-1a2b3c4d5e6f' },
      { ...acquireExample, branch: '--upload-pack=touch /tmp/pwned' },
      { ...acquireExample, branch: '-x' },
      { ...acquireExample, branch: '../../etc' },
      { ...acquireExample, branch: 'a..b' },
      { ...acquireExample, branch: 'feature/x.lock' },
      { ...acquireExample, branch: 'gantry' },
      { ...acquireExample, branch: 'gantry/rescue' },
      { ...acquireExample, branch: 'a@{1}' },
      { ...acquireExample, branch: 'has space' },
      { ...acquireExample, repositoryUrl: 'ext::sh -c touch% /tmp/pwned' },
      { ...acquireExample, repositoryUrl: 'fd::17' },
      { ...acquireExample, repositoryUrl: '-oProxyCommand=touch /tmp/pwned' },
      { ...acquireExample, repositoryUrl: 'ssh://-oProxyCommand=touch/x' },
      { ...acquireExample, repositoryUrl: 'https://user:secret@github.com/acme/shop.git' },
      { ...acquireExample, repositoryUrl: 'http://github.com/acme/shop.git' },
      { ...acquireExample, baseRef: '-main' },
      { ...acquireExample, leaseDurationMs: 10 },
      { ...acquireExample, jobLeaseToken: 0 },
      { ...acquireExample, idempotencyKey: '' },
      { ...acquireExample, jobId: undefined },
      { ...acquireExample, jobId: 'job-7f3a' },
    ],
  },
});

/**
 * The answer to an acquire whose lease ended before its grant was taken — asked again under its
 * idempotency key after the lease was released, expired or withdrawn (its answer lost, its caller
 * cut off meanwhile), or ended while the acquire waited: a STALE_FENCE refusal whose
 * `details.leaseEnded` says which lease, how it ended and whether its claim ended too
 * (docs/worktrees.md, "An acquire whose lease ended"). It is never the grant of an ended lease.
 * A lease that timed out in line or could not be prepared answers LOCK_TIMEOUT / PRECONDITION_FAILED.
 */
export const WorktreeLeaseEndedSchema = z.object({
  leaseId: WorktreeLeaseIdSchema,
  status: z.enum(['releasing', 'released', 'stale_released', 'withdrawn']),
  /** Why, as its release or withdrawal recorded it: `job_terminal` when its claim's end ended it, `expired` when nobody renewed it, … */
  reason: WorktreeReleaseReasonSchema.nullable(),
  /** The worktree service has heard that the claim the lease was asked for ended (its job's end, requeue, cancel or a newer claim). */
  claimEnded: z.boolean(),
});
export type WorktreeLeaseEnded = z.infer<typeof WorktreeLeaseEndedSchema>;

/** The STALE_FENCE refusal of an acquire whose lease ended (WorktreeLeaseEndedSchema). */
export function worktreeLeaseEndedError(ended: WorktreeLeaseEnded): GantryError {
  const why = ended.reason ? `${ended.status}: ${ended.reason}` : ended.status;
  const claim = ended.claimEnded ? 'its claim has ended too' : 'nothing says its claim ended';
  return new GantryError(ErrorCode.STALE_FENCE, `worktree lease ${ended.leaseId} has ended (${why}) before its grant was taken; ${claim}`, {
    leaseId: ended.leaseId,
    status: ended.status,
    leaseEnded: WorktreeLeaseEndedSchema.parse(ended),
  });
}

/** What an acquire's refusal says of its lease's end; null for any other answer. */
export function worktreeLeaseEndedOf(error: unknown): WorktreeLeaseEnded | null {
  if (!isGantryError(error) || error.code !== ErrorCode.STALE_FENCE) return null;
  const parsed = WorktreeLeaseEndedSchema.safeParse(error.details?.['leaseEnded']);
  return parsed.success ? parsed.data : null;
}

/**
 * Whose fault an acquire's refusal for a lease that could not be prepared is (PRECONDITION_FAILED with
 * `details.fault`); null for any other answer, and for a worktree service that does not say.
 */
export function preparationFaultOf(error: unknown): WorktreePreparationFault | null {
  if (!isGantryError(error) || error.code !== ErrorCode.PRECONDITION_FAILED) return null;
  const parsed = WorktreePreparationFaultSchema.safeParse(error.details?.['fault']);
  return parsed.success ? parsed.data : null;
}

// ---- renew_worktree_lease / release_worktree -------------------------------------------------

const leaseRefExample = { leaseId: grantExample.leaseId, token: 4, idempotencyKey: 'renew:lease:1' };

export const RenewWorktreeLeaseRequestSchema = CommandMetaSchema.extend({
  leaseId: WorktreeLeaseIdSchema,
  token: WorktreeLeaseTokenSchema,
  /** The new lease runs this long from now; the lease's own duration when absent. */
  leaseDurationMs: LeaseDurationMsSchema.optional(),
  idempotencyKey: IdempotencyKeySchema,
});
export type RenewWorktreeLeaseRequest = z.infer<typeof RenewWorktreeLeaseRequestSchema>;

export const renewWorktreeLease = defineCommand({
  context: 'worktrees',
  name: 'renew_worktree_lease',
  request: RenewWorktreeLeaseRequestSchema,
  reply: z.object({ leaseId: WorktreeLeaseIdSchema, token: WorktreeLeaseTokenSchema, expiresAt: IsoTimestampSchema, expiresInMs: LeaseLeftMsSchema }),
  examples: {
    valid: [leaseRefExample, { ...leaseRefExample, leaseDurationMs: 120_000 }],
    invalid: [
      { ...leaseRefExample, leaseId: 'not-a-uuid' },
      { ...leaseRefExample, token: -1 },
      { ...leaseRefExample, token: 1.5 },
      { ...leaseRefExample, leaseDurationMs: 0 },
      { leaseId: grantExample.leaseId, token: 4 },
    ],
  },
});

export const ReleaseWorktreeRequestSchema = CommandMetaSchema.extend({
  leaseId: WorktreeLeaseIdSchema,
  token: WorktreeLeaseTokenSchema,
  idempotencyKey: IdempotencyKeySchema,
});
export type ReleaseWorktreeRequest = z.infer<typeof ReleaseWorktreeRequestSchema>;

export const releaseWorktree = defineCommand({
  context: 'worktrees',
  name: 'release_worktree',
  request: ReleaseWorktreeRequestSchema,
  reply: z.object({
    leaseId: WorktreeLeaseIdSchema,
    token: WorktreeLeaseTokenSchema,
    status: WorktreeLeaseStatusSchema,
  }),
  examples: {
    valid: [{ ...leaseRefExample, idempotencyKey: 'release:lease:1' }],
    invalid: [
      { ...leaseRefExample, leaseId: undefined },
      { ...leaseRefExample, token: '4' },
      { ...leaseRefExample, idempotencyKey: undefined },
    ],
  },
});

// ---- queries -----------------------------------------------------------------------------------

export const WorktreeLeaseViewSchema = z.object({
  leaseId: WorktreeLeaseIdSchema,
  worktreeKey: WorktreeKeySchema,
  jobId: z.string().min(1),
  jobLeaseToken: z.number().int().positive(),
  repositoryUrl: z.string().min(1),
  branch: z.string().min(1),
  baseRef: z.string().min(1),
  status: WorktreeLeaseStatusSchema,
  token: WorktreeLeaseTokenSchema.nullable(),
  path: z.string().nullable(),
  baseSha: ShaSchema.nullable(),
  expiresAt: IsoTimestampSchema.nullable(),
  requestedAt: IsoTimestampSchema,
  /** Set while a ready lease waits for its holder's release (its claim ended elsewhere): nobody else gets the worktree meanwhile. */
  releasePending: z.object({ cause: WorktreeReleasePendingCauseSchema, since: IsoTimestampSchema }).nullable().optional(),
});
export type WorktreeLeaseView = z.infer<typeof WorktreeLeaseViewSchema>;

export const listWorktreeLeases = defineCommand({
  context: 'worktrees',
  name: 'list_worktree_leases',
  request: CommandMetaSchema.extend({
    worktreeKey: WorktreeKeySchema.optional(),
    jobId: JobIdSchema.optional(),
    statuses: z.array(WorktreeLeaseStatusSchema).min(1).optional(),
    /** At most this many leases a page (a page also ends at 512 KiB of them). */
    limit: z.number().int().min(1).max(1000).default(100),
    /** Opaque: the nextCursor of the previous page; without it, the first page. */
    cursor: PageCursorSchema.optional(),
  }),
  /** In the order they were requested; nextCursor is null on the last page (absent from a service that does not page). */
  reply: z.object({ leases: z.array(WorktreeLeaseViewSchema), nextCursor: NextCursorSchema.optional() }),
  examples: {
    valid: [
      {},
      { jobId: acquireExample.jobId },
      { worktreeKey: grantExample.worktreeKey, statuses: ['ready', 'releasing'], limit: 10 },
      { statuses: ['ready'], limit: 500, cursor: 'eyJxIjoibGlzdF93b3JrdHJlZV9sZWFzZXMifQ' },
    ],
    invalid: [{ worktreeKey: '../../etc' }, { statuses: ['lost'] }, { statuses: [] }, { limit: 0 }, { cursor: '' }, { cursor: 42 }],
  },
});

export const WorktreeViewSchema = z.object({
  worktreeKey: WorktreeKeySchema,
  path: z.string().min(1),
  repositoryClone: z.string().min(1),
  branch: z.string().nullable(),
  headSha: ShaSchema.nullable(),
  dirty: z.boolean().nullable(),
  /** The lease that holds it now, if any. */
  heldBy: WorktreeLeaseIdSchema.nullable(),
  prunable: z.boolean(),
});
export type WorktreeView = z.infer<typeof WorktreeViewSchema>;

export const listWorktrees = defineCommand({
  context: 'worktrees',
  name: 'list_worktrees',
  request: CommandMetaSchema.extend({
    repositoryUrl: RepositoryUrlSchema.optional(),
    /** At most this many worktrees a page (a page also ends at 512 KiB of them). */
    limit: z.number().int().min(1).max(1000).default(100),
    /** Opaque: the nextCursor of the previous page; without it, the first page. */
    cursor: PageCursorSchema.optional(),
  }),
  /** In the order of their keys; nextCursor is null on the last page (absent from a service that does not page). */
  reply: z.object({ worktrees: z.array(WorktreeViewSchema), nextCursor: NextCursorSchema.optional() }),
  examples: {
    valid: [{}, { repositoryUrl: 'https://github.com/acme/shop.git' }, { limit: 20, cursor: 'eyJxIjoibGlzdF93b3JrdHJlZXMifQ' }],
    invalid: [{ repositoryUrl: 'ext::sh -c id' }, { repositoryUrl: 42 }, { limit: 1001 }, { cursor: '' }],
  },
});

export const DiskUsageSchema = z.object({
  root: z.string().min(1),
  totalBytes: z.number().int().nonnegative(),
  repositories: z.array(z.object({ name: z.string().min(1), bytes: z.number().int().nonnegative() })),
  worktrees: z.array(z.object({ worktreeKey: z.string().min(1), bytes: z.number().int().nonnegative() })),
  measuredAt: IsoTimestampSchema,
});
export type DiskUsage = z.infer<typeof DiskUsageSchema>;

export const getDiskUsage = defineCommand({
  context: 'worktrees',
  name: 'get_disk_usage',
  request: CommandMetaSchema.extend({}).strict(),
  reply: DiskUsageSchema,
  examples: {
    valid: [{}, { correlationId: 'corr-9' }],
    invalid: [{ path: '/etc' }, null],
  },
});
