import { lstat } from 'node:fs/promises';
import path from 'node:path';
import { Controller, Inject } from '@nestjs/common';
import { getDiskUsage, listWorktreeLeases, listWorktrees, WorktreeKeySchema, type ReplyOf, type RequestOf, type WorktreeView } from '@gantry/contracts';
import { EventStore } from '@gantry/eventstore';
import { CommandHandler, cursorField, cutPage, decodeCursor, encodeCursor } from '@gantry/service-runtime';
import { isWorktreeDirty, listWorktrees as worktreesOnDisk, type GitWorkspace, type WorktreeOnDisk } from '../infrastructure/git/index.js';
import { GIT_WORKSPACE } from '../infrastructure/workspace.provider.js';
import { DiskUsageMonitor } from './disk-usage-monitor.js';
import { HOLDING_STATUSES, viewOf, type LeaseRow } from './lease-rows.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
/** requested_at as PostgreSQL keeps it, to the microsecond (a JavaScript Date would drop the last three digits). */
const MICROSECOND_UTC = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/;

/** A list_worktree_leases cursor: the (requested_at, lease_id) of the page's last lease. */
function leaseCursor(row: { page_at: string; lease_id: string }): string {
  return encodeCursor({ q: 'list_worktree_leases', at: row.page_at, id: row.lease_id });
}

function leaseAfter(cursor: string): { at: string; id: string } {
  return decodeCursor(cursor, (decoded) => {
    if (decoded.q !== 'list_worktree_leases') return undefined;
    const at = cursorField(decoded, 'at', MICROSECOND_UTC);
    const id = cursorField(decoded, 'id', UUID);
    if (at === undefined || id === undefined) return undefined;
    // A date the calendar has (not 2026-02-30): otherwise PostgreSQL's cast would refuse it as an INTERNAL.
    const real = new Date(`${at.slice(0, 23)}Z`).toISOString().slice(0, 23) === at.slice(0, 23);
    return real ? { at, id } : undefined;
  });
}

/** A list_worktrees cursor: the key of the page's last worktree. */
function worktreeCursor(worktreeKey: string): string {
  return encodeCursor({ q: 'list_worktrees', key: worktreeKey });
}

function worktreeAfter(cursor: string): string {
  return decodeCursor(cursor, (decoded) => {
    if (decoded.q !== 'list_worktrees' || !WorktreeKeySchema.safeParse(decoded.key).success) return undefined;
    return decoded.key as string;
  });
}

async function present(p: string): Promise<boolean> {
  return lstat(p).then(
    () => true,
    (error: NodeJS.ErrnoException) => {
      if (error.code === 'ENOENT' || error.code === 'ENOTDIR') return false;
      throw error;
    },
  );
}

/** Ordered by code unit, the same on every replica and in every locale. */
const byKey = (a: WorktreeOnDisk, b: WorktreeOnDisk) => (a.worktreeKey < b.worktreeKey ? -1 : a.worktreeKey > b.worktreeKey ? 1 : 0);

/** list_worktree_leases (the read model), list_worktrees (git's own list, with who holds each) and get_disk_usage. */
@Controller()
export class WorktreeQueries {
  constructor(
    @Inject(EventStore) private readonly store: EventStore,
    @Inject(GIT_WORKSPACE) private readonly workspace: GitWorkspace,
    @Inject(DiskUsageMonitor) private readonly disk: DiskUsageMonitor,
  ) {}

  /**
   * A page of leases in the order they were requested (requested_at, then lease_id: unique, and
   * neither changes once written), read on after the cursor's lease: a lease that existed when
   * paging began is on exactly one page, however many are added meanwhile (docs/worktrees.md, "Queries").
   */
  @CommandHandler(listWorktreeLeases)
  async leases(request: RequestOf<typeof listWorktreeLeases>): Promise<ReplyOf<typeof listWorktreeLeases>> {
    const where: string[] = [];
    const params: unknown[] = [];
    if (request.worktreeKey) where.push(`worktree_key = $${params.push(request.worktreeKey)}`);
    if (request.jobId) where.push(`job_id = $${params.push(request.jobId)}`);
    if (request.statuses) where.push(`status = ANY($${params.push(request.statuses)}::text[])`);
    if (request.cursor) {
      const after = leaseAfter(request.cursor);
      where.push(`(requested_at, lease_id) > ($${params.push(after.at)}::timestamptz, $${params.push(after.id)}::uuid)`);
    }
    const limit = `$${params.push(request.limit + 1)}`;
    const { rows } = await this.store.pool.query<LeaseRow & { page_at: string }>(
      `SELECT *, to_char(requested_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS page_at
         FROM worktree_leases ${where.length ? `WHERE ${where.join(' AND ')}` : ''} ORDER BY requested_at, lease_id LIMIT ${limit}`,
      params,
    );
    const page = cutPage(rows, request.limit, viewOf);
    return { leases: page.items, nextCursor: page.last ? leaseCursor(page.last) : null };
  }

  /**
   * A page of the worktrees git knows, in the order of their keys, read on after the cursor's key:
   * one that existed when paging began and still does is on exactly one page. Only the page's
   * worktrees are asked whether they are dirty (a git status each); one whose directory went between
   * git's list and its status (evicted, released with removal) is left out of the page — it is gone,
   * as a listing made a moment later would say (docs/worktrees.md, "Queries").
   */
  @CommandHandler(listWorktrees)
  async worktrees(request: RequestOf<typeof listWorktrees>): Promise<ReplyOf<typeof listWorktrees>> {
    const inventory = await worktreesOnDisk(this.workspace, { repositoryUrl: request.repositoryUrl });
    const after = request.cursor ? worktreeAfter(request.cursor) : null;
    const candidates = inventory.worktrees
      .filter((w) => after === null || w.worktreeKey > after)
      .sort(byKey)
      .slice(0, request.limit + 1);
    const { rows } = await this.store.pool.query<{ worktree_key: string; lease_id: string }>(
      `SELECT worktree_key, lease_id FROM worktree_leases WHERE status = ANY($1::text[])`,
      [HOLDING_STATUSES],
    );
    const holder = new Map(rows.map((r) => [r.worktree_key, r.lease_id]));
    const dirty = new Map<string, boolean | null>();
    const gone = new Set<string>();
    for (const w of candidates.slice(0, request.limit)) {
      // One whose .git file is gone has no status until the service repairs it (it is there all the same).
      const status = w.prunable || w.gitlinkMissing ? null : await this.dirtyUnlessGone(w);
      if (status === 'gone') gone.add(w.worktreeKey);
      else dirty.set(w.worktreeKey, status);
    }
    const page = cutPage(candidates, request.limit, (w): WorktreeView => ({
      worktreeKey: w.worktreeKey,
      path: w.path,
      repositoryClone: path.basename(w.clonePath),
      branch: w.branch,
      headSha: w.headSha,
      dirty: dirty.get(w.worktreeKey) ?? null,
      heldBy: holder.get(w.worktreeKey) ?? null,
      prunable: w.prunable,
    }));
    // The cursor stays the page's last key read, gone or not: the next page reads on after it.
    return { worktrees: page.items.filter((w) => !gone.has(w.worktreeKey)), nextCursor: page.last ? worktreeCursor(page.last.worktreeKey) : null };
  }

  /**
   * Whether the worktree is dirty; 'gone' when its status failed because it is no longer there (its
   * directory, or the `.git` file that makes it a worktree, removed since git listed it). Any other
   * failure is the query's.
   */
  private async dirtyUnlessGone(worktree: WorktreeOnDisk): Promise<boolean | 'gone'> {
    try {
      return await isWorktreeDirty(this.workspace, worktree.worktreeKey);
    } catch (error) {
      if (!(await present(worktree.path)) || !(await present(path.join(worktree.path, '.git')))) return 'gone';
      throw error;
    }
  }

  @CommandHandler(getDiskUsage)
  async diskUsage(): Promise<ReplyOf<typeof getDiskUsage>> {
    return this.disk.measure();
  }
}
