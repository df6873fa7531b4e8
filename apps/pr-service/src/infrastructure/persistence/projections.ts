import type pg from 'pg';
import { pullRequestEventContracts } from '@gantry/contracts';
import type { Projection, StoredEvent } from '@gantry/eventstore';
import { evolvePullRequest, initialPullRequestState, isSettled, phaseOf, type PullRequestEvent, type PullRequestState } from '../../domain/index.js';

/** The pull requests view, kept in the appending transaction: how a webhook or a query finds a PR. */
export const pullRequestsProjection: Projection = {
  name: 'pull_requests_view',
  tables: ['pull_requests'],
  types: pullRequestEventContracts.map((c) => c.type),
  async apply(sql: pg.PoolClient, event: StoredEvent): Promise<void> {
    const { rows } = await sql.query<{ state: PullRequestState }>(`SELECT state FROM pull_requests WHERE pull_request_id = $1`, [event.streamId]);
    const state = evolvePullRequest(rows[0]?.state ?? initialPullRequestState, { type: event.type, data: event.data } as PullRequestEvent);
    await sql.query(
      `INSERT INTO pull_requests (pull_request_id, repository, branch, phase, pr_number, head_sha, settled, state, updated_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
       ON CONFLICT (pull_request_id) DO UPDATE SET phase = EXCLUDED.phase, pr_number = EXCLUDED.pr_number, head_sha = EXCLUDED.head_sha,
         settled = EXCLUDED.settled, state = EXCLUDED.state, updated_at = EXCLUDED.updated_at`,
      [
        state.pullRequestId,
        state.repository,
        state.branch,
        phaseOf(state),
        state.pr?.number ?? null,
        state.headSha,
        isSettled(state),
        JSON.stringify(state),
        state.updatedAt,
      ],
    );
  },
};

export const prServiceProjections: Projection[] = [pullRequestsProjection];
