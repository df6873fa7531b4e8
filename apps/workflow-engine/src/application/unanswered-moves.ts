import { Inject, Injectable } from '@nestjs/common';
import { LRUCache } from 'lru-cache';
import { InjectPinoLogger, PinoLogger } from 'nestjs-pino';
import type pg from 'pg';
import { EventStore } from '@gantry/eventstore';
import { ProcessEpoch } from '../infrastructure/liveness/process-epoch.js';
import { EntryFlow } from './entry-flow.js';
import type { PlacementOutcome } from './placements.js';
import { LONGEST_SCAN_PAUSE_MS, RepeatingScan } from './recovery/repeating-scan.js';

/** The idempotency scope of a turn's move, keyed by the job's event. */
export const TURN_MOVE = 'workflow.turn';

/** A turn's move whose answer this process did not get: the job's event that made it, and for what. */
export interface UnansweredMove {
  taskId: string;
  jobId: string;
  trigger: string;
  correlationId: string;
}

/**
 * The turns' moves this process made that met the engine's database out of reach
 * (docs/workflow-engine.md, "Triggers other than on_enter"): each may have committed with its answer
 * lost, and then the work after it (the exit it recorded, the live dispatch of the entry it opened,
 * the seats it freed) was not done. That work is this process's alone: it opened the entry and holds
 * the exit, and while it lives no other process takes either over (AC-L4), and only its live dispatch
 * runs the entry's session actions (AC-B8). The job's event delivered again may go to another replica
 * of the shared durable consumer, which finds the task gone from the job's occupancy and nothing to
 * do; so the process does not wait for the event: it looks the move up under the event's key itself,
 * after a pause (RepeatingScan: 1 s at first, twice as long each time the database is still out of
 * reach, up to 5 minutes), as well as when the event comes back to it. Whichever finds the move first
 * does the work, once; a move under the key that another process made (the event went there and
 * moved the task) is that process's, and one that never committed leaves the event to move the task
 * when it is delivered again.
 */
@Injectable()
export class UnansweredMoves {
  private readonly moves = new LRUCache<string, UnansweredMove>({ max: 10_000 });
  private readonly lookAgain: RepeatingScan;

  constructor(
    @Inject(EventStore) private readonly store: EventStore,
    @Inject(EntryFlow) private readonly flow: EntryFlow,
    @Inject(ProcessEpoch) private readonly process: ProcessEpoch,
    @InjectPinoLogger('job-events') private readonly log: PinoLogger,
  ) {
    this.lookAgain = new RepeatingScan(
      () => this.finishAll(),
      () => this.moves.size > 0,
      { firstMs: 1_000, maxMs: LONGEST_SCAN_PAUSE_MS },
      (delayMs) => this.log.info({ moves: this.moves.size, delayMs }, 'the turns\' moves whose answer was lost are looked up after a pause'),
    );
  }

  /** The move the job's event `eventId` made met the database out of reach: it may have committed. */
  lost(eventId: string, move: UnansweredMove): void {
    this.moves.set(eventId, move);
    this.lookAgain.request();
  }

  has(eventId: string): boolean {
    return this.moves.has(eventId);
  }

  /**
   * Looks up the move under the event's key: true when it is this process's move and its work is done
   * now (or was, by the one that found it first), false when no move of this process's committed under
   * the key (none did, and the event moves the task when delivered again; or another process's did).
   */
  async finish(eventId: string, sql: pg.Pool | pg.PoolClient = this.store.pool): Promise<boolean> {
    const moved = await this.store.answerUnder<PlacementOutcome>(TURN_MOVE, eventId, sql);
    const ours = moved !== null && moved.movedBy === this.process.epoch;
    const move = this.moves.get(eventId);
    // Found first by the other way (the scan, or the event delivered again here): that one does the work.
    if (!move) return ours;
    this.moves.delete(eventId);
    if (!ours) return false;
    this.log.info({ taskId: move.taskId, jobId: move.jobId, trigger: move.trigger, stepId: moved.reply.placement.stepId }, 'the turn\'s move had committed, its answer lost; the work after it is done now');
    await this.flow.afterCommit(moved, { replayed: false, correlationId: move.correlationId });
    return true;
  }

  /** Nothing is looked up any more; a look-up under way ends first (a move still unanswered then waits for the next start or a takeover). */
  stop(): Promise<void> {
    return this.lookAgain.stop();
  }

  /** Every move still unanswered, in the order they were lost; the database out of reach ends the scan, and the rest wait for the next. */
  private async finishAll(): Promise<void> {
    for (const eventId of [...this.moves.rkeys()]) await this.finish(eventId);
  }
}
