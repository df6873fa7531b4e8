import path from 'node:path';
import { Inject, Injectable, type OnApplicationBootstrap, type OnModuleDestroy } from '@nestjs/common';
import { EventStore } from '@gantry/eventstore';
import { JsonLogger, Readiness } from '@gantry/service-runtime';
import { planReconciliation, type ReconciliationAction } from '../domain/index.js';
import { listWorktrees, pruneWorktrees, quarantineOrphanDirectory, type GitWorkspace } from '../infrastructure/git/index.js';
import { GIT_WORKSPACE } from '../infrastructure/workspace.provider.js';
import { WorktreeEffectProcessor } from './effect-processor.js';
import { JobLifecycleReactions, TERMINAL_JOB_STATUSES } from './job-lifecycle.js';
import { LeaseReleases } from './lease-releases.js';
import { serviceActor, WorktreeLeaseLog } from './lease-log.js';
import { LeaseSweep } from './lease-sweep.js';

const CATCH_UP_LIMIT_MS = 15_000;
const SHUTDOWN_GRACE_MS = 20_000;

/**
 * Startup and shutdown of the worktree side:
 * - reconcile the log with the disk (`git worktree list`) by the pure plan: orphan directories moved
 *   aside, prunable worktrees pruned, requested-but-unreported effects run again, ready leases whose
 *   worktree is gone released as stale;
 * - once the jobs consumer has caught up, the stale reset: leases whose job is terminal, requeued
 *   past their claim, or unknown to us are released;
 * - at shutdown every live lease is released (waiters withdrawn) and the rescues are awaited.
 * /ready stays false until reconciliation and stale reset are done.
 */
@Injectable()
export class WorktreeRecovery implements OnApplicationBootstrap, OnModuleDestroy {
  private phase: 'starting' | 'reconciled' | 'recovered' | 'failed' = 'starting';
  private background: Promise<void> | null = null;
  private readonly log;

  constructor(
    @Inject(WorktreeLeaseLog) private readonly leases: WorktreeLeaseLog,
    @Inject(WorktreeEffectProcessor) private readonly effects: WorktreeEffectProcessor,
    @Inject(LeaseReleases) private readonly releases: LeaseReleases,
    @Inject(JobLifecycleReactions) private readonly jobs: JobLifecycleReactions,
    @Inject(LeaseSweep) private readonly sweep: LeaseSweep,
    @Inject(GIT_WORKSPACE) private readonly workspace: GitWorkspace,
    @Inject(EventStore) private readonly store: EventStore,
    @Inject(Readiness) private readonly readiness: Readiness,
    @Inject(JsonLogger) logger: JsonLogger,
  ) {
    this.log = logger.forComponent('worktree-recovery');
  }

  async onApplicationBootstrap(): Promise<void> {
    this.readiness.register('worktree-recovery', () => ({ ok: this.phase === 'recovered', detail: { phase: this.phase, effectsInFlight: this.effects.busy } }));
    const actions = await this.reconcile();
    this.log.log('reconciled leases with the disk', { actions: actions.map((a) => a.type) });
    this.phase = 'reconciled';
    this.sweep.start();
    // Not awaited: the jobs consumer starts with the runtime, after this hook.
    this.background = this.recoverUntilDone();
  }

  async onModuleDestroy(): Promise<void> {
    this.leases.close();
    await this.background;
    await this.sweep.onModuleDestroy();
    let released = 0;
    for (const lease of await this.releases.liveLeases()) {
      if (await this.releases.end(lease, 'shutdown').catch(() => false)) released++;
    }
    await this.effects.stop(SHUTDOWN_GRACE_MS);
    this.log.log('leases released at shutdown', { released });
  }

  /** Plans against what git and the log say now, then runs the plan in its order. */
  async reconcile(): Promise<ReconciliationAction[]> {
    const keys = await this.leases.keys();
    const streams = await Promise.all(keys.map((key) => this.leases.load(key)));
    const inventory = await listWorktrees(this.workspace);
    const plan = planReconciliation(streams, {
      worktrees: inventory.worktrees.map((w) => ({ worktreeKey: w.worktreeKey, prunable: w.prunable })),
      orphanDirectories: inventory.orphanDirectories.map((p) => path.basename(p)),
    });
    let pruned = false;
    for (const action of plan) {
      switch (action.type) {
        case 'quarantine_orphan': {
          const movedTo = await quarantineOrphanDirectory(this.workspace, { directory: action.directory, now: this.store.clock() });
          this.log.warn('orphan worktree directory moved aside', { directory: action.directory, movedTo });
          break;
        }
        case 'prune':
          if (!pruned) await pruneWorktrees(this.workspace);
          pruned = true;
          break;
        case 'run_effect':
          this.effects.enqueue([action.effect]);
          break;
        case 'release_stale_lease':
          await this.leases.decide(
            action.worktreeKey,
            { type: 'ReleaseWorktreeLease', data: { leaseId: action.leaseId, token: action.token, reason: 'stale_reset', removeWorktree: true, now: this.leases.now() } },
            { metadata: serviceActor('reconcile') },
          );
          break;
        default: {
          const unknown: never = action;
          throw new Error(`unknown reconciliation action ${JSON.stringify(unknown)}`);
        }
      }
    }
    return plan;
  }

  /** The stale reset, tried again after a failure (a database or NATS hiccup) until it is done or the service stops. */
  private async recoverUntilDone(): Promise<void> {
    while (!this.leases.closing) {
      try {
        await this.afterCatchUp();
        return;
      } catch (error) {
        this.phase = 'failed';
        this.log.error('stale reset failed; trying again', { error: String(error) });
        await new Promise((r) => setTimeout(r, 2_000));
      }
    }
  }

  private async afterCatchUp(): Promise<void> {
    const deadline = Date.now() + CATCH_UP_LIMIT_MS;
    for (;;) {
      const backlog = await this.jobs.backlog().catch(() => Number.POSITIVE_INFINITY);
      if (backlog === 0) break;
      if (Date.now() > deadline) {
        this.log.warn('jobs consumer did not catch up in time; stale reset uses what it has', { backlog });
        break;
      }
      if (this.leases.closing) return;
      await new Promise((r) => setTimeout(r, 100));
    }
    await this.staleReset();
    await this.effects.idle();
    this.phase = 'recovered';
  }

  /** Releases the leases whose job is terminal, has moved on to a later claim or was requeued, or is unknown. */
  async staleReset(): Promise<number> {
    const { rows: jobs } = await this.store.pool.query<{ job_id: string; status: string; lease_token: number | null }>(
      `SELECT job_id, status, lease_token FROM job_statuses`,
    );
    const byJob = new Map(jobs.map((j) => [j.job_id, j]));
    let released = 0;
    for (const lease of await this.releases.liveLeases()) {
      const job = byJob.get(lease.job_id);
      const stale =
        !job ||
        (TERMINAL_JOB_STATUSES as readonly string[]).includes(job.status) ||
        job.status === 'QUEUED' ||
        (job.lease_token !== null && job.lease_token > lease.job_lease_token);
      if (!stale) continue;
      if (await this.releases.end(lease, 'stale_reset')) released++;
      this.log.warn('stale worktree lease reset', { leaseId: lease.lease_id, jobId: lease.job_id, jobStatus: job?.status ?? 'unknown' });
    }
    return released;
  }
}
