import { EventEmitter } from 'node:events';
import { Inject, Injectable } from '@nestjs/common';
import { decideWithin, EventStore, fold, type CommandMetadata, type Decision, type IdempotencyOptions } from '@gantry/eventstore';
import {
  effectsRequestedBy,
  worktreeLeaseDecider,
  type WorktreeEffect,
  type WorktreeLeaseCommand,
  type WorktreeLeaseEvent,
  type WorktreeLeaseState,
} from '../domain/index.js';

/** One WorktreeLease stream per worktree key (a key is a single subject token, so is the stream id). */
export const STREAM_PREFIX = 'worktree-';
export const streamIdOf = (worktreeKey: string): string => `${STREAM_PREFIX}${worktreeKey}`;

export type LeaseDecision = Decision<WorktreeLeaseState, WorktreeLeaseEvent>;

export interface DecideOptions<R> {
  metadata: CommandMetadata;
  idempotency?: IdempotencyOptions;
  reply?: (decision: LeaseDecision) => R;
}

/**
 * The WorktreeLease log: a decider command on a key's stream in one transaction (append at the
 * version it loaded), then — after the commit — the effects the new events ask for go to the effect
 * processor, and anyone waiting on a lease is woken.
 */
@Injectable()
export class WorktreeLeaseLog {
  private readonly changes = new EventEmitter();
  private effectListener: (effects: WorktreeEffect[]) => void = () => undefined;
  private closingFlag = false;

  constructor(@Inject(EventStore) readonly store: EventStore) {
    this.changes.setMaxListeners(0);
  }

  /** The effect processor registers here; the log never runs git itself. */
  onEffects(listener: (effects: WorktreeEffect[]) => void): void {
    this.effectListener = listener;
  }

  now(): string {
    return this.store.clock().toISOString();
  }

  async decide<R = null>(worktreeKey: string, command: WorktreeLeaseCommand, options: DecideOptions<R>): Promise<{ result: R; replayed: boolean }> {
    let decision: LeaseDecision | null = null;
    const outcome = await this.store.execute({ metadata: options.metadata, idempotency: options.idempotency }, async (uow) => {
      decision = await decideWithin(uow, worktreeLeaseDecider, streamIdOf(worktreeKey), command);
      return options.reply ? options.reply(decision) : (null as R);
    });
    const decided = decision as LeaseDecision | null;
    if (!outcome.replayed && decided && decided.decided.length > 0) {
      const effects = effectsRequestedBy(decided.after, decided.decided);
      if (effects.length > 0) this.effectListener(effects);
      this.changes.emit('change', worktreeKey);
    }
    return { result: outcome.result, replayed: outcome.replayed };
  }

  async load(worktreeKey: string): Promise<WorktreeLeaseState> {
    const history = await this.store.readStream(streamIdOf(worktreeKey));
    return fold(worktreeLeaseDecider, history);
  }

  /** Every worktree key that has a stream. */
  async keys(): Promise<string[]> {
    const { rows } = await this.store.pool.query<{ stream_id: string }>(
      `SELECT DISTINCT stream_id FROM events WHERE starts_with(stream_id, $1) ORDER BY stream_id`,
      [STREAM_PREFIX],
    );
    return rows.map((r) => r.stream_id.slice(STREAM_PREFIX.length));
  }

  /** The service is stopping: waiting acquires give up (UNAVAILABLE) and no new lease is requested. */
  close(): void {
    this.closingFlag = true;
    this.changes.emit('change', null);
  }

  get closing(): boolean {
    return this.closingFlag;
  }

  /** Resolves at the next change committed by this process, or after `ms`. */
  waitForChange(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.changes.off('change', done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.changes.on('change', done);
    });
  }
}

export const serviceActor = (purpose: string): CommandMetadata => ({
  correlationId: `worktree-service:${purpose}`,
  causationId: null,
  actor: 'worktree-service',
});
