import { readAllPages } from './pages.js';

describe('readAllPages', () => {
  it('asks for each next page with the previous nextCursor until it is null', async () => {
    const pages: Record<string, { items: number[]; nextCursor: string | null }> = {
      first: { items: [1, 2], nextCursor: 'c1' },
      c1: { items: [3, 4], nextCursor: 'c2' },
      c2: { items: [5], nextCursor: null },
    };
    const asked: (string | undefined)[] = [];
    const all = await readAllPages(
      async (cursor) => {
        asked.push(cursor);
        return pages[cursor ?? 'first']!;
      },
      (page) => page.items,
    );
    expect(all).toEqual([1, 2, 3, 4, 5]);
    expect(asked).toEqual([undefined, 'c1', 'c2']);
  });

  it('takes an answer without nextCursor (a service that does not page) as the last page', async () => {
    let asked = 0;
    const all = await readAllPages(
      async () => {
        asked++;
        return { items: ['a', 'b'] } as { items: string[]; nextCursor?: string | null };
      },
      (page) => page.items,
    );
    expect(all).toEqual(['a', 'b']);
    expect(asked).toBe(1);
  });
});
