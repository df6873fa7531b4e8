import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { eventSubject, type Context, type Naming } from '@gantry/contracts';
import type { JetStreamManager } from '@nats-io/jetstream';
import { eventually } from './index.js';

/*
 * "Nothing else happened" needs the thing that would have made it happen to be over — not a sleep.
 * A durable consumer writes its inbox row in the transaction of its handler's writes and acknowledges
 * the message after that commit, so either sign says the event's effects are all visible.
 */

/** An event's id, by its stream and type (the first of that type, or the `nth`). */
export async function eventIdOf(db: pg.Pool, streamId: string, type: string, nth = 1): Promise<string> {
  const { rows } = await db.query<{ event_id: string }>(
    `SELECT event_id FROM events WHERE stream_id = $1 AND type = $2 ORDER BY stream_version OFFSET $3 LIMIT 1`,
    [streamId, type, nth - 1],
  );
  if (!rows[0]) throw new Error(`no event ${type} #${nth} in stream ${streamId}`);
  return rows[0].event_id;
}

/** Waits until `consumer` has handled the event: its inbox row (and so everything the handler wrote) is committed. */
export async function handledByConsumer(db: pg.Pool, consumer: string, eventId: string, options: { timeoutMs?: number } = {}): Promise<void> {
  await eventually(
    async () => (await db.query(`SELECT 1 FROM inbox WHERE consumer = $1 AND event_id = $2`, [consumer, eventId])).rowCount === 1,
    { what: `${consumer} to handle event ${eventId}`, timeoutMs: options.timeoutMs ?? 30_000 },
  );
}

/**
 * Waits until the relay has published the event, with its companions: JetStream acknowledged them
 * all before the event's outbox row went.
 */
export async function relayed(db: pg.Pool, eventId: string, options: { timeoutMs?: number } = {}): Promise<void> {
  await eventually(
    async () => (await db.query(`SELECT 1 FROM outbox o JOIN events e ON e.position = o.position WHERE e.event_id = $1`, [eventId])).rowCount === 0,
    { what: `the relay to publish event ${eventId}`, timeoutMs: options.timeoutMs ?? 30_000 },
  );
}

/**
 * Waits until `consumer` has acknowledged its stream up to `upTo` (a stream sequence; by default the
 * stream's last message now) — also events of types it takes no transaction for.
 */
export async function consumerCaughtUp(jsm: JetStreamManager, stream: string, consumer: string, options: { upTo?: number; timeoutMs?: number } = {}): Promise<void> {
  const upTo = options.upTo ?? (await jsm.streams.info(stream)).state.last_seq;
  await eventually(
    async () => {
      const info = await jsm.consumers.info(stream, consumer).catch(() => null);
      return info !== null && info.ack_floor.stream_seq >= upTo;
    },
    { what: `${consumer} to acknowledge ${stream} up to ${upTo}`, timeoutMs: options.timeoutMs ?? 30_000 },
  );
}

/**
 * Puts an event on its stream again `copies` times at once, each under a message id of its own, so
 * that the server keeps every copy (its duplicate window drops only a repeated Nats-Msg-Id): the same
 * event delivered again, as after an acknowledgement that was lost, or to two replicas at once.
 * Resolves with the stream sequence of the last copy, to wait on with consumerCaughtUp.
 */
export async function deliverAgain(
  js: { publish(subject: string, payload: string, options: { msgID: string }): Promise<{ seq: number }> },
  naming: Naming,
  source: Context,
  envelope: { eventId: string; type: string; streamId: string },
  copies = 1,
): Promise<number> {
  const subject = eventSubject(naming, source, envelope.type, envelope.streamId);
  const acks = await Promise.all(
    Array.from({ length: copies }, (_, i) => js.publish(subject, JSON.stringify(envelope), { msgID: `${envelope.eventId}:again:${randomUUID()}:${i}` })),
  );
  return Math.max(...acks.map((ack) => ack.seq));
}
