import { Inject, Injectable } from '@nestjs/common';
import { InjectPinoLogger, PinoLogger } from 'nestjs-pino';
import { LRUCache } from 'lru-cache';
import { GantryError, type WorktreePreparationFault } from '@gantry/contracts';
import { holdHereIfAsked } from '@gantry/service-runtime';
import { effectIdentity, pendingEffects, type WorktreeEffect, type WorktreeLeaseCommand } from '../domain/index.js';
import {
  createOrReuseWorktree,
  earlierRescue,
  rescueAndRemoveWorktree,
  rescueWorktree,
  syncWorktree,
  withSignal,
  type GitWorkspace,
} from '../infrastructure/git/index.js';
import { GIT_WORKSPACE } from '../infrastructure/workspace.provider.js';
import { isLockOrDatabaseOutage, WorktreeLocks } from '../infrastructure/worktree-locks.js';
import { WorktreeHygiene } from './hygiene.js';
import { serviceActor, WorktreeLeaseLog } from './lease-log.js';
import { killAfterGitIfAsked } from './test-kill-hook.js';

const RETRY_MS = [1_000, 2_000, 5_000, 10_000, 30_000];

/** A create as the process that ran it remembers it (`performance.now()`; PreparedWorktree.atStartingPoint). */
interface CreateBegun {
  at: number;
  madeAtStart?: string;
}

/**
 * Runs the git work the WorktreeLease events ask for, one effect at a time per worktree key (in this
 * process by a queue per key, across replicas by the key's lock), each only while the key's state
 * still asks for it, and reports each outcome as a decider command. Every effect looks at the disk first (the git layer
 * does), so running one again — after a crash, or twice by a sweep — does no harm. A failed create
 * or sync is reported (the acquirer gets sync_failed); a failed rescue or removal is retried with a
 * growing delay, since the lease must not end before its changes are safe. An effect whose lock was
 * lost while it ran reports nothing and is retried the same way (execute).
 */
@Injectable()
export class WorktreeEffectProcessor {
  private readonly tails = new Map<string, Promise<void>>();
  private readonly queued = new Set<string>();
  private readonly retries = new Map<string, { attempt: number; timer: NodeJS.Timeout }>();
  /**
   * What this process knows of each lease's create (by lease id and token): when it began — its sync
   * then starts from the origin as fetched since (the create's own fetch, or a later one) rather than
   * fetch again — and, for a worktree it made at the starting point, that commit: the sync then has
   * nothing to do. After a restart the sync fetches and checks.
   */
  private readonly createsBegun = new LRUCache<string, CreateBegun>({ max: 10_000 });
  /**
   * Effects that may have run before, up to or past their git work, without their report: asked for
   * again by a start's reconciliation, or failed and retried. A rescue of theirs that finds nothing left
   * to rescue then looks for the one an earlier run made (earlierRescue), which is still to be reported.
   */
  private readonly mayHaveRun = new Set<string>();
  private stopped = false;

  constructor(
    @Inject(WorktreeLeaseLog) private readonly leases: WorktreeLeaseLog,
    @Inject(GIT_WORKSPACE) private readonly workspace: GitWorkspace,
    @Inject(WorktreeHygiene) private readonly hygiene: WorktreeHygiene,
    @Inject(WorktreeLocks) private readonly locks: WorktreeLocks,
    @InjectPinoLogger('worktree-effects') private readonly log: PinoLogger,
  ) {
    leases.onEffects((effects) => this.enqueue(effects));
  }

  /**
   * Queues effects behind the ones of the same key; an effect already queued or running is not queued
   * twice. `again`: the effects may have run before (mayHaveRun).
   */
  enqueue(effects: readonly WorktreeEffect[], options: { again?: boolean } = {}): void {
    for (const effect of effects) {
      const id = effectIdentity(effect);
      if (options.again) this.mayHaveRun.add(id);
      if (this.stopped || this.queued.has(id)) continue;
      this.queued.add(id);
      const previous = this.tails.get(effect.worktreeKey) ?? Promise.resolve();
      const run = previous.then(() => this.run(effect, id)).finally(() => this.queued.delete(id));
      const tail: Promise<void> = run
        .catch((error: unknown) => this.log.error({ effect: id, error: describe(error) }, 'worktree effect ended unexpectedly'))
        .then(() => {
          if (this.tails.get(effect.worktreeKey) === tail) this.tails.delete(effect.worktreeKey);
        });
      this.tails.set(effect.worktreeKey, tail);
    }
  }

  /** Resolves when nothing is queued or running (retries waiting on their timer do not count). */
  async idle(): Promise<void> {
    while (this.tails.size > 0) await Promise.all([...this.tails.values()]);
  }

  /**
   * Resolves when the effects queued or running now have run (retries waiting on their timer do not
   * count) — whatever is asked for after this call. Under steady work the processor is never idle;
   * this still ends.
   */
  async settled(): Promise<void> {
    const now = new Set(this.queued);
    for (;;) {
      const waiting = [...now].filter((id) => this.queued.has(id));
      if (waiting.length === 0) return;
      const keys = new Set(waiting.map((id) => id.slice(0, id.indexOf(':'))));
      await Promise.race([...keys].map((key) => this.tails.get(key) ?? Promise.resolve()));
    }
  }

  get busy(): number {
    return this.queued.size;
  }

  async stop(graceMs: number): Promise<void> {
    this.stopped = true;
    for (const { timer } of this.retries.values()) clearTimeout(timer);
    this.retries.clear();
    await Promise.race([this.idle(), new Promise((r) => setTimeout(r, graceMs).unref())]);
  }

  private async run(effect: WorktreeEffect, id: string): Promise<void> {
    const fields = { effect: effect.type, worktreeKey: effect.worktreeKey, ...(effect.type === 'evict' ? {} : { leaseId: effect.leaseId }) };
    // Test-only (GANTRY_TEST_HOLD_AT): an effect that waits, as one queued behind other git work does.
    await holdHereIfAsked(`worktree-effect:${effect.type}`);
    try {
      const ran = await this.locks.onKey(effect.worktreeKey, async (signal) => {
        if (!(await this.stillAsked(effect, id))) return false;
        await this.execute(effect, signal, this.mayHaveRun.has(id));
        return true;
      });
      this.mayHaveRun.delete(id);
      if (!ran) this.log.info(fields, 'worktree effect no longer asked for (run by another replica, or its lease moved on); not run');
      const retry = this.retries.get(id);
      if (retry) clearTimeout(retry.timer);
      this.retries.delete(id);
    } catch (error) {
      this.mayHaveRun.add(id);
      const attempt = (this.retries.get(id)?.attempt ?? 0) + 1;
      const delay = RETRY_MS[Math.min(attempt - 1, RETRY_MS.length - 1)]!;
      this.log.error({ ...fields, attempt, retryInMs: delay, error: describe(error) }, 'worktree effect failed; it will be retried');
      if (this.stopped) return;
      const timer = setTimeout(() => {
        this.queued.delete(id);
        this.enqueue([effect]);
      }, delay);
      timer.unref();
      this.retries.set(id, { attempt, timer });
    }
  }

  /**
   * Whether the key's state still asks for the effect. Asked for once, it may have been run since by
   * another replica (whose reconciliation at start, or whose command, asked for it too) and the lease
   * moved on: a create or a sync run again then would rescue away the work of an agent in its
   * worktree, a removal would remove a later holder's worktree. Checked under the key's lock, which
   * the effect holds until it has reported, so no replica's run of it is between the check and the
   * git work (docs/worktrees.md, "Replicas").
   */
  private async stillAsked(effect: WorktreeEffect, id: string): Promise<boolean> {
    return pendingEffects(await this.leases.load(effect.worktreeKey)).some((asked) => effectIdentity(asked) === id);
  }

  /**
   * `signal` aborts when the key's lock is lost while the effect runs: its git is stopped (the
   * workspace's commands stop with it), and neither that failure nor an outcome reached after it is
   * reported — another replica may have run the effect meanwhile. The effect fails, and is retried
   * under the lock (run), where it is checked again for whether it is still asked for. `again`: it may
   * have run before (mayHaveRun); a rescue of its lease's that it finds already done is then reported.
   */
  private async execute(effect: WorktreeEffect, signal: AbortSignal, again: boolean): Promise<void> {
    const now = () => new Date(this.leases.now());
    const workspace = withSignal(this.workspace, signal);
    switch (effect.type) {
      case 'create_or_reuse': {
        const { worktreeKey, leaseId, token, repositoryUrl, branch, baseRef } = effect;
        let command: WorktreeLeaseCommand;
        let created = false;
        try {
          const create: CreateBegun = { at: performance.now() };
          this.createsBegun.set(`${leaseId}:${token}`, create);
          const rescueFor = rescueOf(effect);
          const prepared = await createOrReuseWorktree(workspace, { worktreeKey, repositoryUrl, branch, baseRef, now: now(), rescueFor });
          if (prepared.outcome === 'created' && prepared.atStartingPoint) create.madeAtStart = prepared.headSha;
          killAfterGitIfAsked('create_or_reuse');
          created = prepared.outcome === 'created';
          const rescue = prepared.rescue ?? (again ? await earlierRescue(workspace, { worktreeKey, rescueFor }) : null);
          command = {
            type: 'RecordWorktreePrepared',
            data: { leaseId, token, outcome: prepared.outcome, path: prepared.path, rescue, now: this.leases.now() },
          };
        } catch (error) {
          if (lockLost(error, signal)) throw error;
          command = { type: 'RecordWorktreeSyncFailed', data: { leaseId, token, stage: 'create_or_reuse', reason: reasonOf(error), fault: faultOf(error), now: this.leases.now() } };
        }
        await this.report(worktreeKey, command, effect, signal);
        if (created) await this.hygiene.enforceCap(repositoryUrl).catch((error: unknown) => this.log.warn({ repositoryUrl, error: describe(error) }, 'worktree cap not enforced'));
        return;
      }
      case 'sync': {
        const { worktreeKey, leaseId, token, repositoryUrl, branch, baseRef } = effect;
        let command: WorktreeLeaseCommand;
        try {
          const create = this.createsBegun.get(`${leaseId}:${token}`);
          const rescueFor = rescueOf(effect);
          const synced = await syncWorktree(workspace, {
            worktreeKey,
            repositoryUrl,
            branch,
            baseRef,
            now: now(),
            fetchedSince: create?.at,
            madeAtStart: create?.madeAtStart,
            rescueFor,
          });
          killAfterGitIfAsked('sync');
          const rescue = synced.rescue ?? (again ? await earlierRescue(workspace, { worktreeKey, rescueFor }) : null);
          command = { type: 'RecordWorktreeSynced', data: { leaseId, token, baseSha: synced.baseSha, rescue, now: this.leases.now() } };
        } catch (error) {
          if (lockLost(error, signal)) throw error;
          command = { type: 'RecordWorktreeSyncFailed', data: { leaseId, token, stage: 'sync', reason: reasonOf(error), fault: faultOf(error), now: this.leases.now() } };
        }
        await this.report(worktreeKey, command, effect, signal);
        return;
      }
      case 'rescue':
      case 'rescue_and_remove': {
        const { worktreeKey, leaseId, token } = effect;
        const rescueFor = rescueOf(effect);
        const outcome =
          effect.type === 'rescue'
            ? { rescue: await rescueWorktree(workspace, { worktreeKey, now: now(), rescueFor }), removed: false }
            : await rescueAndRemoveWorktree(workspace, { worktreeKey, now: now(), rescueFor });
        killAfterGitIfAsked(effect.type);
        // Run before up to its clean-up (or removal), it finds nothing left; what it saved is still reported.
        const rescue = outcome.rescue ?? (again ? await earlierRescue(workspace, { worktreeKey, rescueFor }) : null);
        await this.report(worktreeKey, { type: 'RecordWorktreeReleased', data: { leaseId, token, rescue, removed: outcome.removed, now: this.leases.now() } }, effect, signal);
        return;
      }
      case 'evict': {
        const { worktreeKey } = effect;
        const rescueFor = rescueOf(effect);
        const outcome = await rescueAndRemoveWorktree(workspace, { worktreeKey, now: now(), rescueFor });
        killAfterGitIfAsked('evict');
        const rescue = outcome.rescue ?? (again ? await earlierRescue(workspace, { worktreeKey, rescueFor }) : null);
        await this.report(worktreeKey, { type: 'RecordWorktreeEvicted', data: { worktreeKey, rescue, removed: outcome.removed, now: this.leases.now() } }, effect, signal);
        return;
      }
      default: {
        const unknown: never = effect;
        throw new Error(`unknown worktree effect ${JSON.stringify(unknown)}`);
      }
    }
  }

  /**
   * A report the lease no longer wants (it moved on, or its token is stale) is logged and dropped. None
   * is made once the key's lock is lost: the outcome was reached without it.
   */
  private async report(worktreeKey: string, command: WorktreeLeaseCommand, effect: WorktreeEffect, signal: AbortSignal): Promise<void> {
    signal.throwIfAborted();
    try {
      await this.leases.decide(worktreeKey, command, { metadata: serviceActor(`effect:${effect.type}`) });
    } catch (error) {
      if (error instanceof GantryError && ['STALE_FENCE', 'INVALID_TRANSITION', 'NOT_FOUND'].includes(error.code)) {
        this.log.warn({ worktreeKey, command: command.type, code: error.code, error: error.message }, 'effect outcome not recorded: the lease moved on');
        return;
      }
      throw error;
    }
  }
}

/** What a rescue is done for, in its commit's subject (earlierRescue): the effect, and its lease and token or the eviction's request. */
function rescueOf(effect: WorktreeEffect): string {
  return effect.type === 'evict' ? `evict asked for at ${effect.requestedAt}` : `${effect.type} of lease ${effect.leaseId} (token ${effect.token})`;
}

/**
 * The effect's git failed because a lock it ran under was lost (the key's, or a clone's taken inside
 * it), or a clone's lock could not be taken because the database could not be reached (PostgreSQL
 * restarting, the network cut): no outcome of the effect — the lease's sync_failed no more than its
 * success — but a failure of this run, retried.
 */
function lockLost(error: unknown, signal: AbortSignal): boolean {
  return signal.aborted || isLockOrDatabaseOutage(error);
}

/**
 * Whose fault a failed create or sync is (docs/worktrees.md, "Whose fault a refused lease is"): the
 * job's only when the git layer says so (the origin lacks what the job names); anything else — the
 * disk, the shared clone, a path, git itself — is the host's.
 */
function faultOf(error: unknown): WorktreePreparationFault {
  return error instanceof GantryError && error.details?.['fault'] === 'JOB' ? 'JOB' : 'HOST';
}

function reasonOf(error: unknown): string {
  const text = error instanceof GantryError ? `${error.code}: ${error.message}` : error instanceof Error ? error.message : String(error);
  return text.slice(0, 4000) || 'unknown failure';
}

function describe(error: unknown): Record<string, unknown> | string {
  if (error instanceof GantryError) return { code: error.code, message: error.message, details: error.details };
  return error instanceof Error ? { name: error.name, message: error.message } : String(error);
}
