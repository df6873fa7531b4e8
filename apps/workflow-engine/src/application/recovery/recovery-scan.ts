import { Inject, Injectable, type OnApplicationBootstrap, type OnModuleInit } from '@nestjs/common';
import { InjectPinoLogger, PinoLogger } from 'nestjs-pino';
import type { EntryTermination, SkipReason } from '@gantry/contracts';
import { EventStore, handleWithDecider, isDatabaseUnreachable } from '@gantry/eventstore';
import { ENGINE_SETTINGS, type EngineSettings } from '../engine-settings.js';
import { feederOf, recoveryOrder, recoveryVerdict, stepOf, taskAtStepDecider, taskExists, type StepEntryRecord } from '../../domain/index.js';
import { ProcessEpoch } from '../../infrastructure/liveness/process-epoch.js';
import { awaitedSteps, latestWorkflow, openStepEntries, openStepExits, type OpenEntryRow } from '../../infrastructure/persistence/read-models.js';
import { loadTask, loadTaskAtStep, streamIds } from '../../infrastructure/persistence/streams.js';
import { DispatchDiagnostics } from '../dispatch/diagnostics.js';
import { OnEnterDispatcher, type DispatchOutcome } from '../dispatch/on-enter-dispatcher.js';
import { EntryFlow } from '../entry-flow.js';
import { StepExits } from '../triggers/step-exits.js';
import { TestHooks } from '../test-hooks.js';
import { LONGEST_SCAN_PAUSE_MS, RepeatingScan } from './repeating-scan.js';

type Handled = DispatchOutcome | 'left_to_owner' | 'skipped' | 'failed';

const keyOf = (e: OpenEntryRow) => `${e.taskId}~${e.workflowId}~${e.stepId}#${e.entrySeq}`;

/**
 * The recovery scan (docs/workflow-engine.md, "Recovery", AC-B9, AC-L2, AC-L4): at start, before
 * the engine serves commands or consumes events, every non-terminal step-entry record is read in one
 * query and each is finished, resumed or left to its live owner; the same scan runs once when a
 * peer process is found gone. It never stops the start: its own failures are logged at ERROR.
 * While this process lives, the entries a dispatch of its own stopped with its claim kept — the job
 * service did not take a run, a stream of the engine's stayed busy past its patience, or its database
 * could not be reached (AC-L3) — are scanned again after a pause that grows (RepeatingScan), until none
 * is left stopped; so are the entries a scan of its own could not read or end, the database out of reach.
 */
@Injectable()
export class RecoveryScan implements OnModuleInit, OnApplicationBootstrap {
  private readonly stoppedScan: RepeatingScan;
  private readonly takeovers = new Set<Promise<void>>();
  /** A recovery scan that could not read what it needed, the database out of reach: run again whole by the next scan of the stopped entries. */
  private owed: string | null = null;
  private stopping = false;

  constructor(
    @Inject(EventStore) private readonly store: EventStore,
    @Inject(ProcessEpoch) private readonly process: ProcessEpoch,
    @Inject(OnEnterDispatcher) private readonly dispatcher: OnEnterDispatcher,
    @Inject(EntryFlow) private readonly flow: EntryFlow,
    @Inject(StepExits) private readonly exits: StepExits,
    @Inject(DispatchDiagnostics) private readonly diagnostics: DispatchDiagnostics,
    @Inject(TestHooks) private readonly hooks: TestHooks,
    @Inject(ENGINE_SETTINGS) private readonly settings: EngineSettings,
    @InjectPinoLogger('recovery') private readonly log: PinoLogger,
  ) {
    // The run queue's patience at first, twice as long each time an entry stops again.
    const firstMs = Math.max(settings.runQueuePatienceMs, 1_000);
    this.stoppedScan = new RepeatingScan(
      () => this.scanStopped(),
      () => this.owed !== null || this.dispatcher.stoppedEntries().length > 0,
      { firstMs, maxMs: LONGEST_SCAN_PAUSE_MS },
      (delayMs) => this.log.info({ rule: 'AC-L3', epoch: this.process.epoch, delayMs }, 'the stopped entries are scanned again after a pause'),
    );
  }

  /** Runs before any provider's onApplicationBootstrap, so before commands and consumers start. */
  async onModuleInit(): Promise<void> {
    this.dispatcher.onStopped(() => this.stoppedScan.request());
    await this.run('startup');
  }

  /**
   * No scan starts any more and none is waiting; the scans under way — of stopped entries, or a
   * takeover — end first: each finishes the entry it is on and leaves the rest to the next start or
   * takeover (the epoch lock, released after this, stays held while they write).
   */
  async stop(): Promise<void> {
    this.stopping = true;
    await Promise.all([this.stoppedScan.stop(), ...this.takeovers]);
  }

  async onApplicationBootstrap(): Promise<void> {
    try {
      await this.process.watchPeers((gone) => this.takeOver(gone));
    } catch (error) {
      this.log.error({ error: String(error) }, 'could not watch the peer processes; a gone peer\'s entries resume at the next start');
    }
  }

  /** AC-L2: the scan for a peer found gone, awaited by a stop; none starts once the process is stopping. */
  private takeOver(gone: string): Promise<void> {
    if (this.stopping) {
      this.log.info({ peerEpoch: gone, epoch: this.process.epoch }, 'stopping: the takeover of a gone process is left to the next start or a peer');
      return Promise.resolve();
    }
    const scan = this.run(`takeover:${gone}`).finally(() => this.takeovers.delete(scan));
    this.takeovers.add(scan);
    return scan;
  }

  async run(reason: string): Promise<void> {
    let rows: OpenEntryRow[];
    try {
      if (this.hooks.fails('recovery-query')) throw new Error('the scan query failed (forced by a test)');
      await this.hooks.loseConnectionOnce('recovery-query-database-lost-once', reason, this.store.pool);
      rows = await openStepEntries(this.store.pool);
    } catch (error) {
      if (isDatabaseUnreachable(error)) return this.scanAgainWhole(reason, error);
      this.log.error({ rule: 'AC-B9(f)', reason, error: error instanceof Error ? error.message : String(error) }, 'recovery scan query failed; starting without it, entries resume at a later start');
      return;
    }
    const tally: Record<string, number> = {};
    await this.resumeExits(reason, tally);
    let away = false;
    for (const row of recoveryOrder(rows)) {
      if (this.stopping) {
        tally.left_at_stop = (tally.left_at_stop ?? 0) + 1;
        continue;
      }
      // Once the database could not be reached, the entries after it are not tried now: each is left to
      // the scan of the stopped entries, which comes back to them after a pause (AC-L3).
      const handled = away ? this.scanAgainLater(row) : await this.handleLogged(row, reason);
      if (handled === 'unreachable') away = true;
      tally[handled] = (tally[handled] ?? 0) + 1;
    }
    this.log.info({ reason, epoch: this.process.epoch, records: rows.length, ...tally }, 'recovery scan finished');
    if (!this.stopping) await this.promoteWaiting(reason);
  }

  private async handleLogged(row: OpenEntryRow, reason: string): Promise<Handled> {
    try {
      return await this.handle(row);
    } catch (error) {
      // The scan's own read or write of the entry met the database out of reach: nothing of the entry
      // failed, and this process comes back to it, as to one its dispatch stopped so (AC-L3).
      if (isDatabaseUnreachable(error)) {
        this.log.error({ rule: 'AC-L3', reason, ...row, cause: error instanceof Error ? error.message : String(error) }, 'the database could not be reached; the entry is scanned again after a pause');
        return this.scanAgainLater(row);
      }
      this.log.error({
        rule: 'AC-B9(f)', reason, ...row, error: error instanceof Error ? error.message : String(error),
      }, 'recovery of a step entry failed; it stays open for a later start');
      return 'failed';
    }
  }

  /**
   * The scan could not read the open entries (or exits, or the steps tasks wait for), the database out
   * of reach: this process runs it again whole after a pause, with the stopped entries (AC-L3), rather
   * than leave a gone peer's entries, or those a start found, to the next start.
   */
  private scanAgainWhole(reason: string, error: unknown): void {
    this.log.error({ rule: 'AC-B9(f)', reason, cause: error instanceof Error ? error.message : String(error) }, 'the database could not be reached; the recovery scan runs again after a pause');
    this.owed ??= reason;
    this.stoppedScan.request();
  }

  private scanAgainLater(row: OpenEntryRow): Handled {
    this.dispatcher.scanAgain(row);
    return 'unreachable';
  }

  /**
   * The scan of this process's stopped entries, handled as the recovery scan handles any entry (one a
   * live process owns is left to it, AC-L4, and forgotten here). An entry that stops again at the job
   * service or the database — its dispatch, or this scan's own read of it — ends the scan: it is still
   * away, and the rest wait for the next one. One that meets its stream busy again waits for the next
   * scan alone: the others' streams are their own.
   */
  private async scanStopped(): Promise<void> {
    if (this.owed !== null) {
      // The whole scan handles the stopped entries too (each is open).
      const owed = this.owed;
      this.owed = null;
      await this.run(`again:${owed}`);
      return;
    }
    const reason = 'stopped_entries';
    let open: Set<string>;
    try {
      open = new Set((await openStepEntries(this.store.pool)).map(keyOf));
    } catch (error) {
      this.log.error({ rule: 'AC-L3', reason, error: error instanceof Error ? error.message : String(error) }, 'the scan of the stopped entries could not read them; it is tried again');
      return;
    }
    const rows: OpenEntryRow[] = [];
    for (const { taskId, workflowId, stepId, entrySeq } of this.dispatcher.stoppedEntries()) {
      const row = { taskId, workflowId, stepId, entrySeq };
      if (open.has(keyOf(row))) rows.push(row);
      else this.dispatcher.forgetStopped(row);
    }
    const tally: Record<string, number> = {};
    for (const row of recoveryOrder(rows)) {
      if (this.stopping) break;
      const handled = await this.handleLogged(row, reason);
      tally[handled] = (tally[handled] ?? 0) + 1;
      // A dispatch of it under way here comes back to it itself if it stops (a queued one takes its walk).
      if (handled === 'left_to_owner' && !this.dispatcher.walking(row)) this.dispatcher.forgetStopped(row);
      if (handled === 'outage' || handled === 'unreachable') break;
    }
    this.log.info({ rule: 'AC-L3', reason, epoch: this.process.epoch, records: rows.length, ...tally }, 'scan of the stopped entries finished');
  }

  /**
   * Every exit whose on_exit has not finished (the move committed, its actions not all done: the
   * process died, or its service was away) runs again, before the entries: an exit comes before the
   * next step's on_enter. One its holder is running, here or in another live process, is left to it.
   */
  private async resumeExits(reason: string, tally: Record<string, number>): Promise<void> {
    let rows: OpenEntryRow[];
    try {
      rows = await openStepExits(this.store.pool);
    } catch (error) {
      if (isDatabaseUnreachable(error)) return this.scanAgainWhole(reason, error);
      this.log.error({ reason, error: error instanceof Error ? error.message : String(error) }, 'recovery scan of the open exits failed; they resume at a later start');
      return;
    }
    for (const row of rows) {
      let handled: string;
      try {
        handled = this.exits.walking(row) ? 'left_to_owner' : `exit_${await this.exits.run(row, `recovery:${this.process.epoch}`)}`;
      } catch (error) {
        handled = 'exit_failed';
        this.log.error({ reason, ...row, error: error instanceof Error ? error.message : String(error) }, 'recovery of an exit failed; it stays open for a later start');
      }
      tally[handled] = (tally[handled] ?? 0) + 1;
    }
  }

  /**
   * A seat freed by a move is filled after the move's commit, by the process that moved; one that
   * died in between left the waiting tasks waiting for a free seat. Each step a task waits for, and
   * its feeder (where a task parked at a full step lands), is offered to its waiting tasks again; a
   * step still full changes nothing (docs/workflow-engine.md, "Recovery").
   */
  private async promoteWaiting(reason: string): Promise<void> {
    try {
      for (const { workflowId, stepId } of await awaitedSteps(this.store.pool)) {
        const workflow = await latestWorkflow(this.store.pool, workflowId);
        const feederId = workflow && stepOf(workflow.definition, stepId) ? feederOf(workflow.definition, stepId) : null;
        for (const step of feederId ? [stepId, feederId] : [stepId]) await this.flow.promote({ workflowId, stepId: step }, `recovery:${this.process.epoch}`);
      }
    } catch (error) {
      if (isDatabaseUnreachable(error)) return this.scanAgainWhole(reason, error);
      this.log.error({ rule: 'AC-B9(f)', reason, error: error instanceof Error ? error.message : String(error) }, 'promotion of waiting tasks failed; a later start or freed seat retries it');
    }
  }

  private async handle(row: OpenEntryRow): Promise<Handled> {
    if (this.hooks.fails(`recovery:${row.taskId}`)) throw new Error(`reading task ${row.taskId} failed (forced by a test)`);
    await this.hooks.loseConnectionOnce('recovery-database-lost-once', row.taskId, this.store.pool);
    const pair = await loadTaskAtStep(this.store, row.taskId, row.workflowId, row.stepId);
    const record = pair.entries[row.entrySeq];
    if (!record || record.termination !== null) return 'terminal';
    // AC-L4: an entry a live process owns is that process's to finish — this one's too, while a
    // dispatch of it is under way here (a takeover scan runs beside this process's own dispatches).
    // A claim of this process's that no dispatch here is walking was left by one that stopped: stale.
    if (this.dispatcher.walking(row)) return this.leftToOwner(row, this.process.epoch, null);
    const staleEpochs: string[] = [];
    const claimed = Object.values(record.markers).filter((m) => m.state === 'in_progress' && m.epoch !== null);
    for (const marker of claimed) {
      if (marker.epoch === this.process.epoch || (await this.process.isGone(marker.epoch!))) staleEpochs.push(marker.epoch!);
      else return this.leftToOwner(row, marker.epoch!, marker.position);
    }
    if (claimed.length === 0 && record.openedByEpoch !== this.process.epoch && !(await this.process.isGone(record.openedByEpoch))) {
      return this.leftToOwner(row, record.openedByEpoch, null);
    }
    const task = await loadTask(this.store, row.taskId);
    const workflow = await latestWorkflow(this.store.pool, row.workflowId);
    const verdict = recoveryVerdict(
      { ...record, workflowId: row.workflowId, stepId: row.stepId },
      {
        task: taskExists(task)
          ? { workflowId: task.placement.workflowId, stepId: task.placement.stepId, admitted: task.placement.admitted, currentEntrySeq: task.currentEntry?.entrySeq ?? null }
          : null,
        stepResolvable: workflow !== null && stepOf(workflow.definition, row.stepId) !== null,
      },
    );
    switch (verdict.kind) {
      case 'unresolvable':
        await this.terminate(row, record, 'unresolvable', 'unresolvable', staleEpochs);
        this.diagnostics.unresolvable({ taskId: row.taskId, stepId: row.stepId, workflowId: row.workflowId, entrySeq: row.entrySeq });
        return 'skipped';
      case 'step_left':
      case 'superseded':
        await this.terminate(row, record, verdict.kind, verdict.kind, staleEpochs);
        return 'skipped';
      case 'clear_decisions_failed':
        await this.terminate(row, record, 'clear_decisions_failed', null, staleEpochs);
        return 'skipped';
      case 'resume':
        return this.dispatcher.dispatch({ ...row, entryPath: record.entryPath }, 'resume');
    }
  }

  private leftToOwner(row: OpenEntryRow, holder: string, position: number | null): Handled {
    this.diagnostics.leftToHolder({ taskId: row.taskId, workflowId: row.workflowId, stepId: row.stepId, entrySeq: row.entrySeq, position, holder, reason: 'owned by a live process' });
    return 'left_to_owner';
  }

  private async terminate(row: OpenEntryRow, record: StepEntryRecord, reason: EntryTermination, skip: SkipReason | null, staleEpochs: string[]): Promise<void> {
    await handleWithDecider(this.store, {
      decider: taskAtStepDecider,
      streamId: streamIds.taskAtStep(row.taskId, row.workflowId, row.stepId),
      command: {
        type: 'TerminateEntry',
        data: {
          taskId: row.taskId,
          workflowId: row.workflowId,
          stepId: row.stepId,
          entrySeq: row.entrySeq,
          reason,
          skip: skip ? { positions: record.markedPositions, reason: skip } : null,
          staleEpochs,
          now: this.store.clock().toISOString(),
        },
      },
      metadata: { correlationId: `recovery:${this.process.epoch}`, actor: 'workflow-engine' },
      reply: () => undefined,
    });
  }
}
