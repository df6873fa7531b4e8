import type pg from 'pg';
import type { MigrationInterface, QueryRunner } from 'typeorm';
import { outboxChannel } from './append.js';

/**
 * Putting events of the log back in the outbox, for the relay to publish them again under their own
 * event ids: the recovery after a JetStream stream lost the events it held (docs/operations.md,
 * "JetStream state lost"). The relay and the consumers' inboxes make it safe while the service runs:
 * an event still waiting is not added twice (ON CONFLICT DO NOTHING), and a consumer that had handled
 * an event finds it in its inbox and changes nothing. Each run is recorded with how far it got, so
 * that a run again leaves out what an earlier one put back while the stream still holds it.
 */

/**
 * The runs of `republish`: each one's window, the last position it went over (written by each batch,
 * in its statement), the event stream as JetStream had it when it began, and the earlier runs whose
 * events it left out. A run again leaves out
 * what an earlier run put back if the stream still holds everything published since that run began
 * (RecordedRun, docs/operations.md, "Putting the lost events back: republish").
 */
export class EventLogRepublishRuns1783100000000 implements MigrationInterface {
  name = 'EventLogRepublishRuns1783100000000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`
      CREATE TABLE republish_runs (
        id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        since            timestamptz NOT NULL,
        until            timestamptz,
        reached          bigint,
        started_at       timestamptz NOT NULL DEFAULT now(),
        stream_created   text,
        stream_next_seq  bigint,
        stream_dedupe_safe boolean,
        left_out         bigint[] NOT NULL DEFAULT '{}'
      )`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP TABLE IF EXISTS republish_runs`);
  }
}

/** The event stream as JetStream has it: which one it is (its creation), and where its messages start and end. */
export interface StreamMark {
  /** When JetStream created it (its ISO time, as JetStream gives it): a stream made again is another. */
  created: string;
  /** The sequence its next message takes (its last sequence + 1). */
  nextSeq: number;
  /** The sequence of the oldest message it holds: past `nextSeq` of a run, it dropped some published since. */
  firstSeq: number;
  /**
   * Whether it holds every message whose id it remembers to drop a copy of (its duplicate window):
   * it never dropped a message, or it holds, without a gap, all it took since before its duplicate
   * window. Else (purged a moment ago) the relay's publish of an event put back may be dropped as a
   * copy of one it no longer holds, and a run begun then is no proof of anything.
   */
  dedupeSafe: boolean;
}

/** A recorded run of republish. */
export interface RecordedRun {
  id: string;
  since: Date;
  until: Date | null;
  /** The last position its committed batches reached; null before its first. */
  reached: string | null;
  startedAt: Date;
  /** The stream when it began: its creation and next sequence; null when it was gone, or not known. */
  stream: Pick<StreamMark, 'created' | 'nextSeq' | 'dedupeSafe'> | null;
}

/** The recorded runs, oldest first. */
export async function recordedRuns(pool: pg.Pool): Promise<RecordedRun[]> {
  const { rows } = await pool.query<{
    id: string;
    since: Date;
    until: Date | null;
    reached: string | null;
    started_at: Date;
    stream_created: string | null;
    stream_next_seq: string | null;
    stream_dedupe_safe: boolean | null;
  }>(`SELECT id::text, since, until, reached::text, started_at, stream_created, stream_next_seq::text, stream_dedupe_safe FROM republish_runs ORDER BY id`);
  return rows.map((r) => ({
    id: r.id,
    since: r.since,
    until: r.until,
    reached: r.reached,
    startedAt: r.started_at,
    stream:
      r.stream_created === null || r.stream_next_seq === null
        ? null
        : { created: r.stream_created, nextSeq: Number(r.stream_next_seq), dedupeSafe: r.stream_dedupe_safe === true },
  }));
}

/**
 * The runs whose put-back events the stream still holds, all of them: the stream is the one the run
 * put them back for (created at the same time), was not dropping copies of messages it no longer held
 * when the run began (`dedupeSafe`), and holds every message from the sequence it was at then; or
 * the run found no stream and the one there now was made after it began and
 * never dropped a message. A stream that is gone, unknown (null), purged, or made again since, holds
 * none for sure: nothing is left out, and the consumers' inboxes take what it had as copies.
 */
export function runsStillHeld(runs: readonly RecordedRun[], stream: StreamMark | null): string[] {
  if (stream === null) return [];
  return runs
    .filter((run) => {
      if (run.reached === null) return false;
      if (run.stream !== null) return run.stream.dedupeSafe && run.stream.created === stream.created && stream.firstSeq <= run.stream.nextSeq;
      return Date.parse(stream.created) >= run.startedAt.getTime() && stream.firstSeq <= 1;
    })
    .map((run) => run.id);
}

/** The events that occurred in [since, until): `until` absent, up to the last one the log holds. */
export interface RepublishWindow {
  since: Date;
  until?: Date;
}

/** Per stream type (a stream id's part before its first `-`: `job`, `product`) and event type. */
export interface RepublishTally {
  streamType: string;
  type: string;
  /** Put back in the outbox (a dry run: would be). */
  putBack: number;
  /** In the window but already waiting in the outbox: left as they were. */
  alreadyWaiting: number;
}

export interface RepublishResult {
  /** The window's last position: events appended after the run began are not its business. */
  upTo: string | null;
  tallies: RepublishTally[];
  putBack: number;
  alreadyWaiting: number;
  /** Statements that put rows back, each its own short transaction. */
  batches: number;
  /** In the window, put back by an earlier run whose events the stream still holds (`leaveOut`): left out. */
  leftOut: number;
  /** The run's record (putBackInOutbox). */
  run: string | null;
}

export interface RepublishOptions {
  /** The service's schema: its relay listens on the schema's outbox channel. */
  schema: string;
  window: RepublishWindow;
  /** Rows a batch puts back at most (default 1000). */
  batchSize?: number;
  /** Earlier runs (runsStillHeld) whose put-back events are left out: not published twice. */
  leaveOut?: readonly string[];
  /** The stream when this run began, recorded with it (putBackInOutbox); null when gone or not known. */
  stream?: StreamMark | null;
}

/** The log's last position now, or null for an empty log. */
async function lastPosition(pool: pg.Pool): Promise<string | null> {
  const { rows } = await pool.query<{ last: string | null }>(`SELECT max(position)::text AS last FROM events`);
  return rows[0]?.last ?? null;
}

/**
 * The first and last positions of the window's events, up to `$3`, found through the BRIN index of
 * `occurred_at` (EventLogOccurredAtIndex): it reads the ranges of pages whose times may fall in the
 * window, not the log from its start. `position + 0`, so that PostgreSQL does not answer `min` by
 * walking the primary key from the log's first event until one is in the window — the very walk
 * this avoids. Exact whatever the order of `occurred_at` in the log: positions are taken at insert
 * and commits interleave, so neither positions nor times are a sorted key of the other.
 */
export const WINDOW_BOUNDS_QUERY = `SELECT min(position + 0)::text AS first, max(position + 0)::text AS last FROM events
  WHERE occurred_at >= $1 AND ($2::timestamptz IS NULL OR occurred_at < $2) AND position <= $3`;

/**
 * The ranges of pages appended since the index last summarized them are read whole by any search
 * (BRIN cannot rule them out); autovacuum summarizes them in its own time (autosummarize), and this
 * does it now. Not the command's business to fail on: without the right (the index's owner), the
 * search reads those ranges, and is as right.
 */
async function summarizeNewRanges(pool: pg.Pool): Promise<void> {
  await pool.query(`SELECT brin_summarize_new_values(to_regclass('events_occurred_at')) WHERE to_regclass('events_occurred_at') IS NOT NULL`).catch(() => undefined);
}

/** The window's positions (first, last), or null when it holds no event up to `upTo`. */
async function windowBounds(pool: pg.Pool, window: RepublishWindow, upTo: string): Promise<{ first: string; last: string } | null> {
  await summarizeNewRanges(pool);
  const { rows } = await pool.query<{ first: string | null; last: string | null }>(WINDOW_BOUNDS_QUERY, [window.since, window.until ?? null, upTo]);
  const { first, last } = rows[0] ?? { first: null, last: null };
  return first === null || last === null ? null : { first, last };
}

/** Ordered by stream type, then event type, so that two runs print alike. */
function sortedTallies(byKey: Map<string, RepublishTally>): RepublishTally[] {
  return [...byKey.values()].sort((a, b) => a.streamType.localeCompare(b.streamType) || a.type.localeCompare(b.type));
}

function resultOf(upTo: string | null, tallies: RepublishTally[], batches: number, leftOut = 0, run: string | null = null): RepublishResult {
  return {
    upTo,
    tallies,
    putBack: tallies.reduce((n, t) => n + t.putBack, 0),
    alreadyWaiting: tallies.reduce((n, t) => n + t.alreadyWaiting, 0),
    batches,
    leftOut,
    run,
  };
}

/** Whether run `r` went over event `e`: in its window, up to where it got. */
const wentOver = (r: string) => `e.position <= ${r}.reached AND e.occurred_at >= ${r}.since AND (${r}.until IS NULL OR e.occurred_at < ${r}.until)`;

/**
 * Whether event `e` is one that an earlier run of `$n` (its ids) put back, and that waits no longer in
 * the outbox (one still waiting counts as waiting). A run put back what it went over but what it
 * left out itself (the events that the runs of its own `left_out` went over): those went out before
 * it began, and only the stream as it was then held them.
 */
const leftOutBy = (ids: string) =>
  `(EXISTS (SELECT 1 FROM republish_runs r WHERE r.id = ANY(${ids}::bigint[]) AND ${wentOver('r')}
      AND NOT EXISTS (SELECT 1 FROM republish_runs l WHERE l.id = ANY(r.left_out) AND ${wentOver('l')}))
    AND NOT EXISTS (SELECT 1 FROM outbox w WHERE w.position = e.position))`;

/** What a run would put back, writing nothing: one read of the window. */
export async function countRepublishable(pool: pg.Pool, options: RepublishOptions): Promise<RepublishResult> {
  const upTo = await lastPosition(pool);
  const bounds = upTo === null ? null : await windowBounds(pool, options.window, upTo);
  if (bounds === null) return resultOf(upTo, [], 0);
  const { rows } = await pool.query<{ stream_type: string; type: string; events: number; waiting: number; left_out: number }>(
    `SELECT split_part(e.stream_id, '-', 1) AS stream_type, e.type, count(*) FILTER (WHERE NOT x.left_out)::int AS events,
            count(o.position) FILTER (WHERE NOT x.left_out)::int AS waiting, count(*) FILTER (WHERE x.left_out)::int AS left_out
       FROM events e LEFT JOIN outbox o ON o.position = e.position CROSS JOIN LATERAL (SELECT ${leftOutBy('$5')} AS left_out) x
      WHERE e.position BETWEEN $1 AND $2 AND e.occurred_at >= $3 AND ($4::timestamptz IS NULL OR e.occurred_at < $4)
      GROUP BY 1, 2`,
    [bounds.first, bounds.last, options.window.since, options.window.until ?? null, options.leaveOut ?? []],
  );
  const byKey = new Map(
    rows
      .filter((r) => r.events > 0)
      .map((r) => [`${r.stream_type}\u0000${r.type}`, { streamType: r.stream_type, type: r.type, putBack: r.events - r.waiting, alreadyWaiting: r.waiting }]),
  );
  return resultOf(upTo, sortedTallies(byKey), 0, rows.reduce((n, r) => n + r.left_out, 0));
}

/**
 * One batch: the next `$5` events of the window after position `$1`, put in the outbox unless they
 * wait there already. Autocommitted on its own, so a long window never holds one big transaction,
 * and the relay publishes a batch while the next is put back. Walks the log by its primary key from
 * the cursor, from the window's first position to its last (WINDOW_BOUNDS_QUERY), so the batches
 * together read the window once, and nothing before it. Its times are compared as `occurred_at +
 * interval '0'`, out of reach of the BRIN index: a batch read through it would read the ranges of
 * the whole rest of the window and sort them, for each batch.
 */
const BATCH_STATEMENT = `WITH picked AS (
    SELECT e.position, e.stream_id, e.type, ${leftOutBy('$6')} AS left_out FROM events e
     WHERE e.position > $1 AND e.position <= $2 AND e.occurred_at + interval '0' >= $3 AND ($4::timestamptz IS NULL OR e.occurred_at + interval '0' < $4)
     ORDER BY e.position LIMIT $5
  ), put AS (
    INSERT INTO outbox (position) SELECT position FROM picked WHERE NOT left_out ORDER BY position ON CONFLICT DO NOTHING RETURNING position
  ), progress AS (
    UPDATE republish_runs SET reached = (SELECT max(position) FROM picked) WHERE id = $7
  )
  SELECT p.position::text AS position, split_part(p.stream_id, '-', 1) AS stream_type, p.type, p.left_out, (u.position IS NOT NULL) AS added
    FROM picked p LEFT JOIN put u ON u.position = p.position
   ORDER BY p.position`;

/** Puts the window's events back in the outbox, in batches, and wakes the service's relay after each. */
export async function putBackInOutbox(pool: pg.Pool, options: RepublishOptions): Promise<RepublishResult> {
  const batchSize = options.batchSize ?? 1000;
  if (!Number.isSafeInteger(batchSize) || batchSize < 1) throw new RangeError(`batchSize must be a whole number ≥ 1 (was ${batchSize})`);
  const upTo = await lastPosition(pool);
  const { rows: [recorded] } = await pool.query<{ id: string }>(
    `INSERT INTO republish_runs (since, until, stream_created, stream_next_seq, stream_dedupe_safe, left_out) VALUES ($1, $2, $3, $4, $5, $6) RETURNING id::text AS id`,
    [options.window.since, options.window.until ?? null, options.stream?.created ?? null, options.stream?.nextSeq ?? null, options.stream?.dedupeSafe ?? null, options.leaveOut ?? []],
  );
  const run = recorded!.id;
  const bounds = upTo === null ? null : await windowBounds(pool, options.window, upTo);
  const byKey = new Map<string, RepublishTally>();
  let batches = 0;
  let leftOut = 0;
  let cursor = bounds === null ? '0' : (BigInt(bounds.first) - 1n).toString();
  while (bounds !== null) {
    const { rows } = await pool.query<{ position: string; stream_type: string; type: string; left_out: boolean; added: boolean }>(BATCH_STATEMENT, [
      cursor,
      bounds.last,
      options.window.since,
      options.window.until ?? null,
      batchSize,
      options.leaveOut ?? [],
      run,
    ]);
    if (rows.length === 0) break;
    batches += 1;
    for (const row of rows) {
      if (row.left_out) {
        leftOut += 1;
        continue;
      }
      const key = `${row.stream_type}\u0000${row.type}`;
      const tally = byKey.get(key) ?? { streamType: row.stream_type, type: row.type, putBack: 0, alreadyWaiting: 0 };
      if (row.added) tally.putBack += 1;
      else tally.alreadyWaiting += 1;
      byKey.set(key, tally);
    }
    // The relay of another process learns of rows it did not append only by a notification (or its poll).
    if (rows.some((r) => r.added)) await pool.query(`SELECT pg_notify($1, '')`, [outboxChannel(options.schema)]);
    if (rows.length < batchSize) break;
    cursor = rows[rows.length - 1]!.position;
  }
  return resultOf(upTo, sortedTallies(byKey), batches, leftOut, run);
}
