import { ENQUEUE_IDEMPOTENCY_WINDOW_MS, ErrorCode, GantryError, MAX_JOB_INPUT_BYTES, type JobKind, type JobStatus } from '@gantry/contracts';
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
  now: string;
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
 *    side excluded from coalescing → coalesced into it (its payload is appended by JobCoalesced);
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
        // A job travels whole in one message: coalescing grows it no further than one request may be.
        e.inputBytes + request.inputBytes <= MAX_JOB_INPUT_BYTES,
    )
    .sort((a, b) => Date.parse(a.enqueuedAt) - Date.parse(b.enqueuedAt) || a.jobId.localeCompare(b.jobId))[0];
  return target ? { outcome: 'coalesced', jobId: target.jobId } : { outcome: 'created' };
}
