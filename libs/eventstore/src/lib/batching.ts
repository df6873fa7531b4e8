import DataLoader from 'dataloader';
import type pg from 'pg';
import { LRUCache } from 'lru-cache';
import { readStreamEvents, readStreamsEvents, toStoredEvent, type EventRow } from './append.js';
import { inlineStatement } from './deferred-writes.js';
import { joinRows, takesRows, type PreparedStatements, type Statement } from './prepared.js';
import type { StoredEvent } from './types.js';

/**
 * The reads and writes of one-message commands (one-message.ts) that arrive together, sent
 * together: every stream read asked for while the event loop handles one turn's input goes to
 * PostgreSQL as one statement, and every write message made ready in one turn goes as one message —
 * one round trip, one transaction, one commit for all of them. Under load commands arrive in bursts
 * and a burst costs about what one command did; alone, a command waits for nothing (the batch is
 * sent at the end of the turn it was asked in).
 *
 * A message of several writes is one transaction: when one member fails (a compare-and-set lost to
 * a concurrent writer, a key that already has a receipt, a view row refused), nothing of the batch
 * was written, and each member is sent again in a message of its own, so that each gets its own
 * answer: the others commit, the failing one gets its own error.
 *
 * DataLoader does the collecting (its batches are what it was made for); its cache is off, since a
 * read must see the log as it is now.
 */
export class CommandBatcher {
  readonly reads: DataLoader<string, StoredEvent[]>;
  readonly writes: DataLoader<Statement[], pg.QueryResult[]>;
  /** Other reads (statements with their values written in), sent together as one message. */
  readonly statements: DataLoader<string, pg.QueryResult>;

  /** The streams read lately, as far as they were read (see readStreams), within a bound on their events. */
  private readonly streams = new LRUCache<string, StoredEvent[]>({ max: REMEMBERED_STREAMS, maxSize: REMEMBERED_EVENTS, sizeCalculation: (events) => Math.max(1, events.length) });
  /**
   * How often lately a read found a remembered stream moved on (a moving average over the reads of
   * remembered streams): another writer — a second replica serving the same jobs — writes them.
   */
  private movedOnRate = 0;

  constructor(
    private readonly pool: pg.Pool,
    private readonly prepared: PreparedStatements,
    /** Told which connection committed writes (the relay is woken when it goes back to the pool). */
    private readonly wrote: (client: pg.PoolClient) => void,
    /** Told of each write message sent: how many commands it carried and how long they waited for it (see EventStore.onBatchWritten). */
    private readonly written: (batch: WrittenBatch) => void = () => undefined,
  ) {
    const options = { cache: false, batchScheduleFn: (send: () => void) => setImmediate(send), maxBatchSize: MAX_BATCH };
    this.reads = new DataLoader((streamIds) => this.readStreams(streamIds), options);
    this.writes = new DataLoader((batch) => this.write(batch), options);
    this.statements = new DataLoader((batch) => this.readAll(batch), options);
  }

  /**
   * A stream as this process last knew it — read, or written by a command of its own — or undefined.
   * A command may decide on it without reading (executeInOneMessage), because its write confirms it:
   * the compare-and-set refuses an append at a version someone else took, and the stream-head check
   * one after a stream that became shorter.
   */
  remembered(streamId: string): StoredEvent[] | undefined {
    const events = this.streams.get(streamId);
    return events ? [...events] : undefined;
  }

  /**
   * Whether commands should decide on remembered streams: while reads rarely find one moved on. Where
   * another writer often moves them on (replicas taking turns on the same jobs), a decision on memory
   * would often fail its write — and with it the batch it shares, whose members are then sent one by
   * one — so commands read, as they would without a memory, until the reads show the streams staying
   * put again. A race of two commands of this process on one stream does not count: the loser reads
   * the stream as the winner left it.
   */
  get memoryTrusted(): boolean {
    return this.movedOnRate < TRUST_MEMORY_BELOW;
  }

  /** A stream as a command of this process committed it (its events with their positions). */
  remember(streamId: string, events: StoredEvent[]): void {
    this.keep(streamId, events);
  }

  forget(streamId: string): void {
    this.streams.delete(streamId);
  }

  /** Keeps the longer of what is remembered and what was learned: a read sent before a commit may answer after it. */
  private keep(streamId: string, events: StoredEvent[]): void {
    if (events.length === 0 || (this.streams.get(streamId)?.length ?? 0) > events.length) return;
    this.streams.set(streamId, events);
  }

  /**
   * A stream as it is now, read through `sql` — a command's transaction, which must see the stream
   * as that transaction does, or the pool — from where this process's memory of it ends, as
   * readStreams does (the later events, the last one known checked; the whole stream when it does
   * not start as remembered). What was read is remembered only when `committed`: read where nothing
   * uncommitted of the log can be seen (the pool, or a transaction that has appended nothing yet),
   * so that memory never holds an event a rollback could take back. These reads leave the rate of
   * streams found moved on alone: they are not decisions made on memory.
   */
  async readOn(sql: pg.PoolClient | pg.Pool, streamId: string, committed: boolean): Promise<StoredEvent[]> {
    const known = this.streams.get(streamId) ?? [];
    const { rows } = await sql.query<EventRow>({ name: 'gantry_read_stream_after', text: READ_STREAM_AFTER, values: [streamId, known.length] });
    return this.continued(sql, streamId, known, rows, committed);
  }

  /**
   * readOn as a statement with its values written in, to travel in a message with others (the reads
   * a transaction opens with); `continue` takes its rows.
   */
  readStatement(streamId: string): { statement: string; continue: (sql: pg.PoolClient, rows: EventRow[], committed: boolean) => Promise<StoredEvent[]> } {
    const known = this.streams.get(streamId) ?? [];
    return {
      statement: inlineStatement(READ_STREAM_AFTER, [streamId, known.length]),
      continue: (sql, rows, committed) => this.continued(sql, streamId, known, rows, committed),
    };
  }

  /** `known` and the rows read after it (the first of them the last known, without its payload); a list of the caller's own. */
  private async continued(sql: pg.PoolClient | pg.Pool, streamId: string, known: StoredEvent[], rows: EventRow[], committed: boolean): Promise<StoredEvent[]> {
    let events: StoredEvent[];
    if (known.length === 0) events = rows.map(toStoredEvent);
    else if (rows[0]?.event_id === known[known.length - 1]!.eventId) events = [...known, ...rows.slice(1).map(toStoredEvent)];
    else {
      // Not as remembered (a log rebuilt under the process): forgotten, and read whole.
      if (this.streams.get(streamId) === known) this.streams.delete(streamId);
      events = await readStreamEvents(sql, streamId);
    }
    if (!committed || events.length === 0) return events;
    this.keep(streamId, events);
    return [...events];
  }

  private async readAll(statements: readonly string[]): Promise<Array<pg.QueryResult | Error>> {
    if (statements.length === 1) return [await this.pool.query(statements[0]!)];
    // The same read asked by several commands (say, the product of a burst of claims) is run once;
    // each asker after the first gets rows of its own.
    const distinct = [...new Set(statements)];
    try {
      const answer = (await this.pool.query(distinct.join(';\n'))) as unknown as pg.QueryResult | pg.QueryResult[];
      const results = Array.isArray(answer) ? answer : [answer];
      const unanswered = new Map(distinct.map((text, i) => [text, results[i]!]));
      return statements.map((text) => {
        const result = unanswered.get(text);
        if (result) {
          unanswered.delete(text);
          return result;
        }
        const first = results[distinct.indexOf(text)]!;
        return { ...first, rows: structuredClone(first.rows) };
      });
    } catch {
      // One of them failed (and with it the message): each again, for its own answer.
      return Promise.all(statements.map((statement) => this.pool.query(statement).catch((error: unknown) => (error instanceof Error ? error : new Error(String(error))))));
    }
  }

  /**
   * The streams as they are now. A stream read before is read from where that read ended: its
   * events are immutable once written, so only the later ones (usually none or one) come from
   * PostgreSQL, rather than the whole stream, its payloads turned to text and parsed again, for
   * every command. The last event known is read again, without its payload, to check the stream
   * still starts as remembered (a log rebuilt under a running process); when it does not, the
   * stream is read whole.
   */
  private async readStreams(streamIds: readonly string[]): Promise<StoredEvent[][]> {
    const ids = [...new Set(streamIds)];
    const known = ids.map((id) => this.streams.get(id) ?? []);
    const { rows } = await this.pool.query<EventRow>({ name: 'gantry_read_streams_after', text: READ_STREAMS_AFTER, values: [ids, known.map((k) => k.length)] });
    const later = new Map<string, EventRow[]>();
    for (const row of rows) {
      const theirs = later.get(row.stream_id);
      if (theirs) theirs.push(row);
      else later.set(row.stream_id, [row]);
    }
    const byStream = new Map<string, StoredEvent[]>();
    const unsure: string[] = [];
    ids.forEach((id, i) => {
      const before = known[i]!;
      const after = later.get(id) ?? [];
      if (before.length === 0) {
        byStream.set(id, after.map(toStoredEvent));
        return;
      }
      const startsAsRemembered = after[0]?.event_id === before[before.length - 1]!.eventId;
      this.movedOnRate += ((startsAsRemembered && after.length === 1 ? 0 : 1) - this.movedOnRate) / MOVED_ON_WINDOW;
      if (startsAsRemembered) byStream.set(id, [...before, ...after.slice(1).map(toStoredEvent)]);
      else unsure.push(id);
    });
    if (unsure.length > 0) {
      for (const id of unsure) this.streams.delete(id);
      const whole = await readStreamsEvents(this.pool, unsure);
      for (const id of unsure) byStream.set(id, whole.get(id) ?? []);
    }
    for (const [id, events] of byStream) this.keep(id, events);
    // A stream asked for twice in one batch is read once; each asker gets a list of its own.
    return streamIds.map((id) => [...byStream.get(id)!]);
  }

  private async write(batch: ReadonlyArray<Statement[]>): Promise<Array<pg.QueryResult[] | Error>> {
    const started = performance.now();
    try {
      return await this.writeNow(batch);
    } finally {
      this.written({ commands: batch.length, seconds: (performance.now() - started) / 1000 });
    }
  }

  private async writeNow(batch: ReadonlyArray<Statement[]>): Promise<Array<pg.QueryResult[] | Error>> {
    const client = await this.pool.connect();
    let broken = false;
    const onError = () => {
      broken = true; // reported through the failing query; the listener keeps it from crashing the process
    };
    client.on('error', onError);
    try {
      if (batch.length > 1) {
        // Members whose statements are the same texts, each taking its rows as one JSON array (JsonRows), are
        // written by one statement per text with all their rows: PostgreSQL runs 3 statements for
        // 16 commands of a kind, not 48. Each member of such a group is answered with the group's
        // results (a command finds its own rows in them, e.g. its events' positions by event id).
        const groups = groupsOf(batch);
        const sent: string[][] = [];
        for (const members of groups) {
          sent.push(await this.prepared.executes(client, members.length === 1 ? batch[members[0]!]! : joinRows(members.map((i) => batch[i]!))));
        }
        try {
          const answer = (await client.query(sent.flat().join(';\n'))) as unknown as pg.QueryResult | pg.QueryResult[];
          this.wrote(client);
          const results = Array.isArray(answer) ? answer : [answer];
          const answers: pg.QueryResult[][] = [];
          let at = 0;
          groups.forEach((members, g) => {
            const theirs = results.slice(at, (at += sent[g]!.length));
            for (const member of members) answers[member] = theirs;
          });
          return answers;
        } catch {
          // Nothing of the batch was written: each member again, alone, for its own answer.
        }
      }
      const answers: Array<pg.QueryResult[] | Error> = [];
      for (const writes of batch) {
        const message = await this.prepared.executes(client, writes);
        try {
          const results = (await client.query(message.join(';\n'))) as unknown as pg.QueryResult | pg.QueryResult[];
          this.wrote(client);
          answers.push(Array.isArray(results) ? results : [results]);
        } catch (error) {
          answers.push(error instanceof Error ? error : new Error(String(error)));
        }
      }
      return answers;
    } finally {
      client.off('error', onError);
      client.release(broken ? true : undefined);
    }
  }
}

/**
 * One write message of the batcher: the commands it carried, and the seconds from when it was sent
 * for a connection until PostgreSQL's answer (a member sent again alone after the message failed
 * included) — the time every one of those commands waited for its commit.
 */
export interface WrittenBatch {
  commands: number;
  seconds: number;
}

/**
 * A short number for each statement text met: a group's key is made of these rather than of the
 * texts themselves (kilobytes of SQL, joined for every member of every batch). The texts are the
 * modules' constants, a few dozen (PreparedStatements names them the same way).
 */
const textNumbers = new Map<string, number>();

function textNumber(text: string): number {
  let n = textNumbers.get(text);
  if (n === undefined) textNumbers.set(text, (n = textNumbers.size));
  return n;
}

/** The batch's members (their indexes) in groups that can be written together (see JsonRows), in order of their first member. */
function groupsOf(batch: ReadonlyArray<readonly Statement[]>): number[][] {
  const groups = new Map<string, number[]>();
  batch.forEach((statements, i) => {
    const joinable = statements.length > 0 && statements.every(takesRows);
    const key = joinable ? statements.map((s) => textNumber(s.text)).join(',') : `#${i}`;
    const group = groups.get(key);
    if (group) group.push(i);
    else groups.set(key, [i]);
  });
  return [...groups.values()];
}

/**
 * Events from each stream's `after`-th on (all of a stream whose `after` is 0), the `after`-th
 * without its payload: it is only there to be compared with the one remembered.
 */
export const READ_STREAMS_AFTER = `SELECT e.* FROM unnest($1::text[], $2::int[]) AS k(stream_id, after)
  CROSS JOIN LATERAL (
    SELECT position, event_id, stream_id, stream_version, type, schema_version,
      CASE WHEN stream_version > k.after THEN data END AS data, CASE WHEN stream_version > k.after THEN metadata END AS metadata, occurred_at
    FROM events WHERE stream_id = k.stream_id AND stream_version >= k.after ORDER BY stream_version) e
  ORDER BY e.stream_id, e.stream_version`;

/** READ_STREAMS_AFTER for one stream: its events from the `$2`-th on (all when 0), the `$2`-th without its payload. */
export const READ_STREAM_AFTER = `SELECT position, event_id, stream_id, stream_version, type, schema_version,
    CASE WHEN stream_version > $2::int THEN data END AS data, CASE WHEN stream_version > $2::int THEN metadata END AS metadata, occurred_at
  FROM events WHERE stream_id = $1 AND stream_version >= $2::int ORDER BY stream_version`;

/**
 * Streams whose events the batcher remembers, at most (the most recently read): a few thousand jobs
 * in flight, some megabytes. A stream forgotten is read whole again, nothing more.
 */
const REMEMBERED_STREAMS = 5_000;

/**
 * Events the batcher remembers, at most, over all its streams: a few long streams (a task moved
 * back and forth for months) must not hold memory that thousands of short ones would not.
 */
const REMEMBERED_EVENTS = 100_000;

/** Reads of remembered streams the moving average of those found moved on spans, about. */
const MOVED_ON_WINDOW = 128;

/** Commands decide on memory while fewer than this share of the reads of remembered streams found them moved on. */
const TRUST_MEMORY_BELOW = 0.005;

/** Commands in one batch at most: larger batches would make their last member wait for the others' work. */
const MAX_BATCH = 64;
