import type pg from 'pg';
import { canonicalHash, ErrorCode, GantryError } from '@gantry/contracts';
import type { CommandBatcher } from './batching.js';
import type { EventStore } from './event-store.js';
import type { DeferredWrites } from './deferred-writes.js';
import { claimReceipt, storeReceipt, type Receipt } from './receipts.js';
import type { CommandMetadata, ExecuteResult, ExpectedVersion, IdempotencyOptions, NewEvent, StoredEvent } from './types.js';

export type ExecuteOptions = {
  metadata: CommandMetadata;
  idempotency?: IdempotencyOptions;
  /** Streams the handler reads: read in the message that opens the transaction, not one round trip each. */
  streams?: string[];
  /**
   * Other reads the handler makes first (statements with their values written in: inlineStatement),
   * sent in that same message; the handler takes their results with `uow.read(i)`.
   */
  reads?: string[];
};

/** What a command's transaction has in hand for its unit of work. */
export interface UnitOfWorkAids {
  /** Streams read when the transaction began (see ExecuteOptions.streams). */
  prefetched?: Map<string, StoredEvent[]>;
  /** Holds the projections' writes for the commit. */
  deferred?: DeferredWrites;
  /** ExecuteOptions.reads, with the results read when the transaction began (where it was so). */
  reads?: { statements: string[]; results: Array<pg.QueryResult | undefined> };
}

/**
 * The log operations a command handler uses: what UnitOfWork (a command in an open transaction)
 * and the one-message path (one-message.ts) both give.
 */
export interface StreamWork {
  readonly metadata: CommandMetadata;
  readStream(streamId: string): Promise<StoredEvent[]>;
  /** The last `count` events of a stream, oldest first, with the stream's version. */
  readStreamTail(streamId: string, count: number): Promise<{ version: number; events: StoredEvent[] }>;
  /** The result of ExecuteOptions.reads[index]. */
  read<Row extends pg.QueryResultRow = pg.QueryResultRow>(index: number): Promise<pg.QueryResult<Row>>;
  append(streamId: string, expectedVersion: ExpectedVersion, events: NewEvent[], metadata?: Partial<CommandMetadata>): Promise<StoredEvent[]>;
  /**
   * A stream's events the handler knows without reading them (read with another statement, or a
   * stream under a fresh id, which is empty): taken instead of a read. The append's compare-and-set
   * still checks them.
   */
  knowStream(streamId: string, events: StoredEvent[]): void;
}

/** What a command handler gets: the open transaction and the log operations inside it. */
export class UnitOfWork implements StreamWork {
  readonly appended: StoredEvent[] = [];
  /** Each stream as read (and appended to) in this transaction: what the projections build on. */
  private readonly streams = new Map<string, StoredEvent[]>();
  /** Streams appended to. */
  private readonly appendedTo = new Set<string>();

  constructor(
    readonly sql: pg.PoolClient,
    private readonly store: EventStore,
    readonly metadata: CommandMetadata,
    readonly idempotencyKey: string | null,
    private readonly aids: UnitOfWorkAids = {},
  ) {}

  async readStream(streamId: string): Promise<StoredEvent[]> {
    // A stream read with BEGIN is this transaction's read of it; later reads go to the database.
    const prefetched = this.aids.prefetched?.get(streamId);
    this.aids.prefetched?.delete(streamId);
    const events = prefetched ?? (await this.store.readStream(streamId, this.sql));
    this.streams.set(streamId, events);
    return events;
  }

  /** The result of ExecuteOptions.reads[index]: as read when the transaction began, or read now (a second call reads again). */
  async read<Row extends pg.QueryResultRow = pg.QueryResultRow>(index: number): Promise<pg.QueryResult<Row>> {
    const reads = this.aids.reads;
    const statement = reads?.statements[index];
    if (statement === undefined) throw new RangeError(`no read ${index} was named for this command`);
    const early = reads!.results[index];
    reads!.results[index] = undefined;
    return (early ?? (await this.sql.query(statement))) as pg.QueryResult<Row>;
  }

  /** Events of a stream this transaction read some other way (with a read of its own): decideWithin takes them instead of reading it again. */
  knowStream(streamId: string, events: StoredEvent[]): void {
    (this.aids.prefetched ??= new Map()).set(streamId, events);
  }

  readStreamTail(streamId: string, count: number): Promise<{ version: number; events: StoredEvent[] }> {
    return this.store.readStreamTail(streamId, count, this.sql);
  }

  /**
   * Appends with the expected stream version. The unique (stream_id, stream_version) constraint is
   * the compare-and-set: a concurrent writer that got there first makes this throw VERSION_CONFLICT.
   */
  async append(streamId: string, expectedVersion: ExpectedVersion, events: NewEvent[], metadata?: Partial<CommandMetadata>): Promise<StoredEvent[]> {
    this.aids.prefetched?.delete(streamId); // read before this append: no longer the stream
    // The history read here is the stream's state only when the append is at its end.
    const read = this.streams.get(streamId);
    const history = read && expectedVersion === read.length ? read : undefined;
    const stored = await this.store.appendWithin(
      this.sql,
      streamId,
      expectedVersion,
      events,
      {
        correlationId: metadata?.correlationId ?? this.metadata.correlationId,
        causationId: metadata?.causationId ?? this.metadata.causationId ?? null,
        actor: metadata?.actor ?? this.metadata.actor ?? null,
        idempotencyKey: this.idempotencyKey,
      },
      history,
      this.aids.deferred?.writer,
    );
    if (history) this.streams.set(streamId, [...history, ...stored]);
    else this.streams.delete(streamId);
    if (stored.length > 0) this.appendedTo.add(streamId);
    this.appended.push(...stored);
    return stored;
  }

  /**
   * Once the transaction has committed: the streams appended to, as they now are, for the next
   * command to decide on (as the one-message path remembers what it wrote). Only a stream read whole
   * here and appended to at its end is known as it now is; one appended to blind is not remembered.
   */
  rememberWritten(batcher: CommandBatcher): void {
    for (const id of this.appendedTo) {
      const events = this.streams.get(id);
      if (events) batcher.remember(id, events);
    }
  }
}

/** How one command ended inside its transaction. */
export type Outcome<R> =
  | { kind: 'done'; result: R; events: StoredEvent[] }
  | { kind: 'refused'; error: GantryError }
  | { kind: 'replayed'; receipt: Receipt };

/** What the caller of execute() sees: the result, or the (stored) refusal thrown. */
export function settle<R>(outcome: Outcome<R>): ExecuteResult<R> {
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

/** A conflict with a concurrent writer: deciding again on fresh state may well succeed. */
export function isRetryable(error: unknown): boolean {
  if (error instanceof GantryError) return error.code === ErrorCode.VERSION_CONFLICT;
  const code = (error as { code?: string })?.code;
  return code === '40P01' || code === '40001'; // deadlock detected, serialization failure
}

/**
 * One command inside an open transaction: claim its receipt, run the handler, store the result.
 * Returns what the caller gets; throws only what must not be stored (conflicts, unexpected errors).
 */
export async function runCommand<R>(
  client: pg.PoolClient,
  store: EventStore,
  options: ExecuteOptions,
  handler: (uow: UnitOfWork) => Promise<R>,
): Promise<Outcome<R>> {
  const { idempotency } = options;
  if (idempotency) {
    const stored = await claimReceipt(client, idempotency, canonicalHash(idempotency.request), { now: store.clock, defaultTtlMs: store.receiptTtlMs });
    if (stored) return { kind: 'replayed', receipt: stored };
    await client.query('SAVEPOINT gantry_command');
  }
  const uow = new UnitOfWork(client, store, options.metadata, idempotency?.key ?? null, { reads: { statements: options.reads ?? [], results: [] } });
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
    if (outcome.kind === 'done') {
      await storeReceipt(client, idempotency, { ok: true, result: outcome.result ?? null }, store.scrub);
    } else {
      // The refusal is answered as it was stored, so the first answer and every repeat are the same.
      const stored = await storeReceipt(client, idempotency, { ok: false, error: (outcome as { error: GantryError }).error.toPayload() }, store.scrub);
      outcome = { kind: 'refused', error: GantryError.fromPayload(stored.error) };
    }
  }
  return outcome;
}
