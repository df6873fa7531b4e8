import {
  canonicalJson,
  ENQUEUE_IDEMPOTENCY_WINDOW_MS,
  ErrorCode,
  GantryError,
  MAX_JOB_INPUT_BYTES,
  resolveAgentConfig,
  type AgentConfigOverride,
  type AgentProfile,
  type JobKind,
  type JobStatus,
} from '@gantry/contracts';
import { coalescingKeyOf } from './coalescing.js';

/** A repeat of an idempotency key within this window reports the existing job (fixed: AC-H6). */
export const IDEMPOTENCY_WINDOW_MS = ENQUEUE_IDEMPOTENCY_WINDOW_MS;
/** A request for the same agent profile and reason within this window joins the queued job. */
export const COALESCING_WINDOW_MS = 5_000;

/** What the run queue needs to know of one recent job (the caller loads those of the product). */
export interface RunQueueEntry {
  jobId: string;
  kind: JobKind;
  productId: string;
  status: JobStatus;
  agentProfileId: string | null;
  reason: string | null;
  excludeFromCoalescing: boolean;
  enqueuedAt: string;
  /** The enqueue key and each coalesced request's key, with the hash of the request that used it. */
  idempotencyKeys: { key: string; requestHash: string; at: string }[];
  /** The size of the job's prompts and payloads as JSON (jobInputBytes). */
  inputBytes: number;
  /** How the job runs (runSettingsOf): a request joins it only when it would run the same way. */
  runsWith: string;
  /** The branch the job works on, as its enqueue named or derived it (null: none). */
  branch: string | null;
}

export interface RunQueueRequest {
  kind: JobKind;
  productId: string;
  agentProfileId: string | null;
  reason: string | null;
  excludeFromCoalescing: boolean;
  idempotencyKey: string;
  requestHash: string;
  /** The size of the request's prompt and payload as JSON (jobInputBytes). */
  inputBytes: number;
  /** How a job made of the request would run, with the product as it is now (runSettingsOf). */
  runsWith: string;
  /**
   * The branch the request would work on as the job `jobId` (the one it names, else the one derived
   * for that job, or none): a request joins only a job that works on it.
   */
  branchAs(jobId: string): string | null;
  now: string;
}

/** What decides how a job runs, as its enqueue recorded it or a request would now. */
export interface RunSettings {
  kind: JobKind;
  configOverrides: { product?: AgentConfigOverride | null; sprint?: AgentConfigOverride | null; job?: AgentConfigOverride | null } | null;
  agentProfile: AgentProfile | null;
  /** The product's resolution: where the work lands (null for a job from before products, or an unknown product). */
  repository: string | null;
  repositoryUrl: string | null;
  targetBranch: string | null;
  maxAttempts: number;
}

/**
 * How a job runs, as one comparable string: its resolved agent configuration (model, thinking
 * budget, permission mode, tools, max turns — the cascade as the claim will resolve it), where its
 * work lands, and its attempts. A coalesced request only adds its prompt and payload to the job, so
 * it may join only a job that runs as a job of its own would: otherwise a request sent after the
 * product's settings changed would run with the ones of before.
 */
export function runSettingsOf(s: RunSettings): string {
  let config: unknown;
  try {
    const o = s.configOverrides;
    config = resolveAgentConfig(s.kind, o?.product ?? null, o?.sprint ?? null, o?.job ?? null, s.agentProfile);
  } catch {
    config = null; // no runnable configuration: the enqueue refuses it, or the claim does
  }
  return canonicalJson({ config, repository: s.repository, repositoryUrl: s.repositoryUrl, targetBranch: s.targetBranch, maxAttempts: s.maxAttempts });
}

export type RunQueueDecision =
  | { outcome: 'created' }
  | { outcome: 'deduplicated'; jobId: string }
  | { outcome: 'coalesced'; jobId: string };

const age = (at: string, now: string) => Date.parse(now) - Date.parse(at);

/**
 * The run-queue semantics (docs/jobs.md, "The run queue (enqueue)"), as one decision over the recent jobs:
 * 1. the idempotency key was used within 24 h → deduplicated (the existing job; a different
 *    request under the same key is IDEMPOTENCY_CONFLICT);
 * 2. a QUEUED job of the same product, kind, agent profile and reason enqueued within 5 s, neither
 *    side excluded from coalescing, that runs with the settings the request would run with now
 *    (configuration, the product's target, attempts) and works on the branch the request would work on
 *    → coalesced into it (its payload is appended by JobCoalesced);
 * 3. otherwise → created.
 * Coalescing needs an agent profile: without one there is nothing to key it on.
 */
export function routeEnqueue(request: RunQueueRequest, recent: readonly RunQueueEntry[]): RunQueueDecision {
  for (const entry of recent) {
    for (const used of entry.idempotencyKeys) {
      if (used.key !== request.idempotencyKey || age(used.at, request.now) >= IDEMPOTENCY_WINDOW_MS) continue;
      if (used.requestHash !== request.requestHash) {
        throw new GantryError(
          ErrorCode.IDEMPOTENCY_CONFLICT,
          `idempotency key ${request.idempotencyKey} was used within 24 hours for a different request (job ${entry.jobId})`,
          { jobId: entry.jobId },
        );
      }
      return { outcome: 'deduplicated', jobId: entry.jobId };
    }
  }

  if (coalescingKeyOf(request) === null) return { outcome: 'created' };

  const target = recent
    .filter(
      (e) =>
        e.status === 'QUEUED' &&
        !e.excludeFromCoalescing &&
        e.productId === request.productId &&
        e.kind === request.kind &&
        e.agentProfileId === request.agentProfileId &&
        e.reason === request.reason &&
        age(e.enqueuedAt, request.now) < COALESCING_WINDOW_MS &&
        // A coalesced request runs as the job does: only with the settings it would have run with itself.
        e.runsWith === request.runsWith &&
        // Only the prompt and payload join: on another branch, the request's work would land where it did not ask.
        e.branch === request.branchAs(e.jobId) &&
        // A job travels whole in one message: coalescing grows it no further than one request may be.
        e.inputBytes + request.inputBytes <= MAX_JOB_INPUT_BYTES,
    )
    .sort((a, b) => Date.parse(a.enqueuedAt) - Date.parse(b.enqueuedAt) || a.jobId.localeCompare(b.jobId))[0];
  return target ? { outcome: 'coalesced', jobId: target.jobId } : { outcome: 'created' };
}
