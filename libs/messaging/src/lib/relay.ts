import pg from 'pg';
import { eventSubject, streamName, type Context, type EventEnvelope, type Naming } from '@gantry/contracts';
import { clientTimeouts, EVENT_COLUMNS, outboxChannel, toStoredEvent, type DatabaseTimeouts, type EventRow, type StoredEvent } from '@gantry/eventstore';
import { isNotFound, type Bus } from './bus.js';

export interface RelayLogger {
  log(message: string, fields: Record<string, unknown>): void;
  error(message: string, fields: Record<string, unknown>): void;
}

export interface RelayOptions {
  databaseUrl: string;
  pool: pg.Pool;
  schema: string;
  bus: Bus;
  context: Context;
  logger: RelayLogger;
  batchSize?: number;
  /** Fallback poll when no notification arrives (a notification can be lost on reconnect). */
  pollMs?: number;
  /**
   * How long the outbox rows of a batch short of full may stay after their publish was acknowledged
   * (default 100 ms): they are deleted in the message of the next read, the one the next commit wakes
   * the relay for, or one made for them when this has passed with no commit.
   */
  removeWithinMs?: number;
  /** How often a standby relay tries to become the active one. */
  standbyRetryMs?: number;
  /** Messages that follow from an event by itself, published with it (see Companion). */
  companions?: Companions;
  /**
   * Bounds of the relay's own connection against a PostgreSQL that stops answering (the service's,
   * DatabaseTimeouts). Without them a poll sent into a partition waits for an answer that never
   * comes, and the relay stays stuck on it after the database is back.
   */
  timeouts?: DatabaseTimeouts;
}

/**
 * A message published with the event it follows from, by the relay, to a JetStream stream: what the
 * event calls for that needs nothing but the event (the job offer an enqueue calls for). Its
 * `msgID` is its Nats-Msg-Id, one per message meant, so that a re-publish (after a crash, or with
 * the event's stream after a failed publish) is dropped by the server. The event's outbox row is
 * deleted only once its companions, too, are acknowledged: none is lost.
 */
export interface Companion {
  subject: string;
  payload: string;
  msgID: string;
}

/**
 * The companions of an event; none for most. One that throws is logged and the event goes out
 * without companions (its envelope says none went), so a consumer that would send them does, as for
 * an event a relay without companions published: the event's stream is not held up.
 */
export type Companions = (event: StoredEvent, naming: Naming) => readonly Companion[];

/**
 * The oldest `$1` events waiting in the outbox. The outbox's positions are taken first and the
 * events looked up by them: written as a join, PostgreSQL may merge the two primary keys and walk
 * the events from the start of the log up to the oldest waiting one, on every batch — a cost that
 * grows with the log, and that a busy outbox (many deleted rows, statistics behind) invites.
 */
export const OUTBOX_BATCH_QUERY = `SELECT ${EVENT_COLUMNS} FROM events
  WHERE position = ANY (ARRAY(SELECT position FROM outbox ORDER BY position LIMIT $1))
  ORDER BY position`;

/** What waits in the outbox and, by the database's clock, how long its oldest event has waited (ms). */
export const OUTBOX_BACKLOG_QUERY = `SELECT (SELECT count(*) FROM outbox) AS pending,
  (SELECT extract(epoch FROM now() - recorded_at) * 1000 FROM events WHERE position = (SELECT min(position) FROM outbox)) AS age_ms`;

export function toEnvelope(event: StoredEvent): EventEnvelope {
  return {
    eventId: event.eventId,
    type: event.type,
    schemaVersion: event.schemaVersion,
    streamId: event.streamId,
    streamVersion: event.streamVersion,
    position: event.position,
    occurredAt: event.occurredAt,
    correlationId: event.metadata.correlationId,
    causationId: event.metadata.causationId,
    idempotencyKey: event.metadata.idempotencyKey,
    actor: event.metadata.actor,
    data: event.data,
  };
}

/**
 * Publishes committed events to the context's JetStream stream, oldest first, with
 * `Nats-Msg-Id` = event id so a re-publish after a crash is dropped by the server.
 *
 * Why an outbox and not a position checkpoint: positions are taken at insert, commits happen
 * later and in any order, so "everything above the last published position" would skip an event
 * whose transaction committed after a later-positioned one. The outbox row of such an event simply
 * becomes visible when it commits, and is published then. One relay per schema is active (an
 * advisory lock); the others stand by, so events of one stream are never published out of order.
 */
export class OutboxRelay {
  private client: pg.Client | null = null;
  private running = false;
  private wake: (() => void) | null = null;
  private notified = false;
  private loop: Promise<void> | null = null;
  private leader = false;
  private published = 0;
  private notifying = false;
  private notifyAgain = false;
  private standbyTurns = 0;
  /** Positions published and acknowledged whose outbox rows are still to be deleted (see readBatch). */
  private toRemove: number[] = [];

  constructor(private readonly options: RelayOptions) {}

  get isLeader(): boolean {
    return this.leader;
  }

  get publishedCount(): number {
    return this.published;
  }

  /** How many times this relay tried to become the active one and found another active. */
  get timesStoodBy(): number {
    return this.standbyTurns;
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    this.loop = this.run();
  }

  /**
   * This process appended events (EventStore.onAppended). The active relay looks at once; a
   * standby tells the active one elsewhere with a NOTIFY of its own — outside the appending
   * transaction, so no commit waits on PostgreSQL's notify lock, and at most one in flight (a
   * notification only says "look"). A lost notification costs at most one poll interval.
   */
  appended(): void {
    if (this.leader) {
      this.notified = true;
      this.wake?.();
      return;
    }
    if (this.notifying) {
      this.notifyAgain = true;
      return;
    }
    this.notifying = true;
    this.options.pool
      .query(`SELECT pg_notify($1, '')`, [outboxChannel(this.options.schema)])
      .catch(() => undefined)
      .finally(() => {
        this.notifying = false;
        if (this.notifyAgain) {
          this.notifyAgain = false;
          this.appended();
        }
      });
  }

  /** Events committed but not yet acknowledged by JetStream. */
  async pending(): Promise<number> {
    const { rows } = await this.options.pool.query<{ n: string }>('SELECT count(*) AS n FROM outbox');
    return Number(rows[0]?.n ?? 0);
  }

  /**
   * How long the oldest committed event has waited for JetStream (0 when nothing waits), by the
   * database's clock. The outbox is shared by every replica's relay, so each replica sees the same.
   */
  async backlog(): Promise<{ pending: number; oldestAgeMs: number }> {
    const { rows } = await this.options.pool.query<{ pending: string; age_ms: string | null }>(OUTBOX_BACKLOG_QUERY);
    return { pending: Number(rows[0]?.pending ?? 0), oldestAgeMs: Math.max(0, Math.round(Number(rows[0]?.age_ms ?? 0))) };
  }

  async stop(): Promise<void> {
    this.running = false;
    this.wake?.();
    await this.loop;
    this.loop = null;
  }

  private async run(): Promise<void> {
    while (this.running) {
      try {
        await this.connect();
        if (!(await this.tryLead())) {
          this.standbyTurns++;
          await this.sleep(this.options.standbyRetryMs ?? 2000);
          continue;
        }
        while (this.running) {
          const moved = await this.drainOnce();
          // A batch short of full took everything committed when it was read; what committed since
          // has woken the relay (`notified`), so only then is the outbox read again at once. Its rows
          // are deleted with the next read, not in a round trip of their own: under a stream of
          // commits that read comes within milliseconds, and when none comes it is made for them.
          if (moved < this.batchSize && !this.notified) {
            const pollMs = this.options.pollMs ?? 1000;
            await this.sleep(this.toRemove.length > 0 ? Math.min(pollMs, this.options.removeWithinMs ?? 100) : pollMs);
          }
        }
        await this.removePublished();
      } catch (error) {
        this.options.logger.error('relay failed; retrying', { schema: this.options.schema, error: String(error) });
        await this.disconnect();
        await this.sleep(500);
      }
    }
    await this.disconnect();
  }

  private async connect(): Promise<void> {
    if (this.client) return;
    const client = new pg.Client({
      connectionString: this.options.databaseUrl,
      application_name: `gantry-relay-${this.options.schema}`,
      ...(this.options.timeouts ? clientTimeouts(this.options.timeouts) : {}),
    });
    client.on('error', () => undefined);
    client.on('notification', () => {
      this.notified = true;
      this.wake?.();
    });
    await client.connect();
    await client.query(`SET search_path TO ${this.options.schema}, public`);
    await client.query(`LISTEN "${outboxChannel(this.options.schema)}"`);
    this.client = client;
  }

  private async tryLead(): Promise<boolean> {
    if (this.leader) return true;
    const { rows } = await this.client!.query<{ ok: boolean }>(
      `SELECT pg_try_advisory_lock(hashtext('gantry.relay.' || $1)) AS ok`,
      [this.options.schema],
    );
    this.leader = rows[0]?.ok === true;
    if (this.leader) this.options.logger.log('relay is active', { schema: this.options.schema });
    return this.leader;
  }

  /**
   * Publishes one batch; returns how many events it moved. Streams are published side by side, but
   * within a stream each event waits for the acknowledgement of the one before it: when a publish
   * fails, nothing after it in its stream has gone out, so the next round sends them in order again.
   */
  async drainOnce(): Promise<number> {
    this.notified = false;
    const rows = await this.readBatch();
    if (rows.length === 0) return 0;
    const byStream = new Map<string, StoredEvent[]>();
    for (const event of rows.map(toStoredEvent)) {
      const events = byStream.get(event.streamId) ?? [];
      events.push(event);
      byStream.set(event.streamId, events);
    }
    const published: number[] = [];
    const failures: unknown[] = [];
    await Promise.all(
      [...byStream.values()].map(async (events) => {
        for (const event of events) {
          try {
            await this.publish(event);
          } catch (error) {
            failures.push(error);
            return;
          }
          published.push(event.position);
        }
      }),
    );
    this.toRemove.push(...published);
    this.published += published.length;
    if (failures.length > 0) {
      await this.removePublished();
      await this.restoreStream();
      throw failures[0];
    }
    return published.length;
  }

  private get batchSize(): number {
    return this.options.batchSize ?? 500;
  }

  /**
   * The next batch; the rows of the batch published before it are deleted in the same message, so
   * a relay makes one round trip per batch, whether it keeps finding work or is woken for each commit. (A message of two statements
   * takes the simple protocol, so the values are written in: integers only.) Published rows left in
   * the outbox by a crash are published again, and the duplicate window drops them.
   */
  private async readBatch(): Promise<EventRow[]> {
    const client = this.client!;
    if (this.toRemove.length === 0) return (await client.query<EventRow>(OUTBOX_BATCH_QUERY, [this.batchSize])).rows;
    const positions = this.toRemove.map((p) => Math.trunc(p)).join(',');
    const batch = OUTBOX_BATCH_QUERY.replace('$1', String(Math.trunc(this.batchSize)));
    const results = (await client.query(`DELETE FROM outbox WHERE position IN (${positions});\n${batch}`)) as unknown as pg.QueryResult<EventRow>[];
    this.toRemove = [];
    return results[1]!.rows;
  }

  /** Deletes the outbox rows of what JetStream has acknowledged (see readBatch). */
  private async removePublished(): Promise<void> {
    if (this.toRemove.length === 0) return;
    await this.client!.query('DELETE FROM outbox WHERE position = ANY($1::bigint[])', [this.toRemove]);
    this.toRemove = [];
  }

  /**
   * After a failed publish: the context's stream created again if it is gone (deleted by an operator,
   * or the server started again on an empty store), else no publish would ever succeed until the
   * service restarts. What it held before is not brought back (docs/operations.md, "JetStream state lost").
   */
  private async restoreStream(): Promise<void> {
    const { bus, context } = this.options;
    const stream = streamName(bus.naming, context);
    try {
      const missing = await bus.jsm.streams.info(stream).then(
        () => false,
        (error: unknown) => {
          if (isNotFound(error)) return true;
          throw error;
        },
      );
      if (!missing) return;
      this.options.logger.error('the event stream is gone; creating it again', { schema: this.options.schema, stream });
      await bus.ensureForeignEventStream(context);
    } catch (error) {
      this.options.logger.error('the event stream could not be looked at', { schema: this.options.schema, stream, error: String(error) });
    }
  }

  /**
   * The event and its companions, side by side (its envelope says how many went with it); settles
   * when JetStream has all of them.
   */
  private publish(event: StoredEvent): Promise<unknown> {
    const { bus, context } = this.options;
    const following = this.companionsOf(event);
    const envelope = following.length > 0 ? { ...toEnvelope(event), companions: following.length } : toEnvelope(event);
    const published = bus.js.publish(eventSubject(bus.naming, context, event.type, event.streamId), JSON.stringify(envelope), { msgID: event.eventId });
    if (following.length === 0) return published;
    return Promise.all([published, ...following.map((c) => bus.js.publish(c.subject, c.payload, { msgID: c.msgID }))]);
  }

  private companionsOf(event: StoredEvent): readonly Companion[] {
    try {
      return this.options.companions?.(event, this.options.bus.naming) ?? [];
    } catch (error) {
      this.options.logger.error('could not make the companions of an event; publishing it without them', {
        schema: this.options.schema,
        eventId: event.eventId,
        type: event.type,
        error: String(error),
      });
      return [];
    }
  }

  private sleep(ms: number): Promise<void> {
    if (this.notified || !this.running) {
      this.notified = false;
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.wake = null;
        resolve();
      }, ms);
      this.wake = () => {
        clearTimeout(timer);
        this.wake = null;
        resolve();
      };
    });
  }

  private async disconnect(): Promise<void> {
    const client = this.client;
    this.client = null;
    this.leader = false;
    if (!client) return;
    await client.query(`SELECT pg_advisory_unlock_all()`).catch(() => undefined);
    await client.end().catch(() => undefined);
  }
}
