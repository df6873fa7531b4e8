import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type pg from 'pg';
import { from as copyFrom, to as copyTo } from 'pg-copy-streams';

/**
 * Bulk reads and writes with COPY, for a rebuild: COPY streams rows with none of a query's per-row
 * protocol overhead. pg-copy-streams carries the bytes; the formats themselves (binary out: each
 * field's length then its bytes; text in: tab-separated fields, `\N` for NULL, backslash escapes)
 * are simple enough to read and write here, and these loops run once per row of a whole log.
 */

/** A row of COPY's binary format: field i is `bytes[starts[i], ends[i])`, or NULL when `starts[i]` is -1. */
export interface BinaryRow {
  bytes: Buffer;
  starts: number[];
  ends: number[];
}

const SIGNATURE = Buffer.from('PGCOPY\n\xff\r\n\0', 'latin1');

/**
 * The rows `query` (a SELECT) returns, in COPY's binary format (no escaping on either side: each
 * field comes with its length), made into values by `decode` (which must copy what it keeps out
 * of the row's bytes) and handed over `batchSize` at a time.
 */
export async function* copyOut<T>(client: pg.Client | pg.PoolClient, query: string, batchSize: number, decode: (row: BinaryRow) => T): AsyncGenerator<T[]> {
  // The server keeps sending while the rows before are decoded and applied: about a megabyte ahead.
  const stream = client.query(copyTo(`COPY (${query}) TO STDOUT WITH (FORMAT binary)`, { highWaterMark: 1 << 20 }));
  const row: BinaryRow = { bytes: Buffer.alloc(0), starts: [], ends: [] };
  let rest: Buffer | null = null; // the start of a row (or of the header) the next chunk ends
  let started = false;
  let ended = false;
  let batch: T[] = [];
  for await (const chunk of stream as AsyncIterable<Buffer>) {
    const bytes: Buffer = rest ? Buffer.concat([rest, chunk]) : chunk;
    let at = 0;
    if (!started) {
      // The signature, 32 bits of flags, and a header extension of the length that follows.
      if (bytes.length < 19 || bytes.length < 19 + bytes.readInt32BE(15)) {
        rest = bytes;
        continue;
      }
      if (!bytes.subarray(0, 11).equals(SIGNATURE)) throw new Error('COPY sent no binary header');
      at = 19 + bytes.readInt32BE(15);
      started = true;
    }
    row.bytes = bytes;
    while (!ended && at + 2 <= bytes.length) {
      const count = bytes.readInt16BE(at);
      if (count === -1) {
        ended = true; // the trailer
        at += 2;
        break;
      }
      let p = at + 2;
      let i = 0;
      for (; i < count && p + 4 <= bytes.length; i++) {
        const length = bytes.readInt32BE(p);
        p += 4;
        if (length === -1) {
          row.starts[i] = row.ends[i] = -1;
        } else if (p + length <= bytes.length) {
          row.starts[i] = p;
          row.ends[i] = p += length;
        } else break;
      }
      if (i < count) break; // the row goes on in the next chunk
      batch.push(decode(row));
      at = p;
      if (batch.length === batchSize) {
        yield batch;
        batch = [];
      }
    }
    rest = at < bytes.length ? bytes.subarray(at) : null;
  }
  if (!ended || rest) throw new Error('COPY ended inside a row');
  if (batch.length > 0) yield batch;
}

/** A value for COPY FROM: NULL, text (and numbers, booleans, dates) as text, anything else as JSON (for a json/jsonb column). */
export type CopyValue = string | number | boolean | bigint | Date | object | null | undefined;

/** Writes these rows into `table`, with one COPY: each row's `columns` (a row lacking one gives NULL). */
export async function copyIn(client: pg.PoolClient, table: string, columns: readonly string[], rows: Iterable<Readonly<Record<string, CopyValue>>>): Promise<void> {
  const stream = client.query(copyFrom(`COPY ${table} (${columns.join(', ')}) FROM STDIN`));
  await pipeline(Readable.from(lines(columns, rows)), stream);
}

/**
 * The rows as COPY text, in chunks of about 16 KB. A chunk is built by concatenation and turned into
 * bytes when it is written (flattened, then encoded as UTF-8): small enough to stay in the CPU's
 * cache while that happens. With chunks of 1 MB that step took an eighth of a rebuild's time in Node.
 */
const CHUNK_CHARS = 1 << 14;

function* lines(columns: readonly string[], rows: Iterable<Readonly<Record<string, CopyValue>>>): Generator<string> {
  let chunk = '';
  for (const row of rows) {
    for (let i = 0; i < columns.length; i++) chunk += (i === 0 ? '' : '\t') + copyField(row[columns[i]!]);
    chunk += '\n';
    if (chunk.length >= CHUNK_CHARS) {
      yield chunk;
      chunk = '';
    }
  }
  if (chunk !== '') yield chunk;
}

function copyField(value: CopyValue): string {
  if (value === null || value === undefined) return '\\N';
  switch (typeof value) {
    case 'string':
      return SPECIAL.test(value) ? value.replace(SPECIALS, (c) => ESCAPE[c]!) : value;
    case 'number':
    case 'bigint':
      return String(value);
    case 'boolean':
      return value ? 't' : 'f';
    default: {
      if (value instanceof Date) return value.toISOString();
      // JSON has no raw newline, carriage return or tab (it escapes them): only its backslashes need doubling.
      const json = JSON.stringify(value);
      return json.includes('\\') ? json.replaceAll('\\', '\\\\') : json;
    }
  }
}

const SPECIAL = /[\\\n\r\t]/;
const SPECIALS = /[\\\n\r\t]/g;
const ESCAPE: Record<string, string> = { '\\': '\\\\', '\n': '\\n', '\r': '\\r', '\t': '\\t' };
