import { Inject, Injectable, type OnModuleDestroy } from '@nestjs/common';
import { InjectPinoLogger, PinoLogger } from 'nestjs-pino';
import { GantryError } from '@gantry/contracts';
import { EventStore, isDatabaseUnreachable, lastLeaseSweep, recordLeaseSweep } from '@gantry/eventstore';
import { Bus } from '@gantry/messaging';
import { BusLossResumption, describeFault, holdHereIfAsked, RecurringFaults, Sweep } from '@gantry/service-runtime';
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
  private readonly resumption: BusLossResumption;
  private sweepingWithoutBus = false;
  /** The keys this replica's passes fail to sweep. */
  private readonly faulty = new RecurringFaults('worktree-lease');

  constructor(
    @Inject(WorktreeLeaseLog) private readonly leases: WorktreeLeaseLog,
    @Inject(EventStore) private readonly store: EventStore,
    @Inject(Bus) private readonly bus: Bus,
    @Inject(WORKTREE_CONFIG) private readonly config: WorktreeConfig,
    @InjectPinoLogger('lease-sweep') private readonly log: PinoLogger,
  ) {
    this.sweeps = new Sweep({ name: 'lease-sweep', everyMs: config.sweepIntervalMs, run: () => this.sweep(), log });
    this.resumption = new BusLossResumption(bus, async () => {
      const resumed = await this.resumeHeldLeases('bus_loss');
      this.sweepingWithoutBus = false;
      this.log.info({ keys: resumed }, 'NATS is back: held worktree leases resumed');
    });
  }

  start(): void {
    this.sweeps.start();
  }

  async onModuleDestroy(): Promise<void> {
    await this.sweeps.stop();
    this.faulty.clear();
  }

  /**
   * Once the bus is back after a loss, every held lease resumed (once per loss), before the sweep
   * expires anything and before a holder's command judges its lease (BusLossResumption).
   */
  afterBusLoss(): Promise<void> {
    return this.resumption.settle();
  }

  /**
   * One pass; returns the number of commands that changed something. None while this service's bus
   * is down: the holders cannot reach it then (their renewals find nobody serving, and do not count
   * that time), so a lease that ran out meanwhile says nothing about its holder, and expiring it would
   * rescue and reset the worktree under a running agent. Once the bus is back, every held lease is
   * resumed before anything expires (docs/worktrees.md, "When a lease ends").
   */
  async sweep(): Promise<number> {
    if (!this.bus.connected) {
      if (!this.sweepingWithoutBus) this.log.warn('NATS is not reachable: no worktree lease expires until it is back');
      this.sweepingWithoutBus = true;
      return 0;
    }
    await this.afterBusLoss();
    const now = this.leases.now();
    // This pass looks at every lease that ran out by now: a later start or bus loss resumes none of them.
    await recordLeaseSweep(this.store.pool, new Date(now));
    const { rows } = await this.store.pool.query<{ worktree_key: string }>(
      `SELECT DISTINCT worktree_key FROM worktree_leases
        WHERE (status = 'ready' AND expires_at <= $1)
           OR (status = 'acquiring_lock' AND lock_deadline <= $1)`,
      [now],
    );
    let changed = 0;
    this.faulty.passBegins();
    for (const { worktree_key: worktreeKey } of rows) {
      // Lost during the pass: the rest waits for the resumption.
      if (this.resumption.pending) return changed;
      try {
        changed += await this.sweepKey(worktreeKey, now);
      } catch (error) {
        // No database: the pass ends here, the next one tries again.
        if (isDatabaseUnreachable(error)) throw error;
        // Anything else is a fault of this key (a log this version cannot read, a row the database
        // refuses): counted, said loudly when first found and then at growing intervals (not at every
        // pass: a key stuck for hours would flood the log), tried again at every pass, and the pass goes
        // on — stopped at it, every pass would stop there again and no later key would ever expire
        // (docs/worktrees.md, "When a lease ends").
        const fault = this.faulty.failed(worktreeKey, Date.parse(now));
        if (fault.log) {
          this.log.error(
            { worktreeKey, ...describeFault(error), failedTries: fault.failedTries, faultySince: new Date(fault.since).toISOString() },
            'a worktree key could not be swept; the pass goes on without it',
          );
        }
        continue;
      }
      const fault = this.faulty.handled(worktreeKey);
      if (fault) this.log.info({ worktreeKey, failedTries: fault.failedTries, faultySince: new Date(fault.since).toISOString() }, 'a worktree key that could not be swept has been swept');
    }
    // A faulty key this whole pass did not meet has moved on: the next failure is news again.
    this.faulty.passEnded();
    return changed;
  }

  /** The commands of one key whose deadlines are due by `now`; returns how many changed something. */
  private async sweepKey(worktreeKey: string, now: string): Promise<number> {
    const state = await this.leases.load(worktreeKey);
    let changed = 0;
    let waitersDue = false;
    for (const deadline of upcomingDeadlines(state)) {
      if (Date.parse(deadline.at) > Date.parse(now)) break;
      if (deadline.kind === 'lock_deadline') {
        waitersDue = true;
        continue;
      }
      // Test-only (GANTRY_TEST_HOLD_AT): a replica that dies in the middle of its pass, before it expires a lease that ran out.
      await holdHereIfAsked('worktree-sweep:lease-due');
      changed += await this.run(worktreeKey, { type: 'ExpireWorktreeLease', data: { leaseId: deadline.leaseId, now } });
    }
    if (waitersDue) changed += await this.run(worktreeKey, { type: 'TimeOutLockWaiters', data: { now } });
    return changed;
  }

  /**
   * When no holder could renew (`after`: a start after nobody served — WorktreeRecovery.resumeAtStart —
   * or this replica's bus back after a loss), every lease still held that was still live when serving
   * stopped runs as long again from now. Serving is taken to have stopped at the latest sweep any
   * replica made with its bus up (nothing later proves one served): a lease that ran out before it ran
   * out while one served, and is left to the sweep (ranOutWhileServed). `signal` (a start's lock) stops
   * the work between two keys. Returns the keys looked at.
   */
  async resumeHeldLeases(after: 'start' | 'bus_loss', signal?: AbortSignal): Promise<number> {
    const { rows } = await this.store.pool.query<{ worktree_key: string }>(
      `SELECT DISTINCT worktree_key FROM worktree_leases WHERE status IN ('creating_or_reusing', 'syncing', 'ready')`,
    );
    const lastSweptAt = await lastLeaseSweep(this.store.pool);
    const now = this.leases.now();
    for (const { worktree_key: worktreeKey } of rows) {
      // The start's lock lost: stop here; the resumption is done again under the lock (resumeAtStart).
      signal?.throwIfAborted();
      await this.leases.decide(worktreeKey, { type: 'ResumeWorktreeLeases', data: { now, after, lastSweptAt } }, { metadata: serviceActor(after === 'start' ? 'resume-at-start' : 'resume-after-bus-loss') });
      // Test-only (GANTRY_TEST_HOLD_AT): the start's lock lost half-way through the resumption.
      if (after === 'start') await holdHereIfAsked('worktree-start:resumed-key');
    }
    return rows.length;
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
