import { EventEmitter } from 'node:events';
import { Inject, Injectable } from '@nestjs/common';
import { InjectPinoLogger, PinoLogger } from 'nestjs-pino';
import type pg from 'pg';
import { EventStore, fold, type CommandMetadata, type Decision, type IdempotencyOptions, type StoredEvent } from '@gantry/eventstore';
import {
  effectsRequestedBy,
  openingOf,
  worktreeLeaseDecider,
  type WorktreeEffect,
  type WorktreeLeaseCommand,
  type WorktreeLeaseEvent,
  type WorktreeLeaseState,
} from '../domain/index.js';
import { WORKTREE_CONFIG, type WorktreeConfig } from '../infrastructure/worktree-config.js';

/**
 * One WorktreeLease stream per worktree key and epoch (a key is a single subject token, so is the
 * stream id): `worktree-<key>` for epoch 0, `worktree-<key>~<n>` after the books were closed n times.
 */
export const STREAM_PREFIX = 'worktree-';
export const streamIdOf = (worktreeKey: string, epoch = 0): string =>
  epoch === 0 ? `${STREAM_PREFIX}${worktreeKey}` : `${STREAM_PREFIX}${worktreeKey}~${epoch}`;

export type LeaseDecision = Decision<WorktreeLeaseState, WorktreeLeaseEvent>;

export interface DecideOptions<R> {
  metadata: CommandMetadata;
  idempotency?: IdempotencyOptions;
  reply?: (decision: LeaseDecision) => R;
}

interface OpenStream {
  streamId: string;
  history: StoredEvent[];
  state: WorktreeLeaseState;
}

/**
 * The WorktreeLease log: a decider command on a key's open stream in one transaction (append at the
 * version it loaded), then — after the commit — the effects the new events ask for go to the effect
 * processor, and anyone waiting on a lease is woken. When a key's stream has grown past
 * GANTRY_WORKTREE_EPOCH_EVENTS, its books are closed: no command replays more than one epoch
 * (docs/worktrees.md).
 */
@Injectable()
export class WorktreeLeaseLog {
  private readonly changes = new EventEmitter();
  private effectListener: (effects: WorktreeEffect[]) => void = () => undefined;
  private closingFlag = false;

  constructor(
    @Inject(EventStore) readonly store: EventStore,
    @Inject(WORKTREE_CONFIG) private readonly config: WorktreeConfig,
    @InjectPinoLogger('lease-log') private readonly log: PinoLogger,
  ) {
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
      const open = await this.openStream(worktreeKey, uow.sql);
      const decided = worktreeLeaseDecider.decide(command, open.state);
      const appended = await uow.append(open.streamId, open.history.length, decided);
      const after = decided.reduce(worktreeLeaseDecider.evolve, open.state);
      decision = { before: open.state, after, decided, appended, version: open.history.length + decided.length };
      return options.reply ? options.reply(decision) : (null as R);
    });
    const decided = decision as LeaseDecision | null;
    if (!outcome.replayed && decided && decided.decided.length > 0) {
      const effects = effectsRequestedBy(decided.after, decided.decided);
      if (effects.length > 0) this.effectListener(effects);
      this.changes.emit('change', worktreeKey);
      if (decided.version > this.config.epochEvents) {
        await this.closeBooks(worktreeKey).catch((error: unknown) =>
          this.log.warn({ worktreeKey, error: String(error) }, 'books not closed; a later idle moment tries again'),
        );
      }
    }
    return { result: outcome.result, replayed: outcome.replayed };
  }

  /** The key's state in its open epoch. */
  async load(worktreeKey: string): Promise<WorktreeLeaseState> {
    return (await this.openStream(worktreeKey, this.store.pool)).state;
  }

  /**
   * Closes the books of a key whose open stream is longer than the limit: WorktreeBooksClosed ends it
   * and WorktreeBooksOpened — carrying the lock and the leases that have not ended — starts the next
   * epoch's stream, in one transaction. A command that loaded the old stream meanwhile conflicts on
   * its append and runs again on the new one; an effect still running reports to the new one.
   */
  async closeBooks(worktreeKey: string): Promise<boolean> {
    return (
      await this.store.execute({ metadata: serviceActor('close-books') }, async (uow) => {
        const open = await this.openStream(worktreeKey, uow.sql);
        if (open.history.length <= this.config.epochEvents) return false;
        const now = this.now();
        const closed = worktreeLeaseDecider.decide({ type: 'CloseBooks', data: { worktreeKey, now } }, open.state);
        await uow.append(open.streamId, open.history.length, closed);
        const after = closed.reduce(worktreeLeaseDecider.evolve, open.state);
        await uow.append(streamIdOf(worktreeKey, after.epoch + 1), 0, [openingOf(after, now)]);
        return true;
      })
    ).result;
  }

  /** The open epoch's stream: from the epoch the read model names, on past any stream closed since. */
  private async openStream(worktreeKey: string, sql: pg.Pool | pg.PoolClient): Promise<OpenStream> {
    const { rows } = await sql.query<{ epoch: number }>(`SELECT epoch FROM worktree_epochs WHERE worktree_key = $1`, [worktreeKey]);
    let epoch = rows[0]?.epoch ?? 0;
    for (;;) {
      const streamId = streamIdOf(worktreeKey, epoch);
      const history = await this.store.readStream(streamId, sql);
      const state = fold(worktreeLeaseDecider, history);
      if (!state.closed) return { streamId, history, state };
      epoch = state.epoch + 1;
    }
  }

  /** Every worktree key that has had a lease. */
  async keys(): Promise<string[]> {
    const { rows } = await this.store.pool.query<{ worktree_key: string }>(`SELECT DISTINCT worktree_key FROM worktree_leases ORDER BY worktree_key`);
    return rows.map((r) => r.worktree_key);
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
