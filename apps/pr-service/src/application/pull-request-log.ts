import { Inject, Injectable } from '@nestjs/common';
import type pg from 'pg';
import { ErrorCode, GantryError, type EventEnvelope } from '@gantry/contracts';
import { decideWithin, EventStore, fold, type CommandMetadata } from '@gantry/eventstore';
import { RetryLater } from '@gantry/messaging';
import { pullRequestDecider, type PullRequestCommand, type PullRequestEvent, type PullRequestState } from '../domain/index.js';

/**
 * Every fact about a pull request goes through here: decided on its stream and appended at the
 * version it was decided on (the append is the compare-and-set), with the pull_requests view kept
 * in the same transaction.
 */
@Injectable()
export class PullRequestLog {
  constructor(@Inject(EventStore) private readonly store: EventStore) {}

  now(): string {
    return this.store.clock().toISOString();
  }

  async load(pullRequestId: string, sql?: pg.PoolClient): Promise<PullRequestState> {
    const events = await this.store.readStream(pullRequestId, sql);
    return fold<PullRequestState, PullRequestEvent>(pullRequestDecider, events);
  }

  /**
   * A fact learnt outside any transaction (GitHub's answer to an effect, a read, a command): its own transaction, retried on a
   * conflict. `onlyIf`, when the fact appends anything: run in the transaction after the append, before the commit; what it
   * throws rolls the record back (a run's lock on the PR still held: PullRequestReconciler.record).
   */
  async record(
    command: PullRequestCommand,
    metadata: CommandMetadata,
    onlyIf?: (sql: pg.PoolClient) => Promise<void>,
  ): Promise<{ state: PullRequestState; events: PullRequestEvent[] }> {
    const executed = await this.store.execute({ metadata }, async (uow) => {
      const decision = await decideWithin(uow, pullRequestDecider, command.data.pullRequestId, command);
      if (onlyIf && decision.decided.length > 0) await onlyIf(uow.sql);
      return { state: decision.after, events: decision.decided };
    });
    return executed.result;
  }

  /** A fact learnt from another context's event, inside its consumer's transaction (with the inbox row). */
  async recordWithin(sql: pg.PoolClient, command: PullRequestCommand, cause: EventEnvelope): Promise<PullRequestEvent[]> {
    const streamId = command.data.pullRequestId;
    const history = await this.store.readStream(streamId, sql);
    const events = pullRequestDecider.decide(command, fold<PullRequestState, PullRequestEvent>(pullRequestDecider, history));
    if (events.length === 0) return events;
    try {
      await this.store.appendWithin(sql, streamId, history.length, events, {
        correlationId: cause.correlationId,
        causationId: cause.eventId,
        actor: 'pr-service',
        idempotencyKey: null,
      });
    } catch (error) {
      if (error instanceof GantryError && error.code === ErrorCode.VERSION_CONFLICT) throw new RetryLater('pull request appended concurrently', 50);
      throw error;
    }
    return events;
  }

  /** Pull requests not merged or closed, oldest change first: what a resync or a restart looks at. */
  async unsettled(limit = 10_000): Promise<string[]> {
    const { rows } = await this.store.pool.query<{ pull_request_id: string }>(
      `SELECT pull_request_id FROM pull_requests WHERE NOT settled ORDER BY updated_at NULLS FIRST LIMIT $1`,
      [limit],
    );
    return rows.map((r) => r.pull_request_id);
  }

  async stateOf(repository: string, branch: string): Promise<PullRequestState | null> {
    const { rows } = await this.store.pool.query<{ state: PullRequestState }>(`SELECT state FROM pull_requests WHERE repository = $1 AND branch = $2`, [
      repository,
      branch,
    ]);
    return rows[0]?.state ?? null;
  }

  /** Whether GitHub refused a draft to any PR of the repository (it has no drafts: PR-2). */
  async draftsRefusedIn(repository: string): Promise<boolean> {
    const { rows } = await this.store.pool.query(`SELECT 1 FROM pull_requests WHERE repository = $1 AND state->>'draftsSupported' = 'false' LIMIT 1`, [repository]);
    return rows.length > 0;
  }

  /**
   * The tracked pull requests of a repository whose head is `sha` or whose branch is one of `branches`. The
   * repository in any case: GitHub's names are case-insensitive, its deliveries spell them as GitHub does
   * (`Acme/Shop`), and a product may have been registered as `acme/shop`.
   */
  async idsFor(repository: string, match: { branches?: string[]; headSha?: string; prNumber?: number }): Promise<string[]> {
    const { rows } = await this.store.pool.query<{ pull_request_id: string }>(
      `SELECT pull_request_id FROM pull_requests
        WHERE lower(repository) = lower($1) AND (branch = ANY($2) OR head_sha = $3 OR pr_number = $4)`,
      [repository, match.branches ?? [], match.headSha ?? null, match.prNumber ?? null],
    );
    return rows.map((r) => r.pull_request_id);
  }
}
