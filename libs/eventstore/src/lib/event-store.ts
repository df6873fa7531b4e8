import type pg from 'pg';
import { commit, withTransaction } from './database.js';
import { appendEvents, EVENT_COLUMNS, readStreamEvents, readStreamsEvents, readStreamTail, streamReadStatement, streamVersionOf, toStoredEvent, type EventRow } from './append.js';
import { DeferredWrites, type SqlWriter } from './deferred-writes.js';
import { GroupCommit, type GroupCommitLimits } from './group-commit.js';
import type { Projection } from './projection.js';
import { DEFAULT_RECEIPT_TTL_MS } from './retention.js';
import { canonicalHash, GantryError, scrubSecrets, type SecretScrubber } from '@gantry/contracts';
import { answeredUnder, claimReceipt, storedResult, storeReceiptAndCommit, storeRefusal, type Alongside } from './receipts.js';
import { isRetryable, runCommand, settle, UnitOfWork, type ExecuteOptions, type Outcome, type StreamWork } from './unit-of-work.js';
import { decideWithin, type DomainEvent } from './decider.js';
import { PreparedStatements } from './prepared.js';
import { storableScrubber } from './storable-text.js';
import { CommandBatcher, type WrittenBatch } from './batching.js';
import { ConflictRetries, DEFAULT_CONFLICT_PATIENCE, StreamTurns, type ConflictPatience } from './conflict-patience.js';
import { executeInOneMessage, FULL_PATH, type DecisionSpec, type OneMessageContext } from './one-message.js';
import type { CommandMetadata, ExecuteResult, ExpectedVersion, IdempotencyOptions, NewEvent, StoredEvent } from './types.js';

// The pieces of the log, each in its own file: append.ts (the compare-and-set append with its
// outbox rows and inline projections), receipts.ts (idempotency), unit-of-work.ts (one command in
// an open transaction), group-commit.ts (commands sharing a transaction). This class puts them together.
export { EVENT_COLUMNS, outboxChannel, toStoredEvent, type EventRow } from './append.js';
export type { WrittenBatch } from './batching.js';
export { DEFAULT_CONFLICT_PATIENCE, type ConflictPatience } from './conflict-patience.js';
export { UnitOfWork, type StreamWork };

export interface EventStoreOptions {
  pool: pg.Pool;
  /** Used for the relay's wake-up channel; the pool's search_path decides where tables are. */
  schema: string;
  /** Projections kept in the same transaction as the append. */
  inlineProjections?: Projection[];
  /**
   * How long a command of its own (execute, executeInOneMessage, decide) decides again on fresh
   * state after its append met another writer's, before it is answered VERSION_CONFLICT
   * (docs/architecture.md, "When a stream stays busy"). Default DEFAULT_CONFLICT_PATIENCE.
   */
  conflictPatience?: Partial<ConflictPatience>;
  /**
   * Attempts of a command inside a transaction it does not own (executeWithin: a consumer's, whose
   * event comes again; group commit), which a pause would hold open. Default 8.
   */
  maxAttempts?: number;
  /**
   * The largest event the bus carries (its max_payload): an append whose event would be larger is
   * refused INVALID_COMMAND, nothing written (docs/architecture.md, "Answers too large for the bus").
   * No limit when absent.
   */
  maxEventBytes?: number;
  /** Let concurrent commands share a transaction (see GroupCommit). Off when absent. */
  groupCommit?: GroupCommitLimits;
  /**
   * How long a receipt stored without a window of its own (`IdempotencyOptions.ttlMs`) answers a
   * repeat of its key; after that the pruning job may delete it. Default 7 days.
   */
  receiptTtlMs?: number;
  clock?: () => Date;
  /**
   * Masks secrets in every string an event carries before it is written: credentials by their shape,
   * and the values this process knows to be secret (`secretScrubber(secretValuesIn(env))`). Default:
   * by shape only. Free text from outside (an agent's stderr in a reason, an error message) enters
   * events through here (docs/configuration.md, "Secrets in events").
   */
  scrub?: SecretScrubber;
}

/** A service's event log in its own schema: reads, appends, and commands as transactions. */
export class EventStore {
  readonly pool: pg.Pool;
  readonly schema: string;
  readonly clock: () => Date;
  readonly receiptTtlMs: number;
  private readonly inlineProjections: Projection[];
  private readonly maxAttempts: number;
  private readonly conflictPatience: ConflictPatience;
  /** Turns on the streams this process's commands met conflicts on (shared with the one-message path). */
  private readonly turns = new StreamTurns();
  private readonly grouping: GroupCommit | null;
  /** What decide() hands the one-message path. */
  private readonly oneMessage: OneMessageContext;
  /** Masks secrets in what is written: every string of each event's data, and stored refusals. */
  readonly scrub: SecretScrubber;
  private readonly maxEventBytes: number | undefined;
  private readonly appendedListeners: Array<() => void> = [];
  private readonly batchListeners: Array<(batch: WrittenBatch) => void> = [];
  /** Connections that appended in their current transaction: released means committed (or rolled back). */
  private readonly appending = new WeakSet<pg.PoolClient>();

  constructor(options: EventStoreOptions) {
    this.pool = options.pool;
    this.schema = options.schema;
    this.inlineProjections = options.inlineProjections ?? [];
    this.maxAttempts = options.maxAttempts ?? 8;
    this.conflictPatience = { ...DEFAULT_CONFLICT_PATIENCE, ...options.conflictPatience };
    this.maxEventBytes = options.maxEventBytes;
    this.receiptTtlMs = options.receiptTtlMs ?? DEFAULT_RECEIPT_TTL_MS;
    this.clock = options.clock ?? (() => new Date());
    // Every string an event or a stored refusal carries goes through here: also made storable (a NUL character).
    this.scrub = storableScrubber(options.scrub ?? scrubSecrets);
    this.grouping = options.groupCommit ? new GroupCommit(this, options.groupCommit, this.maxAttempts) : null;
    this.oneMessage = {
      pool: this.pool,
      now: () => this.clock(),
      receiptTtlMs: this.receiptTtlMs,
      scrub: this.scrub,
      maxEventBytes: options.maxEventBytes,
      projections: this.inlineProjections,
      conflictPatience: this.conflictPatience,
      turns: this.turns,
      refuse: async (idempotency, error) => settle(await this.refusal(idempotency, error)),
      batcher: new CommandBatcher(
        this.pool,
        new PreparedStatements(),
        (client) => this.appending.add(client),
        (batch) => {
          for (const listener of this.batchListeners) listener(batch);
        },
      ),
    };
    this.pool.on('release', (_error: unknown, client: pg.PoolClient) => {
      if (!this.appending.delete(client)) return;
      for (const listener of this.appendedListeners) listener();
    });
  }

  /**
   * Called after a transaction that appended has ended (committed — or rolled back, which makes
   * the call a harmless extra wake-up): how the relay learns there is something to publish.
   */
  onAppended(listener: () => void): void {
    this.appendedListeners.push(listener);
  }

  /**
   * Called after each write message of commands decided without a transaction (executeInOneMessage),
   * with how many commands it carried and how long they waited for PostgreSQL to commit it: the
   * service's metrics (docs/operations.md, "Metrics"). A listener must be quick and must not throw.
   */
  onBatchWritten(listener: (batch: WrittenBatch) => void): void {
    this.batchListeners.push(listener);
  }

  /**
   * Whether this process's commands decide on the streams they remember, unread: true while no other
   * writer moves those streams on (see CommandBatcher.memoryTrusted) — false once another replica
   * writes the same streams, and always false with group commit, where every command reads. What
   * this process remembers of the log is then as good as a read of it.
   */
  get decidesOnMemory(): boolean {
    return this.grouping === null && this.oneMessage.batcher.memoryTrusted;
  }

  get projections(): readonly Projection[] {
    return this.inlineProjections;
  }

  /**
   * A stream's events as `sql` (a transaction's connection, or the pool) sees them. A stream this
   * process read or wrote before is read from where it knew it (CommandBatcher.readOn): the later
   * events and the last one known, not the whole stream, whose earlier events come as the same
   * objects, so that a fold over them starts where the last one ended (docs/architecture.md, "A
   * stream read from where this process knew it, in a transaction too").
   */
  readStream(streamId: string, sql: pg.PoolClient | pg.Pool = this.pool): Promise<StoredEvent[]> {
    return this.oneMessage.batcher.readOn(sql, streamId, this.seesOnlyCommitted(sql));
  }

  /**
   * Whether what `sql` reads of the log is committed: the pool, or a connection whose transaction
   * has appended nothing (no append in flight either: an append marks its connection once its insert
   * is answered, and a read on the same connection waits for that answer).
   */
  private seesOnlyCommitted(sql: pg.PoolClient | pg.Pool): boolean {
    return !this.appending.has(sql as pg.PoolClient);
  }

  /** Several streams in one read: each one's events in order, by stream id (a stream with no events is absent). */
  readStreams(streamIds: readonly string[], sql: pg.PoolClient | pg.Pool = this.pool): Promise<Map<string, StoredEvent[]>> {
    return readStreamsEvents(sql, streamIds);
  }

  /** The last `count` events of a stream, oldest first, with the stream's version (for streams read from their recent end). */
  readStreamTail(streamId: string, count: number, sql: pg.PoolClient | pg.Pool = this.pool): Promise<{ version: number; events: StoredEvent[] }> {
    return readStreamTail(sql, streamId, count);
  }

  /** Committed events after a global position, in position order. */
  async readAll(afterPosition = 0, limit = 1000, sql: pg.PoolClient | pg.Pool = this.pool): Promise<StoredEvent[]> {
    const { rows } = await sql.query<EventRow>(`SELECT ${EVENT_COLUMNS} FROM events WHERE position > $1 ORDER BY position LIMIT $2`, [
      afterPosition,
      limit,
    ]);
    return rows.map(toStoredEvent);
  }

  streamVersion(streamId: string, sql: pg.PoolClient | pg.Pool = this.pool): Promise<number> {
    return streamVersionOf(sql, streamId);
  }

  /** One append in its own transaction. */
  async append(streamId: string, expectedVersion: ExpectedVersion, events: NewEvent[], metadata: CommandMetadata): Promise<StoredEvent[]> {
    return withTransaction(this.pool, (sql) => this.appendWithin(sql, streamId, expectedVersion, events, { ...metadata, idempotencyKey: null }));
  }

  /** Appends inside the caller's transaction (see appendEvents). */
  appendWithin(
    sql: pg.PoolClient,
    streamId: string,
    expectedVersion: ExpectedVersion,
    events: NewEvent[],
    metadata: CommandMetadata & { idempotencyKey: string | null },
    history?: StoredEvent[],
    writer?: SqlWriter,
  ): Promise<StoredEvent[]> {
    const context = { projections: this.inlineProjections, now: this.clock(), scrub: this.scrub, maxEventBytes: this.maxEventBytes, appendedOn: (client: pg.PoolClient) => this.appending.add(client), history, writer };
    return appendEvents(sql, context, streamId, expectedVersion, events, metadata);
  }

  /**
   * Runs a command in one transaction. With an idempotency key: the key, the request's hash and the
   * result are stored with the events (unique on scope + key). A repeat with the same request gets
   * the stored result (success or refusal) and writes nothing; a repeat with a different request is
   * IDEMPOTENCY_CONFLICT. Concurrent duplicates wait on the unique index and then read the winner's
   * receipt. VERSION_CONFLICT reruns the whole command against fresh state, for as long as the
   * conflict patience allows; then it is answered VERSION_CONFLICT naming the contended streams.
   */
  async execute<R>(options: ExecuteOptions, handler: (uow: UnitOfWork) => Promise<R>): Promise<ExecuteResult<R>> {
    if (this.grouping) return this.grouping.submit(options, handler);
    const retries = new ConflictRetries(this.conflictPatience, this.turns);
    try {
      for (;;) {
        try {
          return settle(await this.executeAlone(options, handler));
        } catch (error) {
          if (!isRetryable(error)) throw error;
          // A deadlock or a serialization failure that keeps coming is answered as itself.
          if (!(await retries.again(error))) throw error instanceof GantryError ? retries.exhausted() : error;
        }
      }
    } finally {
      retries.end();
    }
  }

  /**
   * Whether this command under its key was answered already (the answer to this same request is
   * stored, within its window): execute() would answer a repeat from that receipt. For a command
   * that checks something outside its transaction first (asks another service): a check that no
   * longer holds must not stand between a repeat and its stored answer.
   */
  answered(idempotency: IdempotencyOptions): Promise<boolean> {
    return answeredUnder(this.pool, idempotency, canonicalHash(idempotency.request), this.clock());
  }

  /**
   * The result a command under `scope` / `key` was answered with (null: none committed, or a refusal),
   * whatever its request: for a caller whose answer was lost and who cannot build the same request
   * again to send it.
   */
  async answerUnder<T>(scope: string, key: string, sql: pg.Pool | pg.PoolClient = this.pool): Promise<T | null> {
    return (await storedResult(sql, scope, key, this.clock())) as T | null;
  }

  /**
   * A command in two round trips (one, on a stream this process knows), holding no transaction open
   * while the handler runs, when it can be (executeInOneMessage in one-message.ts: reads without a transaction, the writes in one
   * message, batched with other commands'); in one transaction (execute) when it cannot: a
   * projection that reads in the transaction, an append at any version, a repeat of an idempotency
   * key, group commit on. The handler must not write through a connection of its own, and its answer
   * must not use the positions of the events it appends. Both paths keep the same receipts,
   * compare-and-set and outbox; `options.streams` is only a hint for the full path.
   */
  async executeInOneMessage<R>(options: ExecuteOptions, handler: (work: StreamWork) => Promise<R>): Promise<ExecuteResult<R>> {
    if (!this.grouping) {
      const written = await executeInOneMessage(this.oneMessage, options, handler);
      if (written !== FULL_PATH) return written;
    }
    return this.execute(options, handler);
  }

  /** One decider command on one stream, in one message when it can be (see executeInOneMessage). */
  decide<Command, State, Event extends DomainEvent, Result>(spec: DecisionSpec<Command, State, Event, Result>): Promise<ExecuteResult<Result>> {
    return this.executeInOneMessage({ metadata: spec.metadata, idempotency: spec.idempotency, streams: [spec.streamId] }, async (work) =>
      spec.reply(await decideWithin(work, spec.decider, spec.streamId, spec.command)),
    );
  }

  /**
   * Runs a command inside the caller's open transaction — a durable consumer's, which also holds the
   * event's inbox row — in a savepoint of its own: a refusal or a conflict undoes only the command's
   * writes (a conflict reruns it), and what it wrote commits or rolls back with the caller's
   * transaction. Same receipts as execute(). It takes no second connection: a handler that held one
   * connection and waited for another could wait for ever once the pool is busy with its own kind.
   */
  async executeWithin<R>(sql: pg.PoolClient, options: ExecuteOptions, handler: (uow: UnitOfWork) => Promise<R>): Promise<ExecuteResult<R>> {
    for (let attempt = 1; ; attempt++) {
      await sql.query('SAVEPOINT gantry_within');
      let outcome: Outcome<R>;
      try {
        outcome = await runCommand(sql, this, options, handler);
      } catch (error) {
        await sql.query('ROLLBACK TO SAVEPOINT gantry_within');
        await sql.query('RELEASE SAVEPOINT gantry_within');
        if (!isRetryable(error) || attempt >= this.maxAttempts) throw error;
        await conflictPause(attempt);
        continue;
      }
      await sql.query('RELEASE SAVEPOINT gantry_within');
      return settle(outcome);
    }
  }

  /**
   * One command, one transaction, in as few round trips as its parts allow: BEGIN, the receipt
   * claim, the reads of the streams it names and its other reads go together; then the handler's appends (each
   * one round trip: its compare-and-set); the inline projections' writes wait and go with the
   * receipt's answer and COMMIT (DeferredWrites: a read of the transaction's own writes before
   * that still sees them). A refusal rolls back what the handler wrote and is stored in a transaction of its own
   * (it wrote nothing else), so the common path carries no savepoint.
   */
  private async executeAlone<R>(options: ExecuteOptions, handler: (uow: UnitOfWork) => Promise<R>): Promise<Outcome<R>> {
    const outcome = await this.runAlone(options, handler);
    if (outcome.kind !== 'refusing') return outcome;
    // Stored with the command's connection back in the pool: many refusals at once must not wait
    // for connections they hold themselves.
    return this.refusal(options.idempotency!, outcome.error);
  }

  /** Stores a refusal under its key in a transaction of its own; an earlier attempt's receipt is the answer when there is one. */
  private async refusal<R>(idempotency: IdempotencyOptions, error: GantryError): Promise<Outcome<R>> {
    const window = { now: this.clock, defaultTtlMs: this.receiptTtlMs };
    const stored = await storeRefusal(this.pool, idempotency, canonicalHash(idempotency.request), { ok: false, error: error.toPayload() }, window, this.scrub);
    return stored.ok ? { kind: 'replayed', receipt: stored } : { kind: 'refused', error: GantryError.fromPayload(stored.error) };
  }

  private async runAlone<R>(options: ExecuteOptions, handler: (uow: UnitOfWork) => Promise<R>): Promise<Outcome<R> | { kind: 'refusing'; error: GantryError }> {
    const { idempotency } = options;
    const client = await this.pool.connect();
    let broken = false;
    const onError = () => {
      broken = true; // reported through the failing query; the listener keeps it from crashing the process
    };
    client.on('error', onError);
    let open = true;
    const window = { now: this.clock, defaultTtlMs: this.receiptTtlMs };
    const streams = options.streams ?? [];
    const reads = options.reads ?? [];
    // Each stream from where this process knew it (see readStream): the first statements of the transaction, so committed.
    const streamReads = streams.map((id) => this.oneMessage.batcher.readStatement(id));
    const alongside: Alongside = { statements: [...streamReads.map((r) => r.statement), ...reads] };
    const deferred = new DeferredWrites(client);
    try {
      const requestHash = idempotency ? canonicalHash(idempotency.request) : '';
      if (idempotency) {
        const earlier = await claimReceipt(client, idempotency, requestHash, window, { begin: true, alongside });
        if (earlier) {
          await client.query('ROLLBACK');
          open = false;
          return { kind: 'replayed', receipt: earlier };
        }
      } else if (alongside.statements.length > 0) {
        alongside.results = ((await client.query(['BEGIN', ...alongside.statements].join(';\n'))) as unknown as pg.QueryResult<EventRow>[]).slice(1);
      } else {
        await client.query('BEGIN');
      }
      const prefetched = new Map<string, StoredEvent[]>();
      for (const [i, id] of streams.entries()) prefetched.set(id, await streamReads[i]!.continue(client, alongside.results![i]!.rows as EventRow[], true));
      const readResults = alongside.results?.slice(streams.length) ?? [];
      const uow = new UnitOfWork(client, this, options.metadata, idempotency?.key ?? null, { prefetched, deferred, reads: { statements: reads, results: readResults } });
      let result: R;
      try {
        result = await handler(uow);
      } catch (error) {
        // A refusal is an answer: it is stored so that a retry gets the same one. Conflicts are not.
        if (!idempotency || !(error instanceof GantryError) || isRetryable(error)) throw error;
        await client.query('ROLLBACK');
        open = false;
        return { kind: 'refusing', error };
      }
      // A transaction a failed statement aborted (its error caught by the handler) fails here: the
      // receipt's statement is refused, and a bare COMMIT is answered with a ROLLBACK (commit()).
      if (idempotency) await storeReceiptAndCommit(client, idempotency, { ok: true, result: result ?? null }, this.scrub);
      else await commit(client);
      open = false;
      // Only what committed is remembered: a rollback (above, or a commit that failed) leaves the memory as it was.
      uow.rememberWritten(this.oneMessage.batcher);
      return { kind: 'done', result, events: uow.appended };
    } finally {
      if (open) await client.query('ROLLBACK').catch(() => undefined);
      deferred.end();
      client.off('error', onError);
      client.release(broken ? true : undefined);
    }
  }
}

/**
 * A short random pause before deciding again after a conflict: writers that collided and retried at
 * once would meet again in lock step (two replicas feeding one stream), a random spread separates them.
 */
function conflictPause(attempt: number): Promise<void> {
  const ceilingMs = Math.min(50, 2 ** attempt);
  return new Promise((resolve) => setTimeout(resolve, Math.random() * ceilingMs));
}
