import { randomUUID } from 'node:crypto';
import { jobIdFor, type enqueueJob, type ReplyOf, type RequestOf } from '@gantry/contracts';
import { decideWithin, type CommandMetadata, type EventStore } from '@gantry/eventstore';
import {
  coalesceIntoJobCommand,
  COALESCING_WINDOW_MS,
  enqueueJobCommand,
  enqueueRequestHash,
  IDEMPOTENCY_WINDOW_MS,
  jobDecider,
  productResolution,
  routeEnqueue,
  runQueueEntry,
  runQueueRequest,
  type Job,
} from '../domain/index.js';
import { jobRow, loadJob, productRow } from '../infrastructure/job-store.js';

export type EnqueueRequest = RequestOf<typeof enqueueJob>;
export type EnqueueReply = ReplyOf<typeof enqueueJob>;

/**
 * The run queue: the idempotency key suppresses a repeat for 24 h through its receipt
 * (stored with the events, expiring after the window) — a repeat answers `deduplicated` with the
 * job; a request for the same product, kind, agent profile and reason within 5 s joins the queued
 * job (`coalesced`, its payload appended) unless either side is excluded from coalescing.
 * Coalescing is serialised per coalescing key with a transaction-scoped advisory lock, so two
 * concurrent requests never both create.
 */
export async function enqueueJobRequest(store: EventStore, request: EnqueueRequest, metadata: CommandMetadata): Promise<EnqueueReply> {
  const requestHash = enqueueRequestHash(request);
  const executed = await store.execute<EnqueueReply>(
    { metadata, idempotency: { scope: 'jobs.enqueue_job', key: request.idempotencyKey, request: { requestHash }, ttlMs: IDEMPOTENCY_WINDOW_MS } },
    async (uow) => {
      const now = store.clock().toISOString();
      const coalescible = !request.excludeFromCoalescing && request.agentProfile !== undefined;
      if (coalescible) {
        const key = ['coalesce', request.productId, request.kind, request.agentProfile!.id, request.reason ?? ''].map((p) => JSON.stringify(p)).join(',');
        await uow.sql.query(`SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, [key]);
        const { rows } = await uow.sql.query<{ job_id: string }>(
          `SELECT job_id FROM jobs
            WHERE status = 'QUEUED' AND NOT exclude_from_coalescing AND product_id = $1 AND kind = $2
              AND agent_profile_id = $3 AND reason IS NOT DISTINCT FROM $4 AND created_at > $5::timestamptz - make_interval(secs => $6)
            ORDER BY created_at, job_id`,
          [request.productId, request.kind, request.agentProfile!.id, request.reason ?? null, now, COALESCING_WINDOW_MS / 1000],
        );
        // The view row may lag a claim committing right now: the stream decides whether the job still takes requests.
        const candidates: Job[] = [];
        for (const row of rows) {
          const job = await loadJob(store, row.job_id, uow.sql);
          if (job && job.status === 'QUEUED') candidates.push(job);
        }
        const decision = routeEnqueue(runQueueRequest(request, { now }), candidates.map(runQueueEntry));
        if (decision.outcome === 'deduplicated') {
          // Only reachable when the receipt has gone while a job still lists the key: the job answers.
          const job = candidates.find((c) => c.jobId === decision.jobId)!;
          return { jobId: job.jobId, outcome: 'deduplicated', status: job.status };
        }
        if (decision.outcome === 'coalesced') {
          const d = await decideWithin(uow, jobDecider, decision.jobId, coalesceIntoJobCommand(request, { jobId: decision.jobId, now }));
          return { jobId: decision.jobId, outcome: 'coalesced', status: d.after.status === 'ABSENT' ? 'QUEUED' : d.after.status };
        }
      }
      const jobId = jobIdFor(randomUUID());
      const product = await productRow(uow.sql, request.productId);
      await decideWithin(uow, jobDecider, jobId, enqueueJobCommand(request, { jobId, now, product: product ? productResolution(product) : null }));
      return { jobId, outcome: 'created', status: 'QUEUED' };
    },
  );
  if (!executed.replayed) return executed.result;
  const job = await jobRow(store.pool, executed.result.jobId);
  return { jobId: executed.result.jobId, outcome: 'deduplicated', status: job?.status ?? executed.result.status };
}
