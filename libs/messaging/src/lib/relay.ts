import pg from 'pg';
import { eventSubject, type Context, type EventEnvelope } from '@gantry/contracts';
import { EVENT_COLUMNS, outboxChannel, toStoredEvent, type StoredEvent } from '@gantry/eventstore';
import type { Bus } from './bus.js';

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
  /** How often a standby relay tries to become the active one. */
  standbyRetryMs?: number;
}

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
          if (moved === 0) await this.sleep(this.options.pollMs ?? 1000);
        }
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
    const client = new pg.Client({ connectionString: this.options.databaseUrl, application_name: `gantry-relay-${this.options.schema}` });
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
    const client = this.client!;
    this.notified = false;
    const { rows } = await client.query(OUTBOX_BATCH_QUERY, [this.options.batchSize ?? 500]);
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
    if (published.length > 0) {
      await client.query('DELETE FROM outbox WHERE position = ANY($1::bigint[])', [published]);
      this.published += published.length;
    }
    if (failures.length > 0) throw failures[0];
    return published.length;
  }

  private publish(event: StoredEvent): Promise<unknown> {
    const { bus, context } = this.options;
    return bus.js.publish(eventSubject(bus.naming, context, event.type, event.streamId), JSON.stringify(toEnvelope(event)), {
      msgID: event.eventId,
    });
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
