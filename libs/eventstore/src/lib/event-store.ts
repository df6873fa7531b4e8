import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { canonicalHash, ErrorCode, GantryError, ErrorPayloadSchema, type ErrorPayload } from '@gantry/contracts';
import { withTransaction } from './database.js';
import { applyToProjection, type Projection } from './projection.js';
import { DEFAULT_RECEIPT_TTL_MS } from './retention.js';
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
  /**
   * Let concurrent commands share a transaction: at most `maxGroups` transactions at once, each
   * with at most `maxBatch` commands. Off when absent.
   */
  groupCommit?: { maxGroups: number; maxBatch: number };
  /**
   * How long a receipt stored without a window of its own (`IdempotencyOptions.ttlMs`) answers a
   * repeat of its key; after that the pruning job may delete it. Default 7 days.
   */
  receiptTtlMs?: number;
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

type ExecuteOptions = { metadata: CommandMetadata; idempotency?: IdempotencyOptions };

/** How one command ended inside its transaction. */
type Outcome<R> =
  | { kind: 'done'; result: R; events: StoredEvent[] }
  | { kind: 'refused'; error: GantryError }
  | { kind: 'replayed'; receipt: Receipt };

interface GroupMember {
  options: ExecuteOptions;
  handler: (uow: UnitOfWork) => Promise<unknown>;
  resolve: (result: ExecuteResult<unknown>) => void;
  reject: (error: unknown) => void;
}

/** What the caller of execute() sees: the result, or the (stored) refusal thrown. */
function settle<R>(outcome: Outcome<R>): ExecuteResult<R> {
  switch (outcome.kind) {
    case 'done':
      return { result: outcome.result, replayed: false, events: outcome.events };
    case 'refused':
      throw outcome.error;
    case 'replayed':
      if (!outcome.receipt.ok) throw GantryError.fromPayload(outcome.receipt.error);
      return { result: outcome.receipt.result as R, replayed: true, events: [] };
  }
}

function settleMember(member: GroupMember, outcome: Outcome<unknown> | { kind: 'failed'; error: unknown }): void {
  if (outcome.kind === 'failed') return member.reject(outcome.error);
  try {
    member.resolve(settle(outcome));
  } catch (error) {
    member.reject(error);
  }
}

/** A conflict with a concurrent writer: deciding again on fresh state may well succeed. */
function isRetryable(error: unknown): boolean {
  if (error instanceof GantryError) return error.code === ErrorCode.VERSION_CONFLICT;
  const code = (error as { code?: string })?.code;
  return code === '40P01' || code === '40001'; // deadlock detected, serialization failure
}

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
  readonly receiptTtlMs: number;
  private readonly grouping: { maxGroups: number; maxBatch: number } | null;
  private readonly waiting: GroupMember[] = [];
  private groupsInFlight = 0;

  constructor(options: EventStoreOptions) {
    this.grouping = options.groupCommit ?? null;
    this.pool = options.pool;
    this.schema = options.schema;
    this.inlineProjections = options.inlineProjections ?? [];
    this.maxAttempts = options.maxAttempts ?? 5;
    this.receiptTtlMs = options.receiptTtlMs ?? DEFAULT_RECEIPT_TTL_MS;
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
    if (this.grouping) return this.submitToGroup(options, handler);
    for (let attempt = 1; ; attempt++) {
      try {
        return settle(await this.executeAlone(options, handler));
      } catch (error) {
        if (!isRetryable(error) || attempt >= this.maxAttempts) throw error;
      }
    }
  }

  /** One command, one transaction. */
  private async executeAlone<R>(options: ExecuteOptions, handler: (uow: UnitOfWork) => Promise<R>): Promise<Outcome<R>> {
    const client = await this.pool.connect();
    let broken = false;
    const onError = () => {
      broken = true; // reported through the failing query; the listener keeps it from crashing the process
    };
    client.on('error', onError);
    let open = false;
    try {
      await client.query('BEGIN');
      open = true;
      const outcome = await this.runCommand(client, options, handler);
      await client.query(outcome.kind === 'replayed' ? 'ROLLBACK' : 'COMMIT');
      open = false;
      return outcome;
    } finally {
      if (open) await client.query('ROLLBACK').catch(() => undefined);
      client.off('error', onError);
      client.release(broken ? true : undefined);
    }
  }

  /**
   * The command inside an open transaction: claim its receipt, run the handler, store the result.
   * Returns what the caller gets; throws only what must not be stored (conflicts, unexpected errors).
   */
  private async runCommand<R>(client: pg.PoolClient, options: ExecuteOptions, handler: (uow: UnitOfWork) => Promise<R>): Promise<Outcome<R>> {
    const { idempotency } = options;
    if (idempotency) {
      const stored = await this.claimReceipt(client, idempotency, canonicalHash(idempotency.request));
      if (stored) return { kind: 'replayed', receipt: stored };
      await client.query('SAVEPOINT gantry_command');
    }
    const uow = new UnitOfWork(client, this, options.metadata, idempotency?.key ?? null);
    let outcome: Outcome<R>;
    try {
      const result = await handler(uow);
      outcome = { kind: 'done', result, events: uow.appended };
    } catch (error) {
      // A refusal is an answer: it is stored so that a retry gets the same one. Conflicts are not.
      const storable = idempotency && error instanceof GantryError && !isRetryable(error);
      if (!storable) throw error;
      await client.query('ROLLBACK TO SAVEPOINT gantry_command');
      outcome = { kind: 'refused', error };
    }
    if (idempotency) {
      const receipt: Receipt = outcome.kind === 'done' ? { ok: true, result: outcome.result ?? null } : { ok: false, error: (outcome as { error: GantryError }).error.toPayload() };
      await client.query(`UPDATE idempotency_receipts SET result = $3 WHERE scope = $1 AND key = $2`, [
        idempotency.scope,
        idempotency.key,
        JSON.stringify(receipt),
      ]);
    }
    return outcome;
  }

  private submitToGroup<R>(options: ExecuteOptions, handler: (uow: UnitOfWork) => Promise<R>): Promise<ExecuteResult<R>> {
    return new Promise((resolve, reject) => {
      this.waiting.push({ options, handler, resolve: resolve as (r: ExecuteResult<unknown>) => void, reject });
      this.startGroups();
    });
  }

  /**
   * Group commit: while the allowed number of group transactions is busy, further commands wait
   * and then share one transaction (one commit), each inside its own savepoint with its own
   * receipt and its own expected-version checks. Under light load every command gets a group of
   * its own, so nothing waits for a batch to fill.
   */
  private startGroups(): void {
    while (this.groupsInFlight < this.grouping!.maxGroups && this.waiting.length > 0) {
      const members = this.waiting.splice(0, this.grouping!.maxBatch);
      this.groupsInFlight++;
      void this.runGroup(members).finally(() => {
        this.groupsInFlight--;
        this.startGroups();
      });
    }
  }

  private async runGroup(members: GroupMember[]): Promise<void> {
    const outcomes: Array<Outcome<unknown> | { kind: 'failed'; error: unknown }> = [];
    let client: pg.PoolClient | null = null;
    let broken: unknown = undefined;
    // A connection that dies while checked out reports through the query that fails; without a
    // listener its 'error' event would also crash the process.
    const onError = (error: unknown) => {
      broken = error;
    };
    try {
      client = await this.pool.connect();
      client.on('error', onError);
      await client.query('BEGIN');
      for (const member of members) {
        for (let attempt = 1; ; attempt++) {
          await client.query('SAVEPOINT gantry_member');
          try {
            const outcome = await this.runCommand(client, member.options, member.handler);
            // A replay wrote nothing of its own; undo its receipt look-up's locks as well.
            if (outcome.kind === 'replayed') await client.query('ROLLBACK TO SAVEPOINT gantry_member');
            await client.query('RELEASE SAVEPOINT gantry_member');
            outcomes.push(outcome);
            break;
          } catch (error) {
            await client.query('ROLLBACK TO SAVEPOINT gantry_member');
            await client.query('RELEASE SAVEPOINT gantry_member');
            if (isRetryable(error) && attempt < this.maxAttempts) continue;
            outcomes.push({ kind: 'failed', error });
            break;
          }
        }
      }
      await client.query('COMMIT');
    } catch (error) {
      // The group's transaction itself failed (connection lost, commit refused): none of its
      // writes is known to have landed, so every member that wrote gets the error to retry on.
      broken ??= error;
      await client?.query('ROLLBACK').catch(() => undefined);
      members.forEach((member, i) => {
        const outcome = outcomes[i];
        if (outcome?.kind === 'replayed') settleMember(member, outcome);
        else member.reject(error);
      });
      return;
    } finally {
      client?.off('error', onError);
      // A broken connection is discarded rather than handed to the next command.
      client?.release(broken ? true : undefined);
    }
    members.forEach((member, i) => settleMember(member, outcomes[i]!));
  }

  /** Returns the stored receipt of an earlier attempt, or null when this attempt now owns the key. */
  private async claimReceipt(client: pg.PoolClient, idempotency: IdempotencyOptions, requestHash: string): Promise<Receipt | null> {
    // Every receipt ends: its own window, or the store's default, after which pruning may delete it.
    const expiresAt = new Date(this.clock().getTime() + (idempotency.ttlMs ?? this.receiptTtlMs));
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
