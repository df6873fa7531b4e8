import { ErrorCode, GantryError } from '@gantry/contracts';

/**
 * At most this many bytes of items (as JSON) in one page of a list query: half of NATS's default
 * max_payload, so a page and its envelope always fit one message (docs/architecture.md, "Answers too
 * large for the bus", "Paged queries").
 */
export const MAX_PAGE_BYTES = 512 * 1024;

export interface PageCut<R, V> {
  /** The page's items, in the order of the rows. */
  items: V[];
  /** The row the page ended at when more follow (the next cursor is made from it); null at the end. */
  last: R | null;
}

/**
 * One page of a list query: the rows as read (up to `limit + 1` of them — one past the limit tells
 * that more follow), cut at `limit` items or at `maxBytes` of them as JSON, whichever comes first.
 * A page holds at least one item, however large: a single item that cannot fit is the caller's
 * REPLY_TOO_LARGE, not a page that never moves on.
 */
export function cutPage<R, V>(rows: readonly R[], limit: number, view: (row: R) => V, maxBytes = MAX_PAGE_BYTES): PageCut<R, V> {
  const items: V[] = [];
  let bytes = 0;
  for (const row of rows.slice(0, limit)) {
    const item = view(row);
    // +1 for the comma between items in the answer's array.
    const size = Buffer.byteLength(JSON.stringify(item)) + 1;
    if (items.length > 0 && bytes + size > maxBytes) break;
    items.push(item);
    bytes += size;
  }
  return { items, last: rows.length > items.length ? rows[items.length - 1]! : null };
}

/** A cursor as a query hands it out: opaque to the caller (base64url of the key's JSON). */
export function encodeCursor(key: Record<string, unknown>): string {
  return Buffer.from(JSON.stringify(key)).toString('base64url');
}

/**
 * The key inside a cursor, checked by `parse` (which answers undefined for anything it did not hand
 * out: another query's cursor, a changed or truncated one). Refused INVALID_COMMAND otherwise, so a
 * bad cursor never reaches the database as a malformed value (that would be an INTERNAL).
 */
export function decodeCursor<K>(cursor: string, parse: (decoded: Record<string, unknown>) => K | undefined): K {
  let key: K | undefined;
  try {
    const decoded: unknown = JSON.parse(Buffer.from(cursor, 'base64url').toString());
    if (decoded !== null && typeof decoded === 'object' && !Array.isArray(decoded)) key = parse(decoded as Record<string, unknown>);
  } catch {
    // not base64url JSON: refused below
  }
  if (key === undefined) {
    throw new GantryError(ErrorCode.INVALID_COMMAND, 'the cursor is not one this query handed out', undefined, [{ path: ['cursor'], message: 'unknown cursor' }]);
  }
  return key;
}

/** A string field of a decoded cursor that matches `pattern`, or undefined. */
export function cursorField(decoded: Record<string, unknown>, name: string, pattern: RegExp): string | undefined {
  const value = decoded[name];
  return typeof value === 'string' && pattern.test(value) ? value : undefined;
}
