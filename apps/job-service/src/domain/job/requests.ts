import {
  canonicalHash,
  featureBranchFor,
  jobInputBytes,
  type cancelJob,
  type claimJob,
  type enqueueJob,
  type finishJob,
  type logCommit,
  type logImplementation,
  type logTestResult,
  type renewJobLease,
  type reportPush,
  type RequestOf,
  type rollbackClaim,
  type startJob,
} from '@gantry/contracts';
import type { ProductResolution } from '../product/view.js';
import { runSettingsOf, type RunQueueRequest } from '../run-queue/run-queue.js';
import type { JobCommand } from './commands.js';
import { DEFAULT_MAX_ATTEMPTS } from './lease-policy.js';

/**
 * From a parsed wire request to the decider's command: optional fields become null, defaults are
 * applied, and the clock and ids the application layer supplies are put in. Nothing else happens here.
 */

type Clock = { now: string };
type Of<C, T extends JobCommand['type']> = (request: RequestOf<C>, context: Clock) => Extract<JobCommand, { type: T }>;

/** The request fields that are about the call, not the intent: left out of every request hash. */
function withoutCallMeta<T extends { correlationId?: string; causationId?: string; actor?: string }>(request: T) {
  const { correlationId: _c, causationId: _k, actor: _a, ...intent } = request;
  return intent;
}

/** Each request's hash, worked out once: an enqueue asks for it at several steps (a parsed request is never changed). */
const enqueueHashes = new WeakMap<RequestOf<typeof enqueueJob>, string>();

/** The hash that tells a replay of an enqueue (same key, same intent) from a conflicting reuse of its key. */
export function enqueueRequestHash(request: RequestOf<typeof enqueueJob>): string {
  let hash = enqueueHashes.get(request);
  if (hash === undefined) {
    hash = canonicalHash(withoutCallMeta(request));
    enqueueHashes.set(request, hash);
  }
  return hash;
}

export function enqueueJobCommand(
  request: RequestOf<typeof enqueueJob>,
  context: Clock & { jobId: string; product: ProductResolution | null },
): Extract<JobCommand, { type: 'EnqueueJob' }> {
  return {
    type: 'EnqueueJob',
    data: {
      jobId: context.jobId,
      kind: request.kind,
      productId: request.productId,
      storyId: request.storyId ?? null,
      sprintId: request.sprintId ?? null,
      sprintRunId: request.sprintRunId ?? null,
      taskId: request.taskId ?? null,
      prompt: request.prompt ?? null,
      payload: request.payload ?? null,
      configOverrides: {
        product: request.configOverrides?.product ?? null,
        sprint: request.configOverrides?.sprint ?? null,
        job: request.configOverrides?.job ?? null,
      },
      agentProfile: request.agentProfile ?? null,
      reason: request.reason ?? null,
      excludeFromCoalescing: request.excludeFromCoalescing,
      idempotencyKey: request.idempotencyKey,
      requestHash: enqueueRequestHash(request),
      baseRef: request.baseRef ?? null,
      branch: workBranchOf(request, context.jobId),
      storyTaskIds: request.storyTaskIds ?? null,
      product: context.product,
      maxAttempts: request.maxAttempts ?? DEFAULT_MAX_ATTEMPTS,
      now: context.now,
    },
  };
}

/**
 * The branch a job's work is pushed to: the one the request names; for a job that writes code, else
 * a feature branch derived from the job — never its base ref, which is usually the target branch
 * (docs/jobs.md, "Branches"). Any other job works on a branch only when one is named.
 */
function workBranchOf(request: RequestOf<typeof enqueueJob>, jobId: string): string | null {
  const writesCode = request.kind === 'TASK_IMPLEMENTATION' || request.kind === 'SPRINT_IMPLEMENTATION';
  if (request.branch !== undefined || !writesCode) return request.branch ?? null;
  return featureBranchFor({ productId: request.productId, storyId: request.storyId ?? null, taskId: request.taskId ?? null, jobId });
}

/** The later request of a coalesced pair, appended to the queued job `jobId`. */
export function coalesceIntoJobCommand(request: RequestOf<typeof enqueueJob>, context: Clock & { jobId: string }): Extract<JobCommand, { type: 'CoalesceIntoJob' }> {
  return {
    type: 'CoalesceIntoJob',
    data: {
      jobId: context.jobId,
      payload: request.payload ?? null,
      prompt: request.prompt ?? null,
      branch: request.branch ?? null,
      idempotencyKey: request.idempotencyKey,
      requestHash: enqueueRequestHash(request),
      now: context.now,
    },
  };
}

/**
 * The request as the run queue routes it. `product`: the product as it is now, for the settings a job
 * of the request would run with (a request that may not coalesce never reads them).
 */
export function runQueueRequest(request: RequestOf<typeof enqueueJob>, context: Clock & { product: ProductResolution | null }): RunQueueRequest {
  let inputBytes: number | undefined;
  let runsWith: string | undefined;
  return {
    kind: request.kind,
    productId: request.productId,
    agentProfileId: request.agentProfile?.id ?? null,
    reason: request.reason ?? null,
    excludeFromCoalescing: request.excludeFromCoalescing,
    idempotencyKey: request.idempotencyKey,
    requestHash: enqueueRequestHash(request),
    // Weighed when read, once: only a request that may coalesce is (its prompt is written out as JSON to weigh it).
    get inputBytes() {
      return (inputBytes ??= jobInputBytes(request.prompt === undefined ? [] : [request.prompt], request.payload === undefined ? [] : [request.payload]));
    },
    get runsWith() {
      return (runsWith ??= runSettingsOf({
        kind: request.kind,
        configOverrides: request.configOverrides ?? null,
        agentProfile: request.agentProfile ?? null,
        repository: context.product?.repository ?? null,
        repositoryUrl: context.product?.cloneUrl ?? null,
        targetBranch: context.product?.targetBranch ?? null,
        maxAttempts: request.maxAttempts ?? DEFAULT_MAX_ATTEMPTS,
      }));
    },
    branchAs: (jobId) => workBranchOf(request, jobId),
    now: context.now,
  };
}

/** A claim names one job: the offered one, or the one the application picked from the queue. */
export function claimJobCommand(request: RequestOf<typeof claimJob>, context: Clock & { jobId: string }): Extract<JobCommand, { type: 'ClaimJob' }> {
  return {
    type: 'ClaimJob',
    data: {
      jobId: context.jobId,
      runnerId: request.runnerId,
      kinds: request.kinds,
      baseSha: request.baseSha ?? null,
      leaseDurationMs: request.leaseDurationMs ?? null,
      now: context.now,
    },
  };
}

const lease = (r: { jobId: string; runnerId: string; leaseToken: number }, c: Clock) => ({
  jobId: r.jobId,
  runnerId: r.runnerId,
  leaseToken: r.leaseToken,
  now: c.now,
});

export const renewJobLeaseCommand: Of<typeof renewJobLease, 'RenewJobLease'> = (r, c) => ({
  type: 'RenewJobLease',
  data: { ...lease(r, c), leaseDurationMs: r.leaseDurationMs ?? null },
});

export const startJobCommand: Of<typeof startJob, 'StartJob'> = (r, c) => ({
  type: 'StartJob',
  data: { ...lease(r, c), baseSha: r.baseSha ?? null, branch: r.branch ?? null, adoptPushOf: r.adoptPushOf ?? null, adoptRunOf: r.adoptRunOf ?? null },
});

export const logImplementationCommand: Of<typeof logImplementation, 'LogImplementation'> = (r, c) => ({
  type: 'LogImplementation',
  data: {
    ...lease(r, c),
    taskId: r.taskId ?? null,
    branch: r.branch ?? null,
    plan: r.plan ?? null,
    summary: r.summary,
    alreadyPresent: r.alreadyPresent ?? null,
  },
});

export const logCommitCommand: Of<typeof logCommit, 'LogCommit'> = (r, c) => ({
  type: 'LogCommit',
  data: { ...lease(r, c), commitSha: r.commitSha, message: r.message, summary: r.summary },
});

export const logTestResultCommand: Of<typeof logTestResult, 'LogTestResult'> = (r, c) => ({
  type: 'LogTestResult',
  data: { ...lease(r, c), status: r.status, summary: r.summary },
});

export const reportPushCommand: Of<typeof reportPush, 'ReportPush'> = (r, c) => ({
  type: 'ReportPush',
  data: { ...lease(r, c), branch: r.branch, headSha: r.headSha, pushed: r.pushed, facts: r.facts ?? null },
});

export const finishJobCommand: Of<typeof finishJob, 'FinishJob'> = (r, c) => ({
  type: 'FinishJob',
  data: { ...lease(r, c), facts: r.facts },
});

export const rollbackClaimCommand: Of<typeof rollbackClaim, 'RollbackClaim'> = (r, c) => ({
  type: 'RollbackClaim',
  data: { ...lease(r, c), reason: r.reason, exitCode: r.exitCode ?? null, cause: r.cause },
});

export const cancelJobCommand: Of<typeof cancelJob, 'CancelJob'> = (r, c) => ({
  type: 'CancelJob',
  data: { jobId: r.jobId, reason: r.reason ?? null, now: c.now },
});
