import 'reflect-metadata';
import { randomUUID } from 'node:crypto';
import type { INestApplication } from '@nestjs/common';
import type { z } from 'zod';
import { enqueueJob, eventSubject, finishJob, getJob, logCommit, logImplementation, logTestResult, registerProduct, reportPush, startJob, type EventEnvelope, type ProductSettings } from '@gantry/contracts';
import { EVENT_COLUMNS, toStoredEvent, type EventRow } from '@gantry/eventstore';
import { toEnvelope, type CommandClient } from '@gantry/messaging';
import { createTestWorld, startInProcess as startModule, type TestWorld } from '@gantry/service-runtime/testing';
import { refuseAppends } from '@gantry/testing';
import { AppModule } from '../src/app.module.js';

export type { TestWorld };

/** One test file's world: its schema, its subject root and stream prefix, a client and a SQL pool. */
export const createWorld = (label: string): Promise<TestWorld> => createTestWorld(label);

/** The job service in this process, on the world's schema and naming. */
export const startInProcess = (world: TestWorld, env: Record<string, string> = {}): Promise<INestApplication> => startModule(AppModule, world, env);

export const key = (label: string) => `test/${label}:${randomUUID()}`;
export const sha = (c: string) => c.repeat(40).slice(0, 40);

type EnqueueRequest = z.input<(typeof enqueueJob)['request']>;

/** An enqueue of a TASK_IMPLEMENTATION job of `productId` under a fresh key; `over` changes any field. */
export const taskEnqueueRequest = (productId: string, over: Partial<EnqueueRequest> = {}): EnqueueRequest => ({
  kind: 'TASK_IMPLEMENTATION',
  productId,
  storyId: 'ST-1',
  taskId: `T-${randomUUID().slice(0, 6)}`,
  prompt: 'Implement it',
  payload: { plan: 'do it' },
  baseRef: 'feat/story-1',
  idempotencyKey: key('enqueue'),
  ...over,
});

/** A claimed job started, its story log written (one commit, `commitSha`), the commit pushed to the job's branch and finished DONE, as a runner does. */
export async function finishClaimedDone(client: CommandClient, lease: { jobId: string; runnerId: string; leaseToken: number }, commitSha = sha('a')) {
  await client.request(startJob, { ...lease, idempotencyKey: key('start') });
  await client.request(logImplementation, { ...lease, summary: 'start', idempotencyKey: key('log') });
  await client.request(logCommit, { ...lease, commitSha, message: 'feat', summary: 'one file', idempotencyKey: key('log') });
  await client.request(logTestResult, { ...lease, status: 'PASSED', summary: 'green', idempotencyKey: key('log') });
  const { branch } = await client.request(getJob, { jobId: lease.jobId });
  await client.request(reportPush, { ...lease, branch: branch ?? 'feat/work', headSha: commitSha, pushed: true, idempotencyKey: key('push') });
  return client.request(finishJob, {
    ...lease,
    idempotencyKey: key('finish'),
    facts: {
      verifyResult: 'ALIGNED', newCommit: true, netDiff: { filesChanged: 1, insertions: 3, deletions: 0 },
      workAlreadyOnTarget: false, diffIdenticalToMergedBranch: false, failure: null, cancelled: false, headSha: commitSha,
    },
  });
}

/** Registers each product (once: the key is the product's, so a repeat replays), on a repository of its own name. */
export async function registerProducts(client: CommandClient, productIds: string[], settings: Partial<ProductSettings> = {}): Promise<void> {
  for (const productId of productIds) {
    await client.request(registerProduct, {
      productId,
      repository: `acme/${productId}`,
      cloneUrl: `https://github.com/acme/${productId}.git`,
      targetBranch: 'main',
      prStrategy: 'STORY',
      mergeMethod: 'SQUASH',
      requiredChecks: [],
      ...settings,
      idempotencyKey: `${productId}/register:test`,
    });
  }
}

/**
 * Publishes a job's JobEnqueued event again as a relay of a version before companions did: its
 * envelope without `companions` (the offer did not go with it), under a message id of its own so
 * that the stream takes it. Returns the event's id.
 */
export async function publishEnqueueWithoutItsOffer(world: TestWorld, jobId: string): Promise<string> {
  const event = await envelopeOf(world, jobId, 'JobEnqueued');
  await world.bus.js.publish(eventSubject(world.naming, 'jobs', event.type, event.streamId), JSON.stringify(event), { msgID: `${event.eventId}:earlier-relay` });
  return event.eventId;
}

/** The first event of `type` in `streamId` as the relay publishes it (its envelope, without companions). */
export async function envelopeOf(world: TestWorld, streamId: string, type: string): Promise<EventEnvelope> {
  const { rows } = await world.db.query<EventRow>(`SELECT ${EVENT_COLUMNS} FROM events WHERE stream_id = $1 AND type = $2 ORDER BY stream_version LIMIT 1`, [streamId, type]);
  if (!rows[0]) throw new Error(`no event ${type} in stream ${streamId}`);
  return toEnvelope(toStoredEvent(rows[0]));
}

/**
 * Runs `statement` in a transaction that is rolled back, and counts the rows it read from the jobs
 * view and its indexes, as PostgreSQL counts them for the transaction (also inside a function,
 * whose plan EXPLAIN does not show).
 */
export async function readingJobsView<R extends object>(world: TestWorld, statement: { text: string; values: unknown[] }): Promise<{ rows: R[]; read: number }> {
  const client = await world.db.connect();
  try {
    await client.query('BEGIN');
    const { rows } = await client.query<R>(statement.text, statement.values);
    const counted = await client.query<{ read: number }>(
      `SELECT sum(pg_stat_get_xact_tuples_returned(c.oid))::int AS read FROM pg_class c
        WHERE c.oid = 'jobs'::regclass OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = 'jobs'::regclass)`,
    );
    return { rows, read: counted.rows[0]!.read };
  } finally {
    await client.query('ROLLBACK');
    client.release();
  }
}

/**
 * Makes the database refuse every JobLeaseExpired of `jobId` (an operator's trigger on the log), as a
 * lease whose expiry cannot be written; returns the call that lets it through again.
 */
export function refuseLeaseExpiry(world: TestWorld, jobId: string): Promise<() => Promise<void>> {
  return refuseAppends(world.db, jobId, 'JobLeaseExpired');
}
