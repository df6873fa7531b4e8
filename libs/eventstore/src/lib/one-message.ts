import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { canonicalHash, ErrorCode, GantryError, scrubbingReplacer, type SecretScrubber } from '@gantry/contracts';
import { refuseUnpublishableEvent } from './event-size.js';
import { readStreamTail } from './append.js';
import type { CommandBatcher } from './batching.js';
import { ConflictRetries, type ConflictPatience, type StreamTurns } from './conflict-patience.js';
import type { Decider, Decision, DomainEvent } from './decider.js';
import { JsonRows, jsonRows, type SqlWriter } from './deferred-writes.js';
import type { Statement } from './prepared.js';
import { STREAM_HEAD_MOVED } from './stream-heads.js';
import { storableStrings, storableText } from './storable-text.js';
import { project, type Projection } from './projection.js';
import type { CommandMetadata, ExecuteResult, ExpectedVersion, IdempotencyOptions, NewEvent, StoredEvent } from './types.js';
import { isRetryable, type StreamWork } from './unit-of-work.js';

/** A decider command on one stream, as handleWithDecider takes it. */
export interface DecisionSpec<Command, State, Event extends DomainEvent, Result> {
  decider: Decider<Command, State, Event>;
  streamId: string;
  command: Command;
  metadata: CommandMetadata;
  idempotency?: IdempotencyOptions;
  reply: (decision: Decision<State, Event>) => Result;
}

/** What the one-message path needs of its event store. */
export interface OneMessageContext {
  pool: pg.Pool;
  now: () => Date;
  receiptTtlMs: number;
  scrub: SecretScrubber;
  /** The largest event the bus carries (EventStoreOptions.maxEventBytes). */
  maxEventBytes?: number;
  projections: readonly Projection[];
  /** How long a command decides again after meeting another writer's append. */
  conflictPatience: ConflictPatience;
  /** Turns on busy streams, shared with the full path: a command that met a conflict tries again in its turn. */
  turns: StreamTurns;
  /** Where the stream reads and the write messages go, together with those of other commands. */
  batcher: CommandBatcher;
  /** Stores a refusal under the key, or answers with the receipt an earlier attempt left. */
  refuse<R>(idempotency: IdempotencyOptions, error: GantryError): Promise<ExecuteResult<R>>;
}

/** The full path must take the command; nothing was written. */
export const FULL_PATH = Symbol('full path');

/** The command needs what only a transaction gives (a projection reading its row, an append at any version). */
class NeedsTransaction extends Error {}

const noConnection = {
  query: () => {
    throw new NeedsTransaction('this projection reads inside the transaction');
  },
} as unknown as pg.PoolClient;

/**
 * A command's reads and appends when nothing is held open while it runs: reads go to the log as it
 * is (batched with other commands' reads), appends are kept until the handler is done. A stream
 * read here and appended to is served from here afterwards, as a transaction reads its own writes.
 */
class OneMessageWork implements StreamWork {
  readonly appended: StoredEvent[] = [];
  /** Each appended event's data as the scrubbed JSON it is stored as. */
  readonly json: string[] = [];
  /** Streams as this command sees them (read, and appended to). */
  private readonly streams = new Map<string, StoredEvent[]>();
  /** Streams as they were before this command's appends: what the projections build on. */
  readonly before = new Map<string, StoredEvent[]>();
  /** Streams appended to without being read whole: a later read of one needs the transaction. */
  private readonly blind = new Set<string>();
  /** Streams taken from the batcher's memory rather than read: the write must confirm them. */
  readonly fromMemory = new Set<string>();
  /** Streams appended to. */
  readonly appendedTo = new Set<string>();

  constructor(
    private readonly context: OneMessageContext,
    readonly metadata: CommandMetadata,
    private readonly idempotency: IdempotencyOptions | undefined,
    private readonly reads: readonly string[],
    private readonly now: Date,
    private readonly trustMemory: boolean,
  ) {}

  async readStream(streamId: string): Promise<StoredEvent[]> {
    if (this.blind.has(streamId)) throw new NeedsTransaction(`stream ${streamId} read after an append at a version not read here`);
    const known = this.streams.get(streamId);
    if (known) return [...known];
    const remembered = this.trustMemory ? this.context.batcher.remembered(streamId) : undefined;
    if (remembered) this.fromMemory.add(streamId);
    const events = remembered ?? (await this.context.batcher.reads.load(streamId));
    this.streams.set(streamId, events);
    this.before.set(streamId, events);
    return [...events];
  }

  knowStream(streamId: string, events: StoredEvent[]): void {
    this.streams.set(streamId, events);
    this.before.set(streamId, events);
  }

  async readStreamTail(streamId: string, count: number): Promise<{ version: number; events: StoredEvent[] }> {
    const known = this.streams.get(streamId);
    if (known) return { version: known.length, events: known.slice(-count) };
    if (this.blind.has(streamId)) throw new NeedsTransaction(`stream ${streamId} read after an append at a version not read here`);
    return readStreamTail(this.context.pool, streamId, count);
  }

  async read<Row extends pg.QueryResultRow = pg.QueryResultRow>(index: number): Promise<pg.QueryResult<Row>> {
    const statement = this.reads[index];
    if (statement === undefined) throw new RangeError(`no read ${index} was named for this command`);
    return (await this.context.batcher.statements.load(statement)) as pg.QueryResult<Row>;
  }

  async append(streamId: string, expectedVersion: ExpectedVersion, events: NewEvent[], metadata?: Partial<CommandMetadata>): Promise<StoredEvent[]> {
    // The compare-and-set is the unique (stream, version) constraint: the versions must be known.
    if (expectedVersion === 'any') throw new NeedsTransaction('an append at any version');
    const known = this.streams.get(streamId);
    if (known && known.length !== expectedVersion) {
      throw new GantryError(ErrorCode.VERSION_CONFLICT, `stream ${streamId} is at version ${known.length}, expected ${expectedVersion}`, {
        streamId,
        expectedVersion,
        actualVersion: known.length,
      });
    }
    // Nothing appended (a decider that decided nothing): nothing written that could confirm a
    // decision on a remembered stream, so the stream is not counted as appended to (confirmedByItsWrite).
    if (events.length === 0) return [];
    const { events: pending, json } = pendingEvents(
      streamId,
      { ...this.metadata, ...metadata, idempotencyKey: this.idempotency?.key ?? null },
      expectedVersion,
      events,
      this.now,
      this.context.scrub,
      this.context.maxEventBytes,
    );
    this.appended.push(...pending);
    this.json.push(...json);
    this.appendedTo.add(streamId);
    if (known) this.streams.set(streamId, [...known, ...pending]);
    else if (expectedVersion === 0) {
      this.before.set(streamId, []);
      this.streams.set(streamId, pending);
    } else this.blind.add(streamId);
    return pending;
  }

  /**
   * Whether a decision on remembered streams stands without reading them: only when it appends to
   * each of them, so that its write confirms what it decided on. A decision that appends nothing to
   * one (a refusal, an answer, a no-op) could rest on a stream that moved on: it is made again on reads.
   */
  get confirmedByItsWrite(): boolean {
    for (const id of this.fromMemory) if (!this.appendedTo.has(id)) return false;
    return true;
  }

  /** The last event remembered of each stream decided on from memory: what the write checks first. */
  heads(): Array<{ stream_id: string; version: number; event_id: string }> {
    return [...this.fromMemory].map((id) => {
      const last = this.before.get(id)!.at(-1)!;
      return { stream_id: id, version: last.streamVersion, event_id: last.eventId };
    });
  }

  /** After the commit: the streams appended to, as they now are, for the next command to decide on. */
  rememberWritten(batcher: CommandBatcher): void {
    for (const id of this.appendedTo) {
      const events = this.streams.get(id);
      if (events && !this.blind.has(id)) batcher.remember(id, events);
    }
  }
}

/**
 * A command in two round trips (one, on a stream this process knows) with no transaction held open
 * while Node works on it: its reads go to the log as it is (no transaction, and batched with other
 * commands' reads), its appends are kept, and when the handler is done everything it writes goes to
 * PostgreSQL as one simple-protocol message — the receipt with its answer, the events at the
 * versions that follow what was read, their outbox rows, and the inline projections' rows.
 * PostgreSQL runs a message of several statements as one implicit transaction, so they commit
 * together or not at all, as on the full path; a message may also carry other commands' writes
 * (CommandBatcher).
 *
 * The compare-and-set is the unique (stream_id, stream_version) constraint: events are written at
 * the versions after the ones read, so a writer that appended in between makes the message fail
 * on it (the handler runs again on fresh reads, for as long as the store's ConflictPatience allows;
 * then VERSION_CONFLICT, naming the streams). The receipt is inserted, not
 * claimed first: a key that already has one (a repeat, a concurrent duplicate, an expired receipt)
 * makes the message fail on the receipt's key, and the full path answers it the way it answers
 * every repeat. A refusal is stored the way the full path stores one.
 *
 * A stream this process knows (CommandBatcher.remembered: read or written by it lately) is decided
 * on without reading it, when the decision appends to it: the write confirms it, by the
 * compare-and-set and by a check that the stream still ends with the event remembered last
 * (`gantry_expect_stream_heads`: a stream that became shorter would otherwise get a gap). A decision
 * that fails either, or that appends nothing to a remembered stream, is made again on reads
 * (docs/architecture.md, "Streams this process wrote, not read at all").
 *
 * Returns FULL_PATH when the command must take the full path instead: an inline projection reads in
 * the transaction, an append is at any version, a stream is read after an append that did not read
 * it, or the key already has a receipt. The handler's answer is computed before the write (it is
 * stored in the receipt), so it must not use the events' positions: they are filled in once the
 * message has committed, and the projections see 0.
 */
export async function executeInOneMessage<R>(
  context: OneMessageContext,
  options: { metadata: CommandMetadata; idempotency?: IdempotencyOptions; reads?: string[] },
  handler: (work: StreamWork) => Promise<R>,
): Promise<ExecuteResult<R> | typeof FULL_PATH> {
  const retries = new ConflictRetries(context.conflictPatience, context.turns);
  try {
    return await decideInOneMessage(context, options, handler, retries);
  } finally {
    retries.end();
  }
}

async function decideInOneMessage<R>(
  context: OneMessageContext,
  options: { metadata: CommandMetadata; idempotency?: IdempotencyOptions; reads?: string[] },
  handler: (work: StreamWork) => Promise<R>,
  retries: ConflictRetries,
): Promise<ExecuteResult<R> | typeof FULL_PATH> {
  // Streams this process knows are decided on without reading them, until a decision on them could
  // not be confirmed by its write; from then on this command reads.
  let trustMemory = context.batcher.memoryTrusted;
  for (;;) {
    const now = context.now();
    const work = new OneMessageWork(context, options.metadata, options.idempotency, options.reads ?? [], now, trustMemory);
    /** The decision rested on remembered streams: it is made again on reads, at once (not a conflict of its own). */
    const onReads = () => {
      trustMemory = false;
    };
    let result: R;
    try {
      result = await handler(work);
    } catch (error) {
      if (error instanceof NeedsTransaction) return FULL_PATH;
      if (work.fromMemory.size > 0) {
        onReads();
        continue;
      }
      if (isRetryable(error)) {
        if (await retries.again(error, work.appendedTo)) continue;
        throw retries.exhausted();
      }
      // A refusal is an answer: stored so that a retry gets the same one (or the earlier answer under the key).
      if (!options.idempotency || !(error instanceof GantryError)) throw error;
      return context.refuse<R>(options.idempotency, error);
    }
    if (!work.confirmedByItsWrite) {
      onReads();
      continue;
    }
    const statements: Statement[] = [];
    const writer: SqlWriter = {
      query: async (text, values) => {
        statements.push({ text, values });
      },
    };
    try {
      const before = (id: string) => work.before.get(id);
      for (const projection of context.projections) await project(noConnection, projection, work.appended, before, writer);
    } catch (error) {
      if (error instanceof NeedsTransaction) return FULL_PATH;
      throw error;
    }
    const events = work.appended;
    const heads = work.heads();
    const writes = [
      ...(options.idempotency ? [receiptInsert(options.idempotency, result, now, context.receiptTtlMs)] : []),
      ...(heads.length > 0 ? [{ text: EXPECT_STREAM_HEADS, values: [jsonRows(heads)] }] : []),
      ...(events.length > 0 ? [eventsInsert(events, work.json)] : []),
      ...statements,
    ];
    if (writes.length === 0) return { result, replayed: false, events };
    try {
      const results = await context.batcher.writes.load(writes);
      if (events.length > 0) {
        const inserted = (options.idempotency ? 1 : 0) + (heads.length > 0 ? 1 : 0);
        const positions = new Map((results[inserted]!.rows as Array<{ event_id: string; position: string }>).map((r) => [r.event_id, Number(r.position)]));
        for (const event of events) event.position = positions.get(event.eventId)!;
      }
      work.rememberWritten(context.batcher);
      return { result, replayed: false, events };
    } catch (error) {
      const { code, constraint } = error as { code?: string; constraint?: string };
      if (code === '23505' && constraint === 'idempotency_receipts_pkey') return FULL_PATH;
      const moved = code === STREAM_HEAD_MOVED || (code === '23505' && constraint === 'events_stream_version_unique');
      if (moved && work.fromMemory.size > 0) {
        // A stream moved on since this process knew it (another writer, or a log rebuilt under it).
        if (code === STREAM_HEAD_MOVED) for (const id of work.fromMemory) context.batcher.forget(id);
        onReads();
        continue;
      }
      if (code !== '23505' || constraint !== 'events_stream_version_unique') throw error;
      if (!(await retries.again(error, work.appendedTo))) throw retries.exhausted();
    }
  }
}

/** The events as they will be stored (data scrubbed, as the log keeps it); positions come with the commit. */
function pendingEvents(
  streamId: string,
  metadata: CommandMetadata & { idempotencyKey: string | null },
  version: number,
  events: NewEvent[],
  now: Date,
  scrub: SecretScrubber,
  maxEventBytes: number | undefined,
): { events: StoredEvent[]; json: string[] } {
  const replacer = scrubbingReplacer(scrub);
  const text = (value: string | null | undefined) => (value == null ? null : storableText(value));
  const stored = {
    correlationId: storableText(metadata.correlationId),
    causationId: text(metadata.causationId),
    idempotencyKey: metadata.idempotencyKey,
    actor: text(metadata.actor),
  };
  const occurredAt = now.toISOString();
  const json = events.map((event) => JSON.stringify(event.data ?? null, replacer));
  const storedMetadata = JSON.stringify(stored);
  events.forEach((event, i) => refuseUnpublishableEvent(maxEventBytes, event.type, streamId, json[i]!, storedMetadata));
  return {
    json,
    events: events.map((event, i) => ({
      position: 0,
      eventId: event.eventId ?? randomUUID(),
      streamId,
      streamVersion: version + i + 1,
      type: event.type,
      schemaVersion: event.schemaVersion ?? 1,
      data: JSON.parse(json[i]!) as unknown,
      metadata: stored,
      occurredAt,
    })),
  };
}

const EXPECT_STREAM_HEADS = `SELECT gantry_expect_stream_heads($1::jsonb)`;

const RECEIPT_INSERT = `INSERT INTO idempotency_receipts (scope, key, request_hash, result, expires_at)
    SELECT r.scope, r.key, r.request_hash, r.result, r.expires_at
      FROM jsonb_to_recordset($1::jsonb) AS r(scope text, key text, request_hash text, result jsonb, expires_at timestamptz)`;

/** The receipt as a row of a JSON array (JsonRows), the answer written in as the JSON it is stored as. */
function receiptInsert(idempotency: IdempotencyOptions, result: unknown, now: Date, defaultTtlMs: number): Statement {
  const expiresAt = new Date(now.getTime() + (idempotency.ttlMs ?? defaultTtlMs));
  const row =
    `{"scope":${JSON.stringify(idempotency.scope)},"key":${JSON.stringify(idempotency.key)},"request_hash":${JSON.stringify(canonicalHash(idempotency.request))},` +
    `"result":${JSON.stringify({ ok: true, result: result ?? null }, storableStrings)},"expires_at":${JSON.stringify(expiresAt.toISOString())}}`;
  return { text: RECEIPT_INSERT, values: [new JsonRows(`[${row}]`)] };
}

const EVENTS_INSERT = `WITH inserted AS (
      INSERT INTO events (event_id, stream_id, stream_version, type, schema_version, data, metadata, occurred_at)
      SELECT r.event_id, r.stream_id, r.stream_version, r.type, r.schema_version, r.data, r.metadata, r.occurred_at
        FROM ROWS FROM (json_to_recordset($1::json) AS (event_id uuid, stream_id text, stream_version int, type text,
                                                         schema_version int, data json, metadata json, occurred_at timestamptz))
             WITH ORDINALITY AS r(event_id, stream_id, stream_version, type, schema_version, data, metadata, occurred_at, n)
       ORDER BY r.n
      RETURNING position, event_id
    ), queued AS (
      INSERT INTO outbox (position) SELECT position FROM inserted
    )
    SELECT position, event_id FROM inserted`;

/**
 * The events at their versions, with their outbox rows; answers each one's position. Positions
 * follow the order of the rows: a command's events in the order it appended them (a stream's in
 * version order), and commands written together (JsonRows) in the order they came.
 */
function eventsInsert(events: StoredEvent[], json: string[]): Statement {
  // The rows as one JSON array, each event's data written in as the scrubbed JSON it was stored as.
  const rows = events.map(
    (e, i) =>
      `{"event_id":${JSON.stringify(e.eventId)},"stream_id":${JSON.stringify(e.streamId)},"stream_version":${e.streamVersion},` +
      `"type":${JSON.stringify(e.type)},"schema_version":${e.schemaVersion},"data":${json[i]!},` +
      `"metadata":${JSON.stringify(e.metadata)},"occurred_at":${JSON.stringify(e.occurredAt)}}`,
  );
  return { text: EVENTS_INSERT, values: [new JsonRows(`[${rows.join(',')}]`)] };
}
