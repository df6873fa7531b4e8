/**
 * Every item of a paged query (list_jobs, list_worktree_leases, list_worktrees, list_step_entries):
 * asks for the first page, then for the next with the previous one's nextCursor, until it is null —
 * or absent, as from a service that answers everything at once. For a caller that needs the whole
 * list; reading only the first page would silently miss what a page cut off (by count or by size).
 */
export async function readAllPages<P extends { nextCursor?: string | null }, T>(
  page: (cursor: string | undefined) => Promise<P>,
  items: (page: P) => readonly T[],
): Promise<T[]> {
  const all: T[] = [];
  let cursor: string | undefined;
  do {
    const next = await page(cursor);
    all.push(...items(next));
    cursor = next.nextCursor ?? undefined;
  } while (cursor !== undefined);
  return all;
}
