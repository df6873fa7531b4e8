import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { coalescingStreamId, jobIdFor, type CoalescingKey, type enqueueJob, type ReplyOf, type RequestOf } from '@gantry/contracts';
import { decideWithin, type CommandMetadata, type EventStore, type StreamWork } from '@gantry/eventstore';
import {
  coalesceIntoJobCommand,
  COALESCING_WINDOW_MS,
  coalescingKeyOf,
  coalescingWindowOpened,
  enqueueJobCommand,
  enqueueRequestHash,
  evolveCoalescingWindows,
  IDEMPOTENCY_WINDOW_MS,
  initialCoalescingWindows,
  jobDecider,
  productResolution,
  routeEnqueue,
  runQueueEntry,
  runQueueRequest,
  type CoalescingEvent,
  type Job,
  type Product,
} from '../domain/index.js';
import { jobOf, jobRow, productRowStatement } from '../infrastructure/job-store.js';

export type EnqueueRequest = RequestOf<typeof enqueueJob>;
export type EnqueueReply = ReplyOf<typeof enqueueJob>;

/** How much older than the window a key's stream is read back: openings stamped by replicas whose clocks differ. */
const CLOCK_MARGIN_MS = 60_000;

/**
 * The jobs opened under a coalescing key recently enough to matter, and the version of the key's
 * stream: read from its end until an opening older than the window (a key's stream grows by one
 * event per job created under it; a request never reads further back than it needs).
 */
async function recentOpenings(uow: StreamWork, streamId: string, now: string): Promise<{ version: number; jobIds: string[] }> {
  const since = Date.parse(now) - COALESCING_WINDOW_MS - CLOCK_MARGIN_MS;
  for (let count = 16; ; count *= 4) {
    const tail = await uow.readStreamTail(streamId, count);
    const oldest = tail.events[0]?.data as CoalescingEvent['data'] | undefined;
    if (tail.events.length < count || !oldest || Date.parse(oldest.openedAt) < since) {
      const state = tail.events.reduce((s, e) => evolveCoalescingWindows(s, e as CoalescingEvent), initialCoalescingWindows);
      return { version: tail.version, jobIds: state.opened.filter((o) => Date.parse(o.openedAt) >= since).map((o) => o.jobId) };
    }
  }
}

/**
 * Requests for one coalescing key take turns within this process: they would only conflict on the
 * key's stream (or on the job they join) and retry each other out. Across replicas the appends'
 * compare-and-set still decides. Hand-written: a promise chain per key, nothing a library adds.
 */
const turns = new Map<string, Promise<unknown>>();

async function inTurn<T>(key: string, work: () => Promise<T>): Promise<T> {
  const before = turns.get(key) ?? Promise.resolve();
  const mine = before.then(work, work);
  const settled = mine.catch(() => undefined);
  turns.set(key, settled);
  try {
    return await mine;
  } finally {
    if (turns.get(key) === settled) turns.delete(key);
  }
}

/**
 * The run queue: the idempotency key suppresses a repeat for 24 h through its receipt (stored with
 * the events, expiring after the window) — a repeat answers `deduplicated` with the job; a request
 * for the same product, kind, agent profile and reason within 5 s joins the queued job
 * (`coalesced`, its payload appended) unless either side is excluded from coalescing. The rule is
 * routeEnqueue's; the candidates are the jobs the key's stream opened, and a new job is recorded
 * there at the version read, so two concurrent requests never both create (the loser retries and
 * joins the winner's job).
 *
 * `within`: a durable consumer's open transaction to enqueue in (EventStore.executeWithin). Such a
 * request does not take a turn: a turn ahead of it may be waiting for the connection it holds.
 */
export async function enqueueJobRequest(store: EventStore, request: EnqueueRequest, metadata: CommandMetadata, within?: pg.PoolClient): Promise<EnqueueReply> {
  if (within) return enqueueOnce(store, request, metadata, within);
  // Only the key is asked of it here (the settings are weighed in the transaction, with the product as it is then).
  const key = coalescingKeyOf(runQueueRequest(request, { now: store.clock().toISOString(), product: null }));
  return key ? inTurn(coalescingStreamId(key), () => enqueueOnce(store, request, metadata)) : enqueueOnce(store, request, metadata);
}

async function enqueueOnce(store: EventStore, request: EnqueueRequest, metadata: CommandMetadata, within?: pg.PoolClient): Promise<EnqueueReply> {
  const requestHash = enqueueRequestHash(request);
  // The id a created job gets: its (empty) stream is read with BEGIN, not in a round trip of its own.
  const newJobId = jobIdFor(randomUUID());
  const options = {
    metadata,
    idempotency: { scope: 'jobs.enqueue_job', key: request.idempotencyKey, request: { requestHash }, ttlMs: IDEMPOTENCY_WINDOW_MS },
    streams: [newJobId],
    // The product's settings a created job takes: read with BEGIN too.
    reads: [productRowStatement(request.productId)],
  };
  const execute = (handler: (uow: StreamWork) => Promise<EnqueueReply>) =>
    within ? store.executeWithin(within, options, handler) : store.executeInOneMessage(options, handler);
  const executed = await execute(
    async (uow) => {
      uow.knowStream(newJobId, []); // a fresh id: its stream is empty (the append at version 0 checks it)
      const now = store.clock().toISOString();
      // The product as it is now: a created job is resolved against it, and a request joins only a job that runs as it would.
      const product = (await uow.read<{ state: Product }>(0)).rows[0]?.state ?? null;
      const resolution = product ? productResolution(product) : null;
      const routing = runQueueRequest(request, { now, product: resolution });
      const key: CoalescingKey | null = coalescingKeyOf(routing);
      let opening: { streamId: string; version: number } | null = null;
      if (key) {
        const streamId = coalescingStreamId(key);
        const recent = await recentOpenings(uow, streamId, now);
        opening = { streamId, version: recent.version };
        const candidates: Job[] = [];
        for (const jobId of recent.jobIds) {
          const job = jobOf(await uow.readStream(jobId));
          if (job) candidates.push(job);
        }
        const decision = routeEnqueue(routing, candidates.map(runQueueEntry));
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
      const jobId = newJobId;
      if (key && opening) await uow.append(opening.streamId, opening.version, [coalescingWindowOpened(key, jobId, now)]);
      await decideWithin(uow, jobDecider, jobId, enqueueJobCommand(request, { jobId, now, product: resolution }));
      return { jobId, outcome: 'created', status: 'QUEUED' };
    },
  );
  if (!executed.replayed) return executed.result;
  const job = await jobRow(within ?? store.pool, executed.result.jobId);
  return { jobId: executed.result.jobId, outcome: 'deduplicated', status: job?.status ?? executed.result.status };
}
