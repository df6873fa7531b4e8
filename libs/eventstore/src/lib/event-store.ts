import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { canonicalHash, ErrorCode, GantryError, ErrorPayloadSchema, type ErrorPayload } from '@gantry/contracts';
import { withTransaction } from './database.js';
import { applyToProjection, type Projection } from './projection.js';
import type {
  CommandMetadata,
  ExecuteResult,
  ExpectedVersion,
  IdempotencyOptions,
  NewEvent,
  StoredEvent,
} from './types.js';

export interface EventStoreOptions {
  pool: pg.Pool;
  /** Used for the relay's wake-up channel; the pool's search_path decides where tables are. */
  schema: string;
  /** Projections kept in the same transaction as the append. */
  inlineProjections?: Projection[];
  /** Attempts of a command that meets VERSION_CONFLICT (reload and decide again). */
  maxAttempts?: number;
  clock?: () => Date;
}

interface EventRow {
  position: string;
  event_id: string;
  stream_id: string;
  stream_version: number;
  type: string;
  schema_version: number;
  data: unknown;
  metadata: StoredEvent['metadata'];
  occurred_at: Date;
}

const EVENT_COLUMNS = 'position, event_id, stream_id, stream_version, type, schema_version, data, metadata, occurred_at';

export function toStoredEvent(row: EventRow): StoredEvent {
  return {
    position: Number(row.position),
    eventId: row.event_id,
    streamId: row.stream_id,
    streamVersion: row.stream_version,
    type: row.type,
    schemaVersion: row.schema_version,
    data: row.data,
    metadata: row.metadata,
    occurredAt: row.occurred_at.toISOString(),
  };
}

/** Channel the relay listens on; notified by every commit that appended events. */
export function outboxChannel(schema: string): string {
  return `gantry_outbox_${schema}`.slice(0, 63);
}

function isUniqueViolation(error: unknown, constraint?: string): boolean {
  const e = error as { code?: string; constraint?: string };
  return e?.code === '23505' && (constraint === undefined || e.constraint === constraint);
}

type Receipt = { ok: true; result: unknown } | { ok: false; error: ErrorPayload };

/** What a command handler gets: the open transaction and the log operations inside it. */
export class UnitOfWork {
  readonly appended: StoredEvent[] = [];

  constructor(
    readonly sql: pg.PoolClient,
    private readonly store: EventStore,
    readonly metadata: CommandMetadata,
    readonly idempotencyKey: string | null,
  ) {}

  readStream(streamId: string): Promise<StoredEvent[]> {
    return this.store.readStream(streamId, this.sql);
  }

  /**
   * Appends with the expected stream version. The unique (stream_id, stream_version) constraint is
   * the compare-and-set: a concurrent writer that got there first makes this throw VERSION_CONFLICT.
   */
  async append(streamId: string, expectedVersion: ExpectedVersion, events: NewEvent[], metadata?: Partial<CommandMetadata>): Promise<StoredEvent[]> {
    const stored = await this.store.appendWithin(this.sql, streamId, expectedVersion, events, {
      correlationId: metadata?.correlationId ?? this.metadata.correlationId,
      causationId: metadata?.causationId ?? this.metadata.causationId ?? null,
      actor: metadata?.actor ?? this.metadata.actor ?? null,
      idempotencyKey: this.idempotencyKey,
    });
    this.appended.push(...stored);
    return stored;
  }
}

export class EventStore {
  readonly pool: pg.Pool;
  readonly schema: string;
  private readonly inlineProjections: Projection[];
  private readonly maxAttempts: number;
  readonly clock: () => Date;

  constructor(options: EventStoreOptions) {
    this.pool = options.pool;
    this.schema = options.schema;
    this.inlineProjections = options.inlineProjections ?? [];
    this.maxAttempts = options.maxAttempts ?? 5;
    this.clock = options.clock ?? (() => new Date());
  }

  get projections(): readonly Projection[] {
    return this.inlineProjections;
  }

  async readStream(streamId: string, sql: pg.PoolClient | pg.Pool = this.pool): Promise<StoredEvent[]> {
    const { rows } = await sql.query<EventRow>(
      `SELECT ${EVENT_COLUMNS} FROM events WHERE stream_id = $1 ORDER BY stream_version`,
      [streamId],
    );
    return rows.map(toStoredEvent);
  }

  /** Committed events after a global position, in position order. */
  async readAll(afterPosition = 0, limit = 1000, sql: pg.PoolClient | pg.Pool = this.pool): Promise<StoredEvent[]> {
    const { rows } = await sql.query<EventRow>(
      `SELECT ${EVENT_COLUMNS} FROM events WHERE position > $1 ORDER BY position LIMIT $2`,
      [afterPosition, limit],
    );
    return rows.map(toStoredEvent);
  }

  async streamVersion(streamId: string, sql: pg.PoolClient | pg.Pool = this.pool): Promise<number> {
    const { rows } = await sql.query<{ v: number | null }>(
      `SELECT max(stream_version) AS v FROM events WHERE stream_id = $1`,
      [streamId],
    );
    return rows[0]?.v ?? 0;
  }

  /** One append in its own transaction. */
  async append(streamId: string, expectedVersion: ExpectedVersion, events: NewEvent[], metadata: CommandMetadata): Promise<StoredEvent[]> {
    return withTransaction(this.pool, (sql) =>
      this.appendWithin(sql, streamId, expectedVersion, events, { ...metadata, idempotencyKey: null }),
    );
  }

  /**
   * Appends inside the caller's transaction, in one round trip: the insert only happens when the
   * stream is at the expected version (no gaps, no read-then-write), its outbox rows go in with it,
   * and the relay is notified on commit. A concurrent writer at the same version makes the unique
   * (stream_id, stream_version) constraint fail, which aborts the transaction: a VERSION_CONFLICT
   * must end the transaction it happened in (execute() re-runs the command in a fresh one).
   */
  async appendWithin(
    sql: pg.PoolClient,
    streamId: string,
    expectedVersion: ExpectedVersion,
    events: NewEvent[],
    metadata: CommandMetadata & { idempotencyKey: string | null },
  ): Promise<StoredEvent[]> {
    if (events.length === 0) return [];
    const occurredAt = this.clock();
    const meta = JSON.stringify({
      correlationId: metadata.correlationId,
      causationId: metadata.causationId ?? null,
      idempotencyKey: metadata.idempotencyKey ?? null,
      actor: metadata.actor ?? null,
    });
    const ids: string[] = [];
    const types: string[] = [];
    const versions: number[] = [];
    const data: string[] = [];
    events.forEach((event, i) => {
      ids.push(event.eventId ?? randomUUID());
      types.push(event.type);
      versions.push(event.schemaVersion ?? 1);
      data.push(JSON.stringify(event.data ?? null));
    });
    let rows: Array<EventRow & { current: number }>;
    try {
      ({ rows } = await sql.query<EventRow & { current: number }>(
        `WITH current AS (
           SELECT coalesce(max(stream_version), 0) AS v FROM events WHERE stream_id = $1
         ), inserted AS (
           INSERT INTO events (event_id, stream_id, stream_version, type, schema_version, data, metadata, occurred_at)
           SELECT n.event_id, $1, current.v + n.ord, n.type, n.schema_version, n.data, $7::jsonb, $8
             FROM current, unnest($3::uuid[], $4::text[], $5::int[], $6::jsonb[]) WITH ORDINALITY
                  AS n(event_id, type, schema_version, data, ord)
            WHERE $2::int < 0 OR current.v = $2::int
           RETURNING ${EVENT_COLUMNS}
         ), queued AS (
           INSERT INTO outbox (position) SELECT position FROM inserted
         )
         SELECT inserted.*, current.v AS current, pg_notify($9, '') FROM inserted, current ORDER BY stream_version`,
        [streamId, expectedVersion === 'any' ? -1 : expectedVersion, ids, types, versions, data, meta, occurredAt, outboxChannel(this.schema)],
      ));
    } catch (error) {
      if (isUniqueViolation(error, 'events_stream_version_unique')) {
        throw new GantryError(ErrorCode.VERSION_CONFLICT, `stream ${streamId} was appended to concurrently`, {
          streamId,
          expectedVersion,
        });
      }
      throw error;
    }
    if (rows.length === 0) {
      const actual = await this.streamVersion(streamId, sql);
      throw new GantryError(ErrorCode.VERSION_CONFLICT, `stream ${streamId} is at version ${actual}, expected ${expectedVersion}`, {
        streamId,
        expectedVersion,
        actualVersion: actual,
      });
    }
    const stored = rows.map(toStoredEvent);
    for (const projection of this.inlineProjections) {
      for (const event of stored) {
        const outcome = await applyToProjection(sql, projection, event);
        if (outcome !== 'applied') {
          throw new Error(`inline projection ${projection.name} saw ${outcome} at ${event.streamId}@${event.streamVersion}`);
        }
      }
    }
    return stored;
  }

  /**
   * Runs a command in one transaction. With an idempotency key: the key, the request's hash and the
   * result are stored with the events (unique on scope + key). A repeat with the same request gets
   * the stored result (success or refusal) and writes nothing; a repeat with a different request is
   * IDEMPOTENCY_CONFLICT. Concurrent duplicates wait on the unique index and then read the winner's
   * receipt. VERSION_CONFLICT reruns the whole command against fresh state.
   */
  async execute<R>(
    options: { metadata: CommandMetadata; idempotency?: IdempotencyOptions },
    handler: (uow: UnitOfWork) => Promise<R>,
  ): Promise<ExecuteResult<R>> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.executeOnce(options, handler);
      } catch (error) {
        const retryable = error instanceof GantryError && error.code === ErrorCode.VERSION_CONFLICT;
        if (!retryable || attempt >= this.maxAttempts) throw error;
      }
    }
  }

  private async executeOnce<R>(
    options: { metadata: CommandMetadata; idempotency?: IdempotencyOptions },
    handler: (uow: UnitOfWork) => Promise<R>,
  ): Promise<ExecuteResult<R>> {
    const { idempotency } = options;
    const client = await this.pool.connect();
    let open = false;
    try {
      await client.query('BEGIN');
      open = true;
      const requestHash = idempotency ? canonicalHash(idempotency.request) : null;
      if (idempotency && requestHash) {
        const stored = await this.claimReceipt(client, idempotency, requestHash);
        if (stored) {
          await client.query('ROLLBACK');
          open = false;
          if (!stored.ok) throw GantryError.fromPayload(stored.error);
          return { result: stored.result as R, replayed: true, events: [] };
        }
        await client.query('SAVEPOINT gantry_command');
      }
      const uow = new UnitOfWork(client, this, options.metadata, idempotency?.key ?? null);
      let receipt: Receipt;
      let outcome: { result: R } | { error: GantryError };
      try {
        const result = await handler(uow);
        receipt = { ok: true, result: result ?? null };
        outcome = { result };
      } catch (error) {
        // A refusal is an answer: it is stored so that a retry gets the same one. Conflicts are not.
        const storable = idempotency && error instanceof GantryError && error.code !== ErrorCode.VERSION_CONFLICT;
        if (!storable) throw error;
        await client.query('ROLLBACK TO SAVEPOINT gantry_command');
        uow.appended.length = 0;
        receipt = { ok: false, error: error.toPayload() };
        outcome = { error };
      }
      if (idempotency) {
        await client.query(`UPDATE idempotency_receipts SET result = $3 WHERE scope = $1 AND key = $2`, [
          idempotency.scope,
          idempotency.key,
          JSON.stringify(receipt),
        ]);
      }
      await client.query('COMMIT');
      open = false;
      if ('error' in outcome) throw outcome.error;
      return { result: outcome.result, replayed: false, events: uow.appended };
    } finally {
      if (open) await client.query('ROLLBACK').catch(() => undefined);
      client.release();
    }
  }

  /** Returns the stored receipt of an earlier attempt, or null when this attempt now owns the key. */
  private async claimReceipt(client: pg.PoolClient, idempotency: IdempotencyOptions, requestHash: string): Promise<Receipt | null> {
    const expiresAt = idempotency.ttlMs ? new Date(this.clock().getTime() + idempotency.ttlMs) : null;
    for (;;) {
      const inserted = await client.query(
        `INSERT INTO idempotency_receipts (scope, key, request_hash, result, expires_at) VALUES ($1, $2, $3, NULL, $4)
         ON CONFLICT (scope, key) DO NOTHING RETURNING 1`,
        [idempotency.scope, idempotency.key, requestHash, expiresAt],
      );
      if (inserted.rowCount === 1) return null;
      const { rows } = await client.query<{ request_hash: string; result: Receipt | null; expires_at: Date | null }>(
        `SELECT request_hash, result, expires_at FROM idempotency_receipts WHERE scope = $1 AND key = $2`,
        [idempotency.scope, idempotency.key],
      );
      const existing = rows[0];
      if (!existing) continue; // removed between the two statements: try to claim it again
      if (existing.expires_at && existing.expires_at.getTime() <= this.clock().getTime()) {
        const taken = await client.query(
          `UPDATE idempotency_receipts SET request_hash = $3, result = NULL, expires_at = $4, created_at = now()
           WHERE scope = $1 AND key = $2 AND expires_at <= $5 RETURNING 1`,
          [idempotency.scope, idempotency.key, requestHash, expiresAt, this.clock()],
        );
        if (taken.rowCount === 1) return null;
        continue;
      }
      if (existing.request_hash !== requestHash) {
        throw new GantryError(
          ErrorCode.IDEMPOTENCY_CONFLICT,
          `idempotency key ${idempotency.key} was already used for a different request`,
          { scope: idempotency.scope, key: idempotency.key },
        );
      }
      if (existing.result === null) throw new Error('idempotency receipt committed without a result');
      if (!existing.result.ok) ErrorPayloadSchema.parse(existing.result.error);
      return existing.result;
    }
  }
}
