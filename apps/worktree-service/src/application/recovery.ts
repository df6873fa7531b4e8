import path from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { Inject, Injectable, type OnApplicationBootstrap, type OnModuleDestroy } from '@nestjs/common';
import { InjectPinoLogger, PinoLogger } from 'nestjs-pino';
import { ErrorCode, GantryError } from '@gantry/contracts';
import { EventStore, ProcessEpoch } from '@gantry/eventstore';
import { componentLogger, GantryTransport, holdHereIfAsked, Readiness, SERVICE_CONFIG, type ServiceConfig } from '@gantry/service-runtime';
import { claimVerdict, planReconciliation, type ClaimEndedBy, type ReconciliationAction } from '../domain/index.js';
import { listWorktrees, pruneWorktrees, quarantineOrphanDirectory, withSignal, type GitWorkspace } from '../infrastructure/git/index.js';
import { GIT_WORKSPACE } from '../infrastructure/workspace.provider.js';
import { isLockOrDatabaseOutage, WorktreeLocks } from '../infrastructure/worktree-locks.js';
import { WorktreeEffectProcessor } from './effect-processor.js';
import { JobLifecycleReactions, type JobEventProgress } from './job-lifecycle.js';
import { LeaseReleases } from './lease-releases.js';
import { serviceActor, WorktreeLeaseLog } from './lease-log.js';
import { LeaseSweep } from './lease-sweep.js';

const CATCH_UP_LIMIT_MS = 15_000;
/** The ack wait of the jobs consumer (the messaging default): how long a dead process's events stay held. */
const JOBS_ACK_WAIT_MS = 30_000;
const SHUTDOWN_GRACE_MS = 20_000;
/** Between the tries of a start whose lock or database was lost (reconcileAtStart, resumeAtStart). */
const START_RETRY_MS = [500, 1_000, 2_000, 5_000];
/** How long, waits between its tries summed, a start's reconciliation is tried again on an outage before the start fails. */
const RECONCILE_RETRY_LIMIT_MS = 30_000;

/**
 * Startup and shutdown of the worktree side:
 * - reconcile the log with the disk (`git worktree list`) by the pure plan: orphan directories moved
 *   aside, prunable worktrees pruned, requested-but-unreported effects run again, ready leases whose
 *   worktree is gone released as stale;
 * - once the jobs consumer has caught up, the stale reset: leases whose claim has ended are released
 *   (ended by their holder) or wait for their holder (ended elsewhere: see claimVerdict);
 * - at shutdown no lease is freed (a holder's agent may still write): only the effects in flight finish.
 * /ready stays false until reconciliation and the first stale reset are done (see afterCatchUp).
 */
@Injectable()
export class WorktreeRecovery implements OnApplicationBootstrap, OnModuleDestroy {
  private phase: 'starting' | 'reconciled' | 'recovered' | 'failed' = 'starting';
  private background: Promise<void> | null = null;
  private jobEvents: JobEventProgress | null = null;
  private epoch: ProcessEpoch | null = null;

  constructor(
    @Inject(WorktreeLeaseLog) private readonly leases: WorktreeLeaseLog,
    @Inject(WorktreeEffectProcessor) private readonly effects: WorktreeEffectProcessor,
    @Inject(LeaseReleases) private readonly releases: LeaseReleases,
    @Inject(JobLifecycleReactions) private readonly jobs: JobLifecycleReactions,
    @Inject(LeaseSweep) private readonly sweep: LeaseSweep,
    @Inject(GIT_WORKSPACE) private readonly workspace: GitWorkspace,
    @Inject(EventStore) private readonly store: EventStore,
    @Inject(Readiness) private readonly readiness: Readiness,
    @Inject(WorktreeLocks) private readonly locks: WorktreeLocks,
    @Inject(SERVICE_CONFIG) private readonly config: ServiceConfig,
    @Inject(GantryTransport) private readonly transport: GantryTransport,
    @InjectPinoLogger('worktree-recovery') private readonly log: PinoLogger,
  ) {}

  async onApplicationBootstrap(): Promise<void> {
    this.readiness.register('worktree-recovery', () => ({ ok: this.phase === 'recovered', detail: { phase: this.phase, effectsInFlight: this.effects.busy, jobEvents: this.jobEvents } }));
    const actions = await this.reconcileAtStart();
    this.log.info({ actions: actions.map((a) => a.type) }, 'reconciled leases with the disk');
    this.phase = 'reconciled';
    // The held leases run again from the moment the service serves, and only then are they swept: no
    // holder could renew before, and a start slower than a lease would otherwise expire them at its
    // first sweep (docs/worktrees.md, "When a lease ends").
    this.transport.beforeServing(async () => {
      await this.resumeAtStart();
      this.sweep.start();
      // Not awaited: the jobs consumer starts with the transport, right after this.
      this.background = this.recoverUntilDone();
    });
    // Test-only (GANTRY_TEST_HOLD_AT): a start slow to serve its first command.
    await holdHereIfAsked('worktree-start:before-serving');
  }

  /**
   * The start's reconciliation, done again in this process when the database or a key's lock was
   * lost or unreachable on the way (a connection reset, PostgreSQL restarting): after 0.5 s, 1 s,
   * 2 s, then every 5 s, for 30 s of waits in all; then, or on any other failure, the start fails.
   * Each try plans afresh from what the log and the disk say then, and each action is taken only if
   * still called for (reconcile), so what a lost try did is not done twice (docs/worktrees.md,
   * "Restart and recovery").
   */
  async reconcileAtStart(): Promise<ReconciliationAction[]> {
    let waited = 0;
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.reconcile();
      } catch (error) {
        const delay = START_RETRY_MS[Math.min(attempt - 1, START_RETRY_MS.length - 1)]!;
        if (!isLockOrDatabaseOutage(error) || this.leases.closing || waited + delay > RECONCILE_RETRY_LIMIT_MS) throw error;
        waited += delay;
        this.log.warn({ attempt, retryInMs: delay, error: String(error) }, "the start's reconciliation lost the database or a key's lock; it is done again");
        await new Promise((r) => setTimeout(r, delay));
      }
    }
  }

  /**
   * Under the lock of the schema's starts (one replica at a time): this process's epoch registered,
   * then, if no other replica is running, the held leases resumed. A loss of that lock, or of the
   * database, on the way stops the work (the lock's signal) and it is done again under the lock — in
   * this process, not by failing the start: a replica that started meanwhile saw this one's epoch
   * and left the resumption to it, and a restart of this one would see that replica and leave it
   * too. So the decision to resume, once made, stands; each key is resumed again from the start (a
   * resumption is as long again from now: resuming a key twice only moves its expiry a little later).
   * Any other failure fails the start (docs/worktrees.md, "A lock whose connection is lost").
   */
  async resumeAtStart(): Promise<void> {
    let resume: boolean | undefined;
    for (let attempt = 1; ; attempt++) {
      try {
        await this.locks.whileStarting(async (signal) => {
          this.epoch ??= await this.startEpoch();
          if (resume === undefined) {
            const peers = await this.epoch.livePeers({ forgetGone: true });
            resume = peers.length === 0;
            if (!resume) this.log.info({ replicas: peers.length }, 'another replica served meanwhile: held leases go on from their last renewal');
          }
          if (!resume) return;
          const resumed = await this.sweep.resumeHeldLeases('start', signal);
          if (resumed > 0) this.log.info({ keys: resumed }, 'held leases resumed at start');
        });
        return;
      } catch (error) {
        if (!isLockOrDatabaseOutage(error) || this.leases.closing) throw error;
        const delay = START_RETRY_MS[Math.min(attempt - 1, START_RETRY_MS.length - 1)]!;
        this.log.warn({ attempt, retryInMs: delay, error: String(error) }, 'the start lost its lock or the database; its resumption of held leases is done again under the lock');
        await new Promise((r) => setTimeout(r, delay));
      }
    }
  }

  /**
   * A shutdown frees no lease (docs/worktrees.md, "When a lease ends"): the agent of a ready lease may
   * still write into its worktree, and its runner goes on renewing and releases it with its token once
   * the service is back; a waiter stays in line, its acquire asked again under its key; a lease being
   * prepared is prepared again by the next start's reconciliation. Only the effects in flight finish.
   */
  async onModuleDestroy(): Promise<void> {
    this.leases.close();
    await this.background;
    await this.sweep.onModuleDestroy();
    await this.effects.stop(SHUTDOWN_GRACE_MS);
    await this.epoch?.close();
    this.log.info({ held: (await this.releases.liveLeases().catch(() => [])).length }, 'stopped; leases stay with their holders');
  }

  /**
   * This process's epoch, registered in `worktree_processes` for as long as it lives: a replica that
   * starts while this one runs sees that the service was served (docs/worktrees.md, "Replicas").
   */
  private startEpoch(): Promise<ProcessEpoch> {
    const log = componentLogger(this.log, 'process-epoch');
    return ProcessEpoch.start({
      databaseUrl: this.config.databaseUrl,
      schema: this.config.schema,
      pool: this.store.pool,
      timeouts: this.config.databaseTimeouts,
      log,
      names: { table: 'worktree_processes', lock: 'gantry.worktree.process', channel: 'gantry_worktree_processes', applicationName: 'gantry-worktree-epoch' },
      // Only a later start's judgement rests on it: taken for gone, this process would have held leases resumed once more.
      onLockLost: (error) => log.warn('the epoch lock connection was lost; a replica starting now resumes held leases', { error: String(error) }),
    });
  }

  /**
   * Plans against what git and the log say now, then runs the plan in its order. Another replica may
   * be at work meanwhile (docs/worktrees.md, "Replicas"): each clone is listed in its turn among the git
   * runs on it, and an action that moves, removes or releases is taken under the key's lock — no
   * effect of the key runs meanwhile, in any replica — only if the log and the disk still call for it
   * then (stillPlanned): what was planned may have been made, or moved on, since.
   */
  async reconcile(): Promise<ReconciliationAction[]> {
    const inventory = await listWorktrees(this.workspace, { inTurn: true });
    const keys = await this.leases.keys();
    const streams = await Promise.all(keys.map((key) => this.leases.load(key)));
    const plan = planReconciliation(streams, {
      worktrees: inventory.worktrees.map((w) => ({ worktreeKey: w.worktreeKey, prunable: w.prunable })),
      orphanDirectories: inventory.orphanDirectories.map((p) => path.basename(p)),
    });
    // Test-only (GANTRY_TEST_HOLD_AT): another replica works on between the plan and its actions.
    await holdHereIfAsked('worktree-reconcile:planned');
    let pruned = false;
    for (const action of plan) {
      switch (action.type) {
        case 'quarantine_orphan':
          await this.locks.onKey(action.directory, (signal) => this.quarantine(action.directory, withSignal(this.workspace, signal)));
          break;
        case 'prune':
          if (!pruned) await pruneWorktrees(this.workspace);
          pruned = true;
          break;
        case 'run_effect':
          // Asked for and not reported: it may have run, up to or past its git work, before the crash.
          this.effects.enqueue([action.effect], { again: true });
          break;
        case 'forget_missing_worktree':
          await this.locks.onKey(action.worktreeKey, async (signal) => {
            if (!(await this.stillPlanned(action, signal))) return;
            await this.leases
            .decide(action.worktreeKey, { type: 'EvictIdleWorktree', data: { worktreeKey: action.worktreeKey, reason: 'missing', now: this.leases.now() } }, {
              metadata: serviceActor('reconcile'),
            })
            .catch((error: unknown) => {
              // Taken by a new lease meanwhile: its create makes the worktree again.
              if (!(error instanceof GantryError && error.code === ErrorCode.PRECONDITION_FAILED)) throw error;
            });
            this.log.warn({ worktreeKey: action.worktreeKey }, 'worktree directory gone; its record is completed by an eviction');
          });
          break;
        case 'release_stale_lease':
          await this.locks.onKey(action.worktreeKey, async (signal) => {
            if (!(await this.stillPlanned(action, signal))) return;
            await this.leases.decide(
              action.worktreeKey,
              { type: 'ReleaseWorktreeLease', data: { leaseId: action.leaseId, token: action.token, reason: 'stale_reset', removeWorktree: true, now: this.leases.now() } },
              { metadata: serviceActor('reconcile') },
            );
          });
          break;
        default: {
          const unknown: never = action;
          throw new Error(`unknown reconciliation action ${JSON.stringify(unknown)}`);
        }
      }
    }
    return plan;
  }

  /**
   * Moves aside a directory no clone knows, under its key's lock. Asked again here: a replica's
   * `git worktree add` may have made it a worktree of its clone since the inventory.
   */
  private async quarantine(directory: string, workspace: GitWorkspace): Promise<void> {
    try {
      const movedTo = await quarantineOrphanDirectory(workspace, { directory, now: this.store.clock() });
      this.log.warn({ directory, movedTo }, 'orphan worktree directory moved aside');
    } catch (error) {
      if (!(error instanceof GantryError && error.code === ErrorCode.PRECONDITION_FAILED)) throw error;
      this.log.info({ directory }, 'worktree directory made a worktree since the inventory (another replica); left alone');
    }
  }

  /**
   * Whether the key's log, and its clone's worktrees asked now, still call for the action (under the
   * key's lock, whose `signal` stops the listing's git when the lock is lost; the action is then not
   * taken and the reconciliation fails, as on any other failure).
   */
  private async stillPlanned(action: Extract<ReconciliationAction, { worktreeKey: string }>, signal: AbortSignal): Promise<boolean> {
    const state = await this.leases.load(action.worktreeKey);
    const disk = state.repositoryUrl === null ? { worktrees: [] } : await listWorktrees(withSignal(this.workspace, signal), { repositoryUrl: state.repositoryUrl, inTurn: true });
    const again = planReconciliation([state], {
      worktrees: disk.worktrees.filter((w) => w.worktreeKey === action.worktreeKey).map((w) => ({ worktreeKey: w.worktreeKey, prunable: w.prunable })),
      orphanDirectories: [],
    });
    const still = again.some((planned) => isDeepStrictEqual(planned, action));
    if (!still) this.log.info({ action: action.type, worktreeKey: action.worktreeKey }, 'reconciliation action no longer called for (another replica moved the key on); not taken');
    signal.throwIfAborted();
    return still;
  }

  /** The stale reset, tried again after a failure (a database or NATS hiccup) until it is done or the service stops. */
  private async recoverUntilDone(): Promise<void> {
    while (!this.leases.closing) {
      try {
        await this.afterCatchUp();
        return;
      } catch (error) {
        if (this.phase !== 'recovered') this.phase = 'failed';
        this.log.error({ error: String(error) }, 'stale reset failed; trying again');
        await new Promise((r) => setTimeout(r, 2_000));
      }
    }
  }

  /**
   * Ready once every job event has been handed to a consumer: the stale reset then acts on what
   * is known for certain. Events a killed predecessor had taken and not acknowledged are not waited
   * for — they come back to our consumer when their ack wait runs out and are handled like any
   * other (each releases what it must); only then does a second, complete pass decide the leases
   * whose claim the service knows nothing about.
   */
  private async afterCatchUp(): Promise<void> {
    if (this.phase !== 'recovered') {
      const progress = await this.untilDelivered();
      if (this.leases.closing) return;
      const complete = progress !== null && progress.unacknowledged === 0;
      await this.staleReset({ complete });
      // The effects reconciliation and the stale reset asked for; not every effect later work asks for.
      await this.effects.settled();
      this.phase = 'recovered';
      if (complete) return;
    }
    await this.untilAcknowledged();
    if (this.leases.closing) return;
    await this.staleReset({ complete: true });
  }

  private async untilDelivered(): Promise<JobEventProgress | null> {
    const deadline = Date.now() + CATCH_UP_LIMIT_MS;
    for (;;) {
      const progress = await this.jobs.progress().catch(() => null);
      this.jobEvents = progress;
      if (progress && progress.undelivered === 0) return progress;
      if (Date.now() > deadline) {
        this.log.warn({ jobEvents: progress }, 'jobs consumer did not catch up in time; stale reset uses what it has');
        return null;
      }
      if (this.leases.closing) return null;
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** Until no job event is outstanding, or long enough for every held one to have come back and been handled. */
  private async untilAcknowledged(): Promise<void> {
    const deadline = Date.now() + 2 * JOBS_ACK_WAIT_MS;
    while (!this.leases.closing && Date.now() < deadline) {
      const progress = await this.jobs.progress().catch(() => null);
      this.jobEvents = progress;
      if (progress && progress.undelivered === 0 && progress.unacknowledged === 0) return;
      await new Promise((r) => setTimeout(r, 500));
    }
  }

  /**
   * The leases still held whose claim has ended, by what the service learned of jobs (claimVerdict):
   * released when the claim's holder ended it, left waiting for their holder otherwise. Only in a
   * complete pass (every job event handled) does a claim the service never heard of count as ended.
   */
  async staleReset(options: { complete: boolean } = { complete: true }): Promise<number> {
    const { rows: jobs } = await this.store.pool.query<{ job_id: string; status: string; lease_token: number | null; ended_by: ClaimEndedBy | null }>(
      `SELECT job_id, status, lease_token, ended_by FROM job_statuses`,
    );
    const byJob = new Map(jobs.map((j) => [j.job_id, { status: j.status, leaseToken: j.lease_token, endedBy: j.ended_by }]));
    let changed = 0;
    for (const lease of await this.releases.liveLeases()) {
      const verdict = claimVerdict(byJob.get(lease.job_id), lease.job_lease_token, options.complete);
      if (verdict.kind === 'keep') continue;
      if (verdict.kind === 'release') {
        if (await this.releases.end(lease, 'stale_reset')) changed++;
      } else if (lease.release_pending_cause === null) {
        await this.releases.awaitHolder(lease, verdict.cause);
        changed++;
      }
      this.log.warn({ leaseId: lease.lease_id, jobId: lease.job_id, jobStatus: byJob.get(lease.job_id)?.status ?? 'unknown', verdict: verdict.kind }, 'stale worktree lease reset');
    }
    return changed;
  }
}
