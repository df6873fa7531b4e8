import { Inject, Injectable, type OnModuleDestroy } from '@nestjs/common';
import { InjectPinoLogger, PinoLogger } from 'nestjs-pino';
import { GantryError } from '@gantry/contracts';
import { EventStore } from '@gantry/eventstore';
import { Sweep } from '@gantry/service-runtime';
import { upcomingDeadlines, type WorktreeLeaseCommand } from '../domain/index.js';
import { WORKTREE_CONFIG, type WorktreeConfig } from '../infrastructure/worktree-config.js';
import { serviceActor, WorktreeLeaseLog } from './lease-log.js';

/**
 * Expiry by this service's own clock (docs/worktrees.md): on a timer, the keys whose holder's lease
 * or a waiter's lock deadline has passed (found in the read model) are loaded, and each deadline the
 * decider lists as due becomes its command — ExpireWorktreeLease (→ release with rescue) or
 * TimeOutLockWaiters. The decider ignores a deadline that moved (a renewal) in the meantime.
 */
@Injectable()
export class LeaseSweep implements OnModuleDestroy {
  private readonly sweeps: Sweep;

  constructor(
    @Inject(WorktreeLeaseLog) private readonly leases: WorktreeLeaseLog,
    @Inject(EventStore) private readonly store: EventStore,
    @Inject(WORKTREE_CONFIG) private readonly config: WorktreeConfig,
    @InjectPinoLogger('lease-sweep') private readonly log: PinoLogger,
  ) {
    this.sweeps = new Sweep({ name: 'lease-sweep', everyMs: config.sweepIntervalMs, run: () => this.sweep(), log });
  }

  start(): void {
    this.sweeps.start();
  }

  async onModuleDestroy(): Promise<void> {
    await this.sweeps.stop();
  }

  /** One pass; returns the number of commands that changed something. */
  async sweep(): Promise<number> {
    const now = this.leases.now();
    const { rows } = await this.store.pool.query<{ worktree_key: string }>(
      `SELECT DISTINCT worktree_key FROM worktree_leases
        WHERE (status = 'ready' AND expires_at <= $1)
           OR (status = 'acquiring_lock' AND lock_deadline <= $1)`,
      [now],
    );
    let changed = 0;
    for (const { worktree_key: worktreeKey } of rows) {
      const state = await this.leases.load(worktreeKey);
      let waitersDue = false;
      for (const deadline of upcomingDeadlines(state)) {
        if (Date.parse(deadline.at) > Date.parse(now)) break;
        if (deadline.kind === 'lock_deadline') {
          waitersDue = true;
          continue;
        }
        changed += await this.run(worktreeKey, { type: 'ExpireWorktreeLease', data: { leaseId: deadline.leaseId, now } });
      }
      if (waitersDue) changed += await this.run(worktreeKey, { type: 'TimeOutLockWaiters', data: { now } });
    }
    return changed;
  }

  private async run(worktreeKey: string, command: WorktreeLeaseCommand): Promise<number> {
    try {
      await this.leases.decide(worktreeKey, command, { metadata: serviceActor('lease-sweep') });
      if (command.type === 'ExpireWorktreeLease') this.log.info({ worktreeKey, leaseId: command.data.leaseId }, 'worktree lease expired');
      return 1;
    } catch (error) {
      if (error instanceof GantryError && error.code === 'NOT_FOUND') return 0;
      throw error;
    }
  }
}
