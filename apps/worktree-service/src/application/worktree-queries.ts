import path from 'node:path';
import { Controller, Inject } from '@nestjs/common';
import { getDiskUsage, listWorktreeLeases, listWorktrees, type ReplyOf, type RequestOf } from '@gantry/contracts';
import { EventStore } from '@gantry/eventstore';
import { CommandHandler } from '@gantry/service-runtime';
import { listWorktrees as worktreesOnDisk, type GitWorkspace } from '../infrastructure/git/index.js';
import { GIT_WORKSPACE } from '../infrastructure/workspace.provider.js';
import { DiskUsageMonitor } from './disk-usage-monitor.js';
import { HOLDING_STATUSES, viewOf, type LeaseRow } from './lease-rows.js';

/** list_worktree_leases (the read model), list_worktrees (git's own list, with who holds each) and get_disk_usage. */
@Controller()
export class WorktreeQueries {
  constructor(
    @Inject(EventStore) private readonly store: EventStore,
    @Inject(GIT_WORKSPACE) private readonly workspace: GitWorkspace,
    @Inject(DiskUsageMonitor) private readonly disk: DiskUsageMonitor,
  ) {}

  @CommandHandler(listWorktreeLeases)
  async leases(request: RequestOf<typeof listWorktreeLeases>): Promise<ReplyOf<typeof listWorktreeLeases>> {
    const where: string[] = [];
    const params: unknown[] = [];
    if (request.worktreeKey) where.push(`worktree_key = $${params.push(request.worktreeKey)}`);
    if (request.jobId) where.push(`job_id = $${params.push(request.jobId)}`);
    if (request.statuses) where.push(`status = ANY($${params.push(request.statuses)}::text[])`);
    const limit = `$${params.push(request.limit)}`;
    const { rows } = await this.store.pool.query<LeaseRow>(
      `SELECT * FROM worktree_leases ${where.length ? `WHERE ${where.join(' AND ')}` : ''} ORDER BY requested_at, lease_id LIMIT ${limit}`,
      params,
    );
    return { leases: rows.map(viewOf) };
  }

  @CommandHandler(listWorktrees)
  async worktrees(request: RequestOf<typeof listWorktrees>): Promise<ReplyOf<typeof listWorktrees>> {
    const inventory = await worktreesOnDisk(this.workspace, { withDirtyState: true, repositoryUrl: request.repositoryUrl });
    const { rows } = await this.store.pool.query<{ worktree_key: string; lease_id: string }>(
      `SELECT worktree_key, lease_id FROM worktree_leases WHERE status = ANY($1::text[])`,
      [HOLDING_STATUSES],
    );
    const holder = new Map(rows.map((r) => [r.worktree_key, r.lease_id]));
    return {
      worktrees: inventory.worktrees.map((w) => ({
        worktreeKey: w.worktreeKey,
        path: w.path,
        repositoryClone: path.basename(w.clonePath),
        branch: w.branch,
        headSha: w.headSha,
        dirty: w.dirty,
        heldBy: holder.get(w.worktreeKey) ?? null,
        prunable: w.prunable,
      })),
    };
  }

  @CommandHandler(getDiskUsage)
  async diskUsage(): Promise<ReplyOf<typeof getDiskUsage>> {
    return this.disk.measure();
  }
}
