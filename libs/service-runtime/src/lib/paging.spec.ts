import { ErrorCode } from '@gantry/contracts';
import { cursorField, cutPage, decodeCursor, encodeCursor, MAX_PAGE_BYTES } from './paging.js';

describe('cutPage', () => {
  const rows = (n: number, size = 10) => Array.from({ length: n }, (_, i) => ({ id: i, text: 'x'.repeat(size) }));

  it('ends a page at the limit, and names the row it ended at when more follow', () => {
    const page = cutPage(rows(4), 3, (r) => r.id);
    expect(page).toEqual({ items: [0, 1, 2], last: { id: 2, text: 'x'.repeat(10) } });
  });

  it('has no last row when nothing follows', () => {
    expect(cutPage(rows(3), 3, (r) => r.id)).toEqual({ items: [0, 1, 2], last: null });
    expect(cutPage([], 3, (r: { id: number }) => r.id)).toEqual({ items: [], last: null });
  });

  it('ends a page before the item that would take it past the byte budget', () => {
    // each item is {"id":n,"text":"xxxxxxxxxx"}: 28 or 29 bytes, one more for its comma
    const page = cutPage(rows(10), 10, (r) => r, 100);
    expect(page.items.map((i) => i.id)).toEqual([0, 1, 2]);
    expect(page.last?.id).toBe(2);
    expect(Buffer.byteLength(JSON.stringify(page.items))).toBeLessThanOrEqual(100);
  });

  it('holds one item however large, so that paging always moves on', () => {
    const page = cutPage(rows(2, 1000), 10, (r) => r, 100);
    expect(page.items).toHaveLength(1);
    expect(page.last?.id).toBe(0);
  });

  it('keeps a full page of the default budget within half of the bus default max_payload', () => {
    const page = cutPage(rows(2000, 1000), 2000, (r) => r);
    expect(page.items.length).toBeLessThan(2000);
    expect(Buffer.byteLength(JSON.stringify(page.items))).toBeLessThanOrEqual(MAX_PAGE_BYTES);
  });
});

describe('cursors', () => {
  const parse = (d: Record<string, unknown>) => (d.q === 'mine' ? cursorField(d, 'k', /^\d+$/) : undefined);

  it('decodes what it encoded', () => {
    expect(decodeCursor(encodeCursor({ q: 'mine', k: '42' }), parse)).toBe('42');
  });

  it.each([
    ['not base64url JSON', '%%%'],
    ['JSON that is not an object', Buffer.from('[1]').toString('base64url')],
    ['another query', encodeCursor({ q: 'theirs', k: '42' })],
    ['a key that does not match', encodeCursor({ q: 'mine', k: '4 2' })],
    ['a key of another type', encodeCursor({ q: 'mine', k: 42 })],
  ])('refuses %s with INVALID_COMMAND on the cursor', (_, cursor) => {
    expect(() => decodeCursor(cursor, parse)).toThrow(expect.objectContaining({ code: ErrorCode.INVALID_COMMAND, issues: [expect.objectContaining({ path: ['cursor'] })] }));
  });
});
