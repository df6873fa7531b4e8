import type pg from 'pg';
import type { EventStore } from './event-store.js';
import { commit } from './database.js';
import type { ExecuteResult } from './types.js';
import { isRetryable, runCommand, settle, type ExecuteOptions, type Outcome, type UnitOfWork } from './unit-of-work.js';

export interface GroupCommitLimits {
  /** Group transactions open at once. */
  maxGroups: number;
  /** Commands in one group transaction. */
  maxBatch: number;
}

interface GroupMember {
  options: ExecuteOptions;
  handler: (uow: UnitOfWork) => Promise<unknown>;
  resolve: (result: ExecuteResult<unknown>) => void;
  reject: (error: unknown) => void;
}

/** A replay from a receipt an earlier member of the same group wrote is `fromThisGroup`: it stands only if the group commits. */
type MemberOutcome = (Outcome<unknown> & { fromThisGroup?: true }) | { kind: 'failed'; error: unknown };

function settleMember(member: GroupMember, outcome: MemberOutcome): void {
  if (outcome.kind === 'failed') return member.reject(outcome.error);
  try {
    member.resolve(settle(outcome));
  } catch (error) {
    member.reject(error);
  }
}

/**
 * Group commit: while the allowed number of group transactions is busy, further commands wait
 * and then share one transaction (one commit), each inside its own savepoint with its own
 * receipt and its own expected-version checks. Under light load every command gets a group of
 * its own, so nothing waits for a batch to fill.
 */
export class GroupCommit {
  private readonly waiting: GroupMember[] = [];
  private groupsInFlight = 0;

  constructor(
    private readonly store: EventStore,
    private readonly limits: GroupCommitLimits,
    private readonly maxAttempts: number,
  ) {}

  submit<R>(options: ExecuteOptions, handler: (uow: UnitOfWork) => Promise<R>): Promise<ExecuteResult<R>> {
    return new Promise((resolve, reject) => {
      this.waiting.push({ options, handler, resolve: resolve as (r: ExecuteResult<unknown>) => void, reject });
      this.startGroups();
    });
  }

  private startGroups(): void {
    while (this.groupsInFlight < this.limits.maxGroups && this.waiting.length > 0) {
      const members = this.waiting.splice(0, this.limits.maxBatch);
      this.groupsInFlight++;
      const next = () => {
        this.groupsInFlight--;
        this.startGroups();
      };
      this.runGroup(members).then(next, (error: unknown) => {
        // runGroup answers every member itself; should it fail anyway, nobody is left waiting.
        for (const member of members) member.reject(error);
        next();
      });
    }
  }

  private async runGroup(members: GroupMember[]): Promise<void> {
    const outcomes: MemberOutcome[] = [];
    // The keys whose receipts members of this group wrote: a later member under one of them is
    // answered from a receipt that commits with the group, or not at all.
    const keysWritten = new Set<string>();
    const keyOf = (member: GroupMember) => (member.options.idempotency ? JSON.stringify([member.options.idempotency.scope, member.options.idempotency.key]) : null);
    let client: pg.PoolClient | null = null;
    let broken: unknown = undefined;
    // A connection that dies while checked out reports through the query that fails; without a
    // listener its 'error' event would also crash the process.
    const onError = (error: unknown) => {
      broken = error;
    };
    try {
      client = await this.store.pool.connect();
      client.on('error', onError);
      await client.query('BEGIN');
      for (const member of members) {
        for (let attempt = 1; ; attempt++) {
          await client.query('SAVEPOINT gantry_member');
          try {
            const outcome = await runCommand(client, this.store, member.options, member.handler);
            // A replay wrote nothing of its own; undo its receipt look-up's locks as well.
            if (outcome.kind === 'replayed') await client.query('ROLLBACK TO SAVEPOINT gantry_member');
            await client.query('RELEASE SAVEPOINT gantry_member');
            const key = keyOf(member);
            if (key !== null && outcome.kind !== 'replayed') keysWritten.add(key);
            outcomes.push(outcome.kind === 'replayed' && key !== null && keysWritten.has(key) ? { ...outcome, fromThisGroup: true } : outcome);
            break;
          } catch (error) {
            await client.query('ROLLBACK TO SAVEPOINT gantry_member');
            await client.query('RELEASE SAVEPOINT gantry_member');
            if (isRetryable(error) && attempt < this.maxAttempts) continue;
            outcomes.push({ kind: 'failed', error });
            break;
          }
        }
      }
      await commit(client);
    } catch (error) {
      // The group's transaction itself failed (connection lost, commit refused): none of its
      // writes is known to have landed, so every member that wrote gets the error to retry on, and
      // so does a repeat answered from a receipt a member of this group wrote (it is gone with it).
      broken ??= error;
      await client?.query('ROLLBACK').catch(() => undefined);
      members.forEach((member, i) => {
        const outcome = outcomes[i];
        if (outcome?.kind === 'replayed' && !outcome.fromThisGroup) settleMember(member, outcome);
        else member.reject(error);
      });
      return;
    } finally {
      client?.off('error', onError);
      // A broken connection is discarded rather than handed to the next command.
      client?.release(broken ? true : undefined);
    }
    members.forEach((member, i) => settleMember(member, outcomes[i]!));
  }
}
