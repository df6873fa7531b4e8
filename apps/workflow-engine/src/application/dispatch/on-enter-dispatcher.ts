import { setTimeout as sleep } from 'node:timers/promises';
import { Inject, Injectable } from '@nestjs/common';
import { InjectPinoLogger, PinoLogger } from 'nestjs-pino';
import { ErrorCode, GantryError, type EntryPath, type StepDefinition } from '@gantry/contracts';
import { EventStore, decideWithin, handleWithDecider, isDatabaseUnreachable } from '@gantry/eventstore';
import {
  CLAIM_REFUSAL,
  declarationDigest,
  entryRecordOf,
  isTerminalMarker,
  markedPositions,
  occupancyOf,
  onEnterPlan,
  recoveryVerdict,
  stepOf,
  taskAtStepDecider,
  taskExists,
  type PlanItem,
  type StepEntryRecord,
  type Task,
  type TaskAtStepCommand,
} from '../../domain/index.js';
import { RunQueueUnavailable } from '../../infrastructure/job-service/run-queue.js';
import { ProcessEpoch } from '../../infrastructure/liveness/process-epoch.js';
import { latestWorkflow, taskPlacementNow, type StoredWorkflow } from '../../infrastructure/persistence/read-models.js';
import { loadTask, loadTaskAtStep, streamIds } from '../../infrastructure/persistence/streams.js';
import { TestHooks } from '../test-hooks.js';
import { notDoneNow, type ActionResult, type ActionRun } from './action-run.js';
import { DispatchDiagnostics } from './diagnostics.js';
import { EngineActions } from './engine-actions.js';
import { SessionActions } from './session-actions.js';

/** A step entry to dispatch: its identity and how the task arrived. */
export interface EntryToDispatch {
  taskId: string;
  workflowId: string;
  stepId: string;
  entrySeq: number;
  entryPath: EntryPath;
}

/**
 * `live`: the dispatch of the command that admitted the task — session actions included.
 * `resume`: a recovery, a takeover, or a repeated command — the positions under markers only (AC-B8).
 */
export type DispatchMode = 'live' | 'resume';

export interface DispatchOptions {
  /**
   * A repeated command's dispatch (its first answer lost): an entry another live process opened is
   * left to that process, whose live dispatch walks it, session actions included — a claim taken here
   * would make that walk abandon the entry before the session actions after it (auto_start_agent
   * last). An opener that is gone, or this process, is resumed as usual.
   */
  repeated?: boolean;
}

/**
 * `outage`: stopped at a job service that did not take a run; `busy`: stopped at one of the engine's
 * own streams kept busy past its patience (a claim's, a marker's or an action's append);
 * `unreachable`: stopped at the engine's own database, which could not be reached (a connection
 * refused or lost, the server restarting). Each keeps the claim, writes nothing more, and is scanned
 * again after a pause (AC-L3).
 */
export type DispatchOutcome = 'completed' | 'terminal' | 'abandoned' | 'stopped' | 'outage' | 'busy' | 'unreachable' | 'declaration_changed' | 'unresolvable';

/** Stopped with the claim kept, to be scanned again after a pause (AC-L3). */
const STOPPED_FOR_NOW: ReadonlySet<DispatchOutcome> = new Set(['outage', 'busy', 'unreachable']);

type PositionOutcome = 'next' | Exclude<DispatchOutcome, 'completed'>;

interface Context {
  entry: EntryToDispatch;
  task: Task;
  workflow: StoredWorkflow;
  step: StepDefinition;
  entryPath: EntryPath;
  correlationId: string;
}

/**
 * An entry whose dispatch here stopped with its claim kept — the job service did not take a run, a
 * stream of the engine's stayed busy (nothing of the stopping step written), or its database could not
 * be reached (AC-L3): `live` when that dispatch was the live one, `sessionDone` the plan items it had
 * walked (its session actions among them ran, and are not run again when the walk goes on).
 */
interface StoppedHere {
  entry: EntryKey;
  live: boolean;
  sessionDone: number;
}

/** A step entry's identity. */
export type EntryKey = Pick<EntryToDispatch, 'taskId' | 'workflowId' | 'stepId' | 'entrySeq'>;

const entryKey = (e: EntryKey) => `${e.taskId}~${e.workflowId}~${e.stepId}#${e.entrySeq}`;

/**
 * The one dispatcher of on_enter (docs/workflow-engine.md, "Step entries", "Markers", "The on_enter
 * plan"). Every entry path and the recovery scan come here. It reads the workflow once, compares the
 * declaration digest once, and walks the plan: session actions are recorded on the task's session
 * (live dispatches only); every marked position is claimed by compare-and-set, executed, and marked.
 * A claim held by a live process ends the dispatch (the holder finishes the entry). Within one
 * process the dispatches of one entry run one after the other.
 */
@Injectable()
export class OnEnterDispatcher {
  private readonly inFlight = new Map<string, Promise<DispatchOutcome>>();
  private readonly background = new Set<Promise<unknown>>();
  private readonly stoppedHere = new Map<string, StoppedHere>();
  private readonly stopListeners: Array<() => void> = [];
  private stopping = false;

  constructor(
    @Inject(EventStore) private readonly store: EventStore,
    @Inject(ProcessEpoch) private readonly process: ProcessEpoch,
    @Inject(EngineActions) private readonly engine: EngineActions,
    @Inject(SessionActions) private readonly session: SessionActions,
    @Inject(DispatchDiagnostics) private readonly diagnostics: DispatchDiagnostics,
    @Inject(TestHooks) private readonly hooks: TestHooks,
    @InjectPinoLogger('on-enter') private readonly log: PinoLogger,
  ) {}

  /** Dispatches an entry and resolves with how it ended. */
  dispatch(entry: EntryToDispatch, mode: DispatchMode, options: DispatchOptions = {}): Promise<DispatchOutcome> {
    const key = entryKey(entry);
    const previous = this.inFlight.get(key);
    const run = (previous ?? Promise.resolve())
      .catch(() => undefined)
      .then(() => this.dispatchOnce(entry, mode, options))
      .then((outcome) => {
        this.log.info({ ...entry, mode, outcome, epoch: this.process.epoch }, 'step entry dispatched');
        return outcome;
      });
    this.inFlight.set(key, run);
    void run.finally(() => {
      if (this.inFlight.get(key) === run) this.inFlight.delete(key);
    }).catch(() => undefined);
    return run;
  }

  /** Whether a dispatch of the entry is under way in this process (its claims are this process's, and live). */
  walking(entry: EntryKey): boolean {
    return this.inFlight.has(entryKey(entry));
  }

  /** The entries whose dispatch here stopped, to be scanned again (AC-L3), in no order. */
  stoppedEntries(): EntryKey[] {
    return [...this.stoppedHere.values()].map((s) => s.entry);
  }

  /** Forgets a stopped entry that is no longer open (ended, or gone with its task), or that a live process owns. */
  forgetStopped(entry: EntryKey): void {
    this.stoppedHere.delete(entryKey(entry));
  }

  /**
   * An entry a scan could not read or finish, the database out of reach: scanned again after a pause
   * with the entries whose dispatch stopped so (AC-L3). One stopped here already keeps what its walk
   * had done.
   */
  scanAgain(entry: EntryKey): void {
    const key = entryKey(entry);
    if (!this.stoppedHere.has(key)) this.stoppedHere.set(key, { entry: { taskId: entry.taskId, workflowId: entry.workflowId, stepId: entry.stepId, entrySeq: entry.entrySeq }, live: false, sessionDone: 0 });
    for (const listener of this.stopListeners) listener();
  }

  /** `listener` is called each time a dispatch stops at a job service that did not take a run, a busy stream, or an unreachable database. */
  onStopped(listener: () => void): void {
    this.stopListeners.push(listener);
  }

  /** Dispatches in the background (after a command's commit); a failure is logged, the entry resumes at the next start. */
  schedule(entry: EntryToDispatch, mode: DispatchMode, options: DispatchOptions = {}): void {
    if (this.stopping) {
      this.log.info({ ...entry }, 'stopping: step entry left to the next start');
      return;
    }
    const work: Promise<void> = this.dispatch(entry, mode, options)
      .then(
        () => undefined,
        (error: unknown) => {
          this.log.error({ ...entry, error: error instanceof Error ? error.message : String(error) }, 'step entry dispatch failed; it resumes at the next start');
        },
      )
      .finally(() => this.background.delete(work));
    this.background.add(work);
  }

  /** Lets the dispatches under way finish; nothing new starts. */
  async drain(): Promise<void> {
    this.stopping = true;
    while (this.background.size > 0) await Promise.allSettled([...this.background]);
  }

  /**
   * A dispatch of an entry whose earlier dispatch here stopped (an outage, a busy stream, the database
   * out of reach) goes on with that one's walk: a live one's session actions not reached yet run (this
   * process's live dispatch is still the only one that runs them, AC-B8), those it ran do not run again.
   */
  private async dispatchOnce(entry: EntryToDispatch, mode: DispatchMode, options: DispatchOptions): Promise<DispatchOutcome> {
    const key = entryKey(entry);
    const stopped = this.stoppedHere.get(key);
    this.stoppedHere.delete(key);
    const live = mode === 'live' || stopped?.live === true;
    const walk = { sessionDone: stopped?.live ? stopped.sessionDone : 0, walked: 0 };
    let outcome: DispatchOutcome;
    try {
      outcome = await this.walkEntry(entry, live ? 'live' : 'resume', options, walk);
    } catch (error) {
      // A claim, marker or action append that met its stream kept busy past its patience wrote nothing;
      // one whose database could not be reached may have committed or not, and its next try finds out
      // (a committed claim or marker is read back, a run's key finds its job). Either way the claim is
      // kept, and no other live process may take it over (AC-L4), so this one comes back.
      if (isDatabaseUnreachable(error)) {
        this.diagnostics.databaseUnreachable({ ...entry, cause: describe(error) });
        outcome = 'unreachable';
      } else if (error instanceof GantryError && error.code === ErrorCode.VERSION_CONFLICT) {
        this.diagnostics.streamBusy({ ...entry, cause: describe(error) });
        outcome = 'busy';
      } else {
        throw error;
      }
    }
    if (STOPPED_FOR_NOW.has(outcome)) {
      this.stoppedHere.set(key, { entry, live, sessionDone: live ? walk.walked : 0 });
      for (const listener of this.stopListeners) listener();
    }
    return outcome;
  }

  private async walkEntry(entry: EntryToDispatch, mode: DispatchMode, options: DispatchOptions, walk: { sessionDone: number; walked: number }): Promise<DispatchOutcome> {
    // The one read of the declaration for this dispatch: every position below uses it.
    const workflow = await latestWorkflow(this.store.pool, entry.workflowId);
    const step = workflow ? stepOf(workflow.definition, entry.stepId) : null;
    const task = await loadTask(this.store, entry.taskId);
    if (!workflow || !step || !taskExists(task)) return 'unresolvable';
    const pair = await loadTaskAtStep(this.store, entry.taskId, entry.workflowId, entry.stepId);
    const record = entryRecordOf(pair, entry.entrySeq);
    if (record === 'finished') return 'terminal';
    const ctx: Context = { entry, task, workflow, step, entryPath: record?.entryPath ?? entry.entryPath, correlationId: `entry:${entryKey(entry)}` };
    const digest = declarationDigest(step.onEnter);
    if (record) {
      if (record.termination !== null) return 'terminal';
      if (options.repeated && record.openedByEpoch !== this.process.epoch && !(await this.process.isGone(record.openedByEpoch))) {
        this.diagnostics.leftToHolder({ ...this.where(ctx), entrySeq: entry.entrySeq, position: null, holder: record.openedByEpoch, reason: 'opened by a live process' });
        return 'abandoned';
      }
      if (options.repeated) {
        // A repeated command comes whenever its caller sends it again: the task may have left the step
        // (or entered it again) since. That entry is over, as the recovery scan finds it (AC-B9(a)).
        const left = this.stepLeft(ctx, record);
        if (left) return this.endLeftEntry(ctx, record, left);
      }
      if (record.declarationDigest !== digest) return this.declarationChanged(ctx, record, digest);
    }
    const plan = onEnterPlan(step.onEnter, ctx.entryPath);
    for (const [index, item] of plan.entries()) {
      walk.walked = index;
      // Each action boundary: a task that has left the entry since (moved on, or out and back in)
      // gets nothing more of it — no reviewer woken, no job queued for a step it no longer occupies.
      const left = await this.leftSince(ctx);
      if (left) return this.stopLeftEntry(ctx, left);
      const run = this.actionRun(ctx, item);
      if (item.owner === 'session') {
        if (mode === 'live' && index >= walk.sessionDone) await this.sessionAction(run, record !== null);
        continue;
      }
      if (item.owner === 'none') {
        if (mode === 'live' && index >= walk.sessionDone) this.diagnostics.notExecuted({ ...this.where(ctx), stepName: step.name, actionType: item.type, position: item.position, skipReason: 'no_executor', entryPath: ctx.entryPath });
        continue;
      }
      if (!record) {
        // Admitted when the step declared nothing under markers; it does now: that is a changed declaration.
        if (mode === 'live') this.diagnostics.notExecuted({ ...this.where(ctx), stepName: step.name, actionType: item.type, position: item.position, skipReason: 'declaration_changed' });
        continue;
      }
      const outcome = await this.markedPosition(ctx, item, run);
      if (outcome !== 'next') return outcome;
    }
    walk.walked = plan.length;
    if (record) await this.decide(ctx, { type: 'CompleteEntry', data: { ...this.pair(ctx), entrySeq: ctx.entry.entrySeq, marked: markedPositions(step.onEnter), now: this.now() } });
    return 'completed';
  }

  private async markedPosition(ctx: Context, item: Extract<PlanItem, { owner: 'engine' }>, run: ActionRun): Promise<PositionOutcome> {
    const claimed = await this.claim(ctx, item);
    if (claimed !== 'claimed') return claimed;
    await this.hooks.reached(`claimed:${item.position}`, scopeOf(ctx));
    let result: ActionResult;
    if (!item.known) {
      this.diagnostics.notExecuted({ ...this.where(ctx), stepName: ctx.step.name, actionType: item.type, position: item.position, skipReason: 'unrecognised' });
      result = { outcome: 'skipped', reason: 'unrecognised' };
    } else if (!this.engine.wired) {
      this.diagnostics.notExecuted({ ...this.where(ctx), stepName: ctx.step.name, actionType: item.type, position: item.position, skipReason: 'no_executor' });
      result = { outcome: 'skipped', reason: 'no_executor' };
    } else if (item.type === 'clear_decisions') {
      return this.clearDecisions(ctx, item);
    } else {
      try {
        result = await this.engine.execute(run);
      } catch (error) {
        if (error instanceof RunQueueUnavailable) {
          this.diagnostics.runQueueSilent({ ...this.where(ctx), entrySeq: ctx.entry.entrySeq, position: item.position, cause: error.message });
          return 'outage';
        }
        // A stream kept busy past the action's patience, or the database out of reach: the action
        // neither ran nor failed. As with a claim or a marker, the dispatch stops with the claim kept,
        // and the entry is scanned again after a pause (AC-L3).
        if (stoppedForNow(error)) throw error;
        result = { outcome: 'failed', failure: { cause: describe(error), attempted: null, failed: null }, runs: [] };
      }
      await this.hooks.reached(`effect:${item.position}`, scopeOf(ctx));
      // A fan-out's failures were reported per participant (AC-C1); every other failure once here (AC-C3).
      if (result.outcome === 'failed' && item.type !== 'queue_run_for_each_participant') {
        this.diagnostics.actionFailed({ ...this.where(ctx), actionType: item.type, cause: result.failure.cause, position: item.position, trigger: 'on_enter' });
      }
    }
    return this.finish(ctx, item.position, result);
  }

  /** absent → in_progress(this epoch), or a gone process's claim taken over; a live holder ends the dispatch. */
  private async claim(ctx: Context, item: Extract<PlanItem, { owner: 'engine' }>): Promise<'claimed' | PositionOutcome> {
    const pair = await loadTaskAtStep(this.store, ctx.entry.taskId, ctx.entry.workflowId, ctx.entry.stepId);
    const record = pair.entries[ctx.entry.entrySeq];
    if (!record || record.termination !== null) return 'terminal';
    const marker = record.markers[item.position];
    if (isTerminalMarker(marker)) return failedClear(item.type, marker!.state) ? 'stopped' : 'next';
    let staleEpoch: string | null = null;
    if (marker) {
      if (marker.kind !== item.type) return this.declarationChanged(ctx, record, declarationDigest(ctx.step.onEnter));
      // This process's own claim, left by an earlier dispatch here that stopped: still ours to finish.
      if (marker.epoch === this.process.epoch) return 'claimed';
      if (!(await this.process.isGone(marker.epoch!))) {
        this.diagnostics.leftToHolder({ ...this.where(ctx), entrySeq: ctx.entry.entrySeq, position: item.position, holder: marker.epoch, reason: 'claimed by a live process' });
        return 'abandoned';
      }
      staleEpoch = marker.epoch;
    }
    try {
      await this.decide(ctx, {
        type: 'ClaimAction',
        data: { ...this.pair(ctx), entrySeq: ctx.entry.entrySeq, position: item.position, kind: item.type, epoch: this.process.epoch, staleEpoch, now: this.now() },
      });
      return 'claimed';
    } catch (error) {
      if (!(error instanceof GantryError)) throw error;
      const reason = error.details?.reason;
      if (error.code === ErrorCode.ALREADY_CLAIMED) {
        this.diagnostics.leftToHolder({ ...this.where(ctx), entrySeq: ctx.entry.entrySeq, position: item.position, holder: (error.details?.holder as string) ?? null, reason: 'lost the claim' });
        return 'abandoned';
      }
      if (reason === CLAIM_REFUSAL.terminal) return failedClear(item.type, error.details?.state) ? 'stopped' : 'next';
      if (reason === CLAIM_REFUSAL.entryTerminal) return 'terminal';
      throw error;
    }
  }

  /** The clear and its done marker are one event; a failure stops the entry (AC-C2). */
  private async clearDecisions(ctx: Context, item: Extract<PlanItem, { owner: 'engine' }>): Promise<PositionOutcome> {
    try {
      if (this.hooks.fails('action:clear_decisions')) throw new Error('clear_decisions failed (forced by a test)');
      await this.store.execute({ metadata: { correlationId: ctx.correlationId, actor: 'workflow-engine' } }, async (uow) => {
        await decideWithin(uow, taskAtStepDecider, this.streamOf(ctx), {
          type: 'ClearDecisions',
          data: { ...this.pair(ctx), entrySeq: ctx.entry.entrySeq, position: item.position, epoch: this.process.epoch, now: this.now() },
        });
        await this.hooks.reached(`clearing:${item.position}`, scopeOf(ctx));
      });
    } catch (error) {
      if (error instanceof GantryError && error.code === ErrorCode.ALREADY_CLAIMED) return 'abandoned';
      // A stream kept busy past the clear's patience, or the database out of reach: the clear neither
      // ran nor failed. Like any claim or marker, the dispatch stops with the claim kept, and the entry
      // is scanned again after a pause (AC-L3); a clear that did commit is found done then.
      if (stoppedForNow(error)) throw error;
      const cause = describe(error);
      this.diagnostics.clearFailed({ ...this.where(ctx), entrySeq: ctx.entry.entrySeq, cause });
      await this.finish(ctx, item.position, { outcome: 'failed', failure: { cause, attempted: null, failed: null }, runs: [] });
      return 'stopped';
    }
    await this.hooks.reached(`finished:${item.position}`, scopeOf(ctx));
    return 'next';
  }

  private async finish(ctx: Context, position: number, result: ActionResult): Promise<PositionOutcome> {
    await this.hooks.loseConnectionOnce('database-lost-once', ctx.entry.taskId, this.store.pool);
    try {
      await this.decide(ctx, {
        type: 'FinishAction',
        data: {
          ...this.pair(ctx),
          entrySeq: ctx.entry.entrySeq,
          position,
          outcome: result.outcome,
          skipReason: result.outcome === 'skipped' ? result.reason : null,
          failure: result.outcome === 'failed' ? result.failure : null,
          runs: result.outcome === 'skipped' ? [] : result.runs,
          epoch: this.process.epoch,
          now: this.now(),
        },
      });
    } catch (error) {
      if (error instanceof GantryError && error.code === ErrorCode.ALREADY_CLAIMED) return 'abandoned';
      throw error;
    }
    await this.hooks.reached(`finished:${position}`, scopeOf(ctx));
    return 'next';
  }

  /** The digest differs: what is left of the current declaration is skipped(declaration_changed), the entry ends. */
  private async declarationChanged(ctx: Context, record: StepEntryRecord, currentDigest: string): Promise<'abandoned' | 'declaration_changed'> {
    const staleEpochs = await this.staleClaimEpochs(ctx, record);
    if (staleEpochs === null) return 'abandoned';
    const terminated = await this.decide(ctx, {
      type: 'TerminateEntry',
      data: {
        ...this.pair(ctx),
        entrySeq: ctx.entry.entrySeq,
        reason: 'declaration_changed',
        skip: { positions: markedPositions(ctx.step.onEnter), reason: 'declaration_changed' },
        staleEpochs,
        now: this.now(),
      },
    });
    if (terminated > 0) {
      this.diagnostics.declarationChanged({ ...this.where(ctx), entrySeq: ctx.entry.entrySeq, entryDigest: record.declarationDigest, currentDigest });
    }
    return 'declaration_changed';
  }

  /**
   * The epochs of the entry's in-progress claims that an ending of the entry may take over: this
   * process's own and those of gone processes. Null when a live process holds one: the entry is left
   * to it (logged).
   */
  private async staleClaimEpochs(ctx: Context, record: StepEntryRecord): Promise<string[] | null> {
    const staleEpochs: string[] = [];
    for (const marker of Object.values(record.markers)) {
      if (marker.state !== 'in_progress' || marker.epoch === null || staleEpochs.includes(marker.epoch)) continue;
      if (marker.epoch === this.process.epoch || (await this.process.isGone(marker.epoch))) staleEpochs.push(marker.epoch);
      else {
        this.diagnostics.leftToHolder({ ...this.where(ctx), entrySeq: ctx.entry.entrySeq, position: marker.position, holder: marker.epoch, reason: 'claimed by a live process' });
        return null;
      }
    }
    return staleEpochs;
  }

  /** Whether the task has left the entry's step since (step_left), or entered it again (superseded); null while it is in this entry. */
  private stepLeft(ctx: Context, record: StepEntryRecord): 'step_left' | 'superseded' | null {
    const verdict = recoveryVerdict(
      { ...record, workflowId: ctx.entry.workflowId, stepId: ctx.entry.stepId },
      {
        task: { workflowId: ctx.task.placement.workflowId, stepId: ctx.task.placement.stepId, admitted: ctx.task.placement.admitted, currentEntrySeq: ctx.task.currentEntry?.entrySeq ?? null },
        stepResolvable: true,
      },
    );
    return verdict.kind === 'step_left' || verdict.kind === 'superseded' ? verdict.kind : null;
  }

  /** Whether the task has left this entry since the dispatch began: step_left, superseded (it entered the step again), or null. */
  private async leftSince(ctx: Context): Promise<'step_left' | 'superseded' | null> {
    const at = await taskPlacementNow(this.store.pool, ctx.entry.taskId);
    if (!at || at.workflowId !== ctx.entry.workflowId || at.stepId !== ctx.entry.stepId || !at.admitted) return 'step_left';
    return at.currentEntrySeq === ctx.entry.entrySeq ? null : 'superseded';
  }

  /**
   * The task left the entry while this dispatch walked it: the rest is not run. An entry with a record
   * is ended as the recovery scan ends one (its positions not yet terminal skipped(step_left) or
   * skipped(superseded), the entry terminal with that reason); one without (session actions only) just stops.
   */
  private async stopLeftEntry(ctx: Context, reason: 'step_left' | 'superseded'): Promise<DispatchOutcome> {
    this.log.info({ ...this.where(ctx), entrySeq: ctx.entry.entrySeq, reason }, 'the task left the step entry; the rest of its on_enter does not run');
    const record = (await loadTaskAtStep(this.store, ctx.entry.taskId, ctx.entry.workflowId, ctx.entry.stepId)).entries[ctx.entry.entrySeq];
    if (!record) return 'terminal';
    if (record.termination !== null) return 'terminal';
    return this.endLeftEntry(ctx, record, reason);
  }

  /** Ends an entry the task is no longer in: what is left of it is skipped(reason) and nothing runs; a live holder's claim is left to it. */
  private async endLeftEntry(ctx: Context, record: StepEntryRecord, reason: 'step_left' | 'superseded'): Promise<'abandoned' | 'terminal'> {
    const staleEpochs = await this.staleClaimEpochs(ctx, record);
    if (staleEpochs === null) return 'abandoned';
    try {
      await this.decide(ctx, {
        type: 'TerminateEntry',
        data: { ...this.pair(ctx), entrySeq: ctx.entry.entrySeq, reason, skip: { positions: record.markedPositions, reason }, staleEpochs, now: this.now() },
      });
    } catch (error) {
      if (error instanceof GantryError && error.code === ErrorCode.ALREADY_CLAIMED) return 'abandoned';
      throw error;
    }
    return 'terminal';
  }

  /**
   * A session-owned action holds no marker and never runs in a resumed dispatch (AC-B8): this live
   * dispatch is its one chance. An error that may be sent again (notDoneNow) is no failure. The
   * engine's database out of reach stops a `recorded` entry's dispatch for now, its claim kept: this
   * process's live walk comes back to the action (StoppedHere) and runs it then — once, its receipt
   * or its run's key finding a write that did commit (AC-L3). Else the action is sent again, with
   * growing pauses, until it is done — or until the process stops or the task has left the entry
   * (the database out of reach as it checks is no leaving), when it is given up (a warning says so;
   * as after a crash, it is not resumed). Any other error is a failure (AC-C3) and the dispatch goes on.
   */
  private async sessionAction(run: ActionRun, recorded: boolean): Promise<void> {
    const where = { taskId: run.task.taskId, workflowId: run.workflow.workflowId, stepId: run.step.id, entrySeq: run.entrySeq, actionType: run.action.type, position: run.position };
    for (let pause = 250; ; pause = Math.min(pause * 2, 2000)) {
      try {
        await this.session.execute(run);
        return;
      } catch (error) {
        // Only an entry with a record is scanned again: one without (session actions only) is sent again here.
        if (recorded && isDatabaseUnreachable(error)) throw error;
        if (!notDoneNow(error)) {
          this.diagnostics.actionFailed({ taskId: run.task.taskId, workflowId: run.workflow.workflowId, stepId: run.step.id, actionType: run.action.type, cause: describe(error), position: run.position, trigger: 'on_enter' });
          return;
        }
        const gone = this.stopping ? 'the process is stopping' : (await this.entryLeft(run, recorded)) ? 'the task has left the entry' : null;
        if (gone) {
          this.log.warn({ ...where, reason: gone, cause: describe(error) }, 'session action not done; given up');
          return;
        }
        this.log.warn({ ...where, cause: describe(error) }, 'session action could not be done now; sent again');
        await sleep(pause);
      }
    }
  }

  /**
   * Whether the task no longer occupies the entry the run is for. Not known while the database is out
   * of reach: an entry without a record (session actions only) then keeps its action, to be sent again —
   * nothing else would come back to it; one with a record stops for now (AC-L3).
   */
  private async entryLeft(run: ActionRun, recorded: boolean): Promise<boolean> {
    try {
      await this.hooks.loseConnectionOnce('left-check-database-lost-once', run.task.taskId, this.store.pool);
      return await this.occupancyLeft(run);
    } catch (error) {
      if (!recorded && isDatabaseUnreachable(error)) return false;
      throw error;
    }
  }

  private async occupancyLeft(run: ActionRun): Promise<boolean> {
    const task = await loadTask(this.store, run.task.taskId);
    const now = taskExists(task) ? occupancyOf(task) : null;
    return !now || now.workflowId !== run.workflow.workflowId || now.stepId !== run.step.id || now.entrySeq !== run.entrySeq;
  }

  /** One decider command on the pair's stream, appended at the version it was decided on; returns how many events it appended. */
  private async decide(ctx: Context, command: TaskAtStepCommand): Promise<number> {
    const executed = await handleWithDecider(this.store, {
      decider: taskAtStepDecider,
      streamId: this.streamOf(ctx),
      command,
      metadata: { correlationId: ctx.correlationId, actor: 'workflow-engine' },
      reply: (d) => d.decided.length,
    });
    return executed.result;
  }

  private actionRun(ctx: Context, item: PlanItem): ActionRun {
    return {
      trigger: 'on_enter',
      task: ctx.task,
      workflow: ctx.workflow,
      step: ctx.step,
      position: item.position,
      action: item.action,
      entrySeq: ctx.entry.entrySeq,
      entryPath: ctx.entryPath,
      cause: ctx.correlationId,
      correlationId: ctx.correlationId,
    };
  }

  private streamOf(ctx: Context): string {
    return streamIds.taskAtStep(ctx.entry.taskId, ctx.entry.workflowId, ctx.entry.stepId);
  }

  private pair(ctx: Context) {
    return { taskId: ctx.entry.taskId, workflowId: ctx.entry.workflowId, stepId: ctx.entry.stepId };
  }

  private where(ctx: Context) {
    return { taskId: ctx.entry.taskId, workflowId: ctx.entry.workflowId, stepId: ctx.entry.stepId };
  }

  private now(): string {
    return this.store.clock().toISOString();
  }
}

/**
 * A clear_decisions that failed stops its entry for every dispatch that reaches it, not only the one
 * it failed in: a repeated command's, a second one's (AC-C2, AC-B9(b)).
 */
function failedClear(kind: string, state: unknown): boolean {
  return kind === 'clear_decisions' && state === 'failed';
}

/** An error that stops a dispatch for now, its claim kept (AC-L3): a stream kept busy, or the database out of reach. */
function stoppedForNow(error: unknown): boolean {
  return (error instanceof GantryError && error.code === ErrorCode.VERSION_CONFLICT) || isDatabaseUnreachable(error);
}

/** How a test names one entry in a fault point: `<taskId>@<stepId>#<entrySeq>`. */
function scopeOf(ctx: Context): string {
  return `${ctx.entry.taskId}@${ctx.entry.stepId}#${ctx.entry.entrySeq}`;
}

function describe(error: unknown): string {
  const text = error instanceof GantryError ? `${error.code}: ${error.message}` : error instanceof Error ? error.message : String(error);
  return text.length > 2000 ? `${text.slice(0, 1997)}...` : text || 'no details';
}
