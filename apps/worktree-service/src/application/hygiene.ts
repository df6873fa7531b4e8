import { Inject, Injectable } from '@nestjs/common';
import { InjectPinoLogger, PinoLogger } from 'nestjs-pino';
import { canonicalRepositoryUrl, GantryError } from '@gantry/contracts';
import { EventStore } from '@gantry/eventstore';
import { WORKTREE_CONFIG, type WorktreeConfig } from '../infrastructure/worktree-config.js';
import { serviceActor, WorktreeLeaseLog } from './lease-log.js';

const LIVE = `('acquiring_lock', 'creating_or_reusing', 'syncing', 'ready', 'releasing')`;

/**
 * The cap on worktrees per repository: when a repository has more than the cap, its idle worktrees
 * (nobody holds or waits for them) go, least recently used first — each through an eviction on its
 * own WorktreeLease stream, whose effect rescues its changes before `git worktree remove`.
 */
@Injectable()
export class WorktreeHygiene {
  private chain: Promise<unknown> = Promise.resolve();

  constructor(
    @Inject(EventStore) private readonly store: EventStore,
    @Inject(WorktreeLeaseLog) private readonly leases: WorktreeLeaseLog,
    @Inject(WORKTREE_CONFIG) private readonly config: WorktreeConfig,
    @InjectPinoLogger('worktree-hygiene') private readonly log: PinoLogger,
  ) {}

  /** Evicts idle worktrees of `repositoryUrl` beyond the cap; returns the keys asked to go. One pass at a time. */
  enforceCap(repositoryUrl: string): Promise<string[]> {
    const run = this.chain.then(() => this.enforce(repositoryUrl));
    this.chain = run.catch(() => undefined);
    return run;
  }

  private async enforce(repositoryUrl: string): Promise<string[]> {
    // Every spelling of the repository counts (its worktrees of keys from before URLs had a canonical
    // spelling too): the read model keeps each worktree's URL as it was asked for.
    const repository = canonicalRepositoryUrl(repositoryUrl);
    const { rows: all } = await this.store.pool.query<{ worktree_key: string; repository_url: string; idle: boolean }>(
      `SELECT w.worktree_key, w.repository_url,
              (w.held_by IS NULL AND NOT EXISTS (
                 SELECT 1 FROM worktree_leases l WHERE l.worktree_key = w.worktree_key AND l.status IN ${LIVE})) AS idle
         FROM worktrees w ORDER BY w.last_used_at, w.worktree_key`,
    );
    const rows = all.filter((row) => canonicalRepositoryUrl(row.repository_url) === repository);
    let excess = rows.length - this.config.maxWorktreesPerRepository;
    const evicted: string[] = [];
    for (const row of rows) {
      if (excess <= 0) break;
      if (!row.idle) continue;
      try {
        await this.leases.decide(row.worktree_key, { type: 'EvictIdleWorktree', data: { worktreeKey: row.worktree_key, reason: 'over_capacity', now: this.leases.now() } }, {
          metadata: serviceActor('hygiene'),
        });
        evicted.push(row.worktree_key);
        excess--;
      } catch (error) {
        // Taken by a new lease since we looked: it is not idle any more.
        if (error instanceof GantryError && error.code === 'PRECONDITION_FAILED') continue;
        throw error;
      }
    }
    if (evicted.length > 0) {
      this.log.info({ repositoryUrl, cap: this.config.maxWorktreesPerRepository, evicted }, 'idle worktrees evicted over the cap');
    }
    return evicted;
  }
}
