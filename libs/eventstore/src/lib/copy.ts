import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type pg from 'pg';
import { from as copyFrom, to as copyTo } from 'pg-copy-streams';

/**
 * Bulk reads and writes in PostgreSQL's COPY text format, for a rebuild: COPY streams rows with
 * none of a query's per-row protocol overhead. pg-copy-streams carries the bytes; the format
 * itself (one line per row, tab-separated fields, `\N` for NULL, backslash escapes) is simple
 * enough to read and write here, and these loops run once per row of a whole log.
 */

/** The rows `query` (a SELECT) returns, as arrays of text fields (null for NULL), `batchSize` at a time. */
export async function* copyOut(client: pg.Client | pg.PoolClient, query: string, batchSize: number): AsyncGenerator<Array<Array<string | null>>> {
  // The server keeps sending while the rows before are parsed and applied: about a megabyte ahead.
  const stream = client.query(copyTo(`COPY (${query}) TO STDOUT`, { highWaterMark: 1 << 20 }));
  let rest: Buffer | null = null; // the start of a row the next chunk ends
  let batch: Array<Array<string | null>> = [];
  for await (const chunk of stream as AsyncIterable<Buffer>) {
    const bytes: Buffer = rest ? Buffer.concat([rest, chunk]) : chunk;
    let start = 0;
    for (let end = bytes.indexOf(NEWLINE, start); end !== -1; start = end + 1, end = bytes.indexOf(NEWLINE, start)) {
      batch.push(splitRow(bytes, start, end));
      if (batch.length === batchSize) {
        yield batch;
        batch = [];
      }
    }
    rest = start < bytes.length ? bytes.subarray(start) : null;
  }
  if (rest) throw new Error('COPY ended inside a row');
  if (batch.length > 0) yield batch;
}

const NEWLINE = 0x0a;
const TAB = 0x09;
const BACKSLASH = 0x5c;

/**
 * A row's fields, each decoded from the bytes on its own (UTF-8 never has a tab or newline byte
 * inside a character). Not slices of one string of the row: a field kept (a stream id in a set)
 * would keep the whole text it was cut from.
 */
function splitRow(bytes: Buffer, start: number, end: number): Array<string | null> {
  const fields: Array<string | null> = [];
  for (let from = start; from <= end; ) {
    let to = bytes.indexOf(TAB, from);
    if (to === -1 || to > end) to = end;
    if (to - from === 2 && bytes[from] === BACKSLASH && bytes[from + 1] === 0x4e /* N */) fields.push(null);
    else {
      const field = bytes.toString('utf8', from, to);
      fields.push(field.includes('\\') ? field.replace(ESCAPED, (_, c: string) => UNESCAPE[c] ?? c) : field);
    }
    from = to + 1;
  }
  return fields;
}

// What COPY TO writes for a backslash and the control characters (it writes no other escapes).
const ESCAPED = /\\(.)/gs;
const UNESCAPE: Record<string, string> = { b: '\b', f: '\f', n: '\n', r: '\r', t: '\t', v: '\v' };

/** A value for COPY FROM: NULL, text (and numbers, booleans, dates) as text, anything else as JSON (for a json/jsonb column). */
export type CopyValue = string | number | boolean | bigint | Date | object | null | undefined;

/** Writes these rows into `table`, with one COPY: each row's `columns` (a row lacking one gives NULL). */
export async function copyIn(client: pg.PoolClient, table: string, columns: readonly string[], rows: Iterable<Readonly<Record<string, CopyValue>>>): Promise<void> {
  const stream = client.query(copyFrom(`COPY ${table} (${columns.join(', ')}) FROM STDIN`));
  await pipeline(Readable.from(lines(columns, rows)), stream);
}

/** The rows as COPY text, in chunks of about 1 MB. */
function* lines(columns: readonly string[], rows: Iterable<Readonly<Record<string, CopyValue>>>): Generator<string> {
  let chunk = '';
  for (const row of rows) {
    for (let i = 0; i < columns.length; i++) chunk += (i === 0 ? '' : '\t') + copyField(row[columns[i]!]);
    chunk += '\n';
    if (chunk.length >= 1 << 20) {
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
