import type { MigrationInterface, QueryRunner } from 'typeorm';
import { addColumnMigration, jsonTextColumnsMigration, lz4ColumnsMigration } from '@gantry/eventstore';

/**
 * The pr-service's tables beside its event log:
 *   pull_requests       projection of the PR streams (inline), found by (repository, branch) or head
 *   products, job_scopes what it learnt from the job service's events (kept by its consumer)
 *   webhook_deliveries  every verified GitHub delivery, once per X-GitHub-Delivery
 * (and, added later: github_rate_limit, pull_request_shown_back)
 */
export class PrServiceTables1767312000000 implements MigrationInterface {
  name = 'PrServiceTables1767312000000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`
      CREATE TABLE pull_requests (
        pull_request_id text PRIMARY KEY,
        repository      text NOT NULL,
        branch          text NOT NULL,
        phase           text NOT NULL,
        pr_number       integer,
        head_sha        text,
        settled         boolean NOT NULL,
        state           jsonb NOT NULL,
        updated_at      timestamptz,
        UNIQUE (repository, branch)
      )`);
    await q.query(`CREATE INDEX pull_requests_open ON pull_requests (updated_at) WHERE NOT settled`);
    await q.query(`CREATE INDEX pull_requests_by_head ON pull_requests (repository, head_sha)`);
    await q.query(`
      CREATE TABLE products (
        product_id  text PRIMARY KEY,
        repository  text NOT NULL,
        clone_url   text NOT NULL,
        settings    jsonb NOT NULL
      )`);
    await q.query(`
      CREATE TABLE job_scopes (
        job_id         text PRIMARY KEY,
        product_id     text NOT NULL,
        repository     text NOT NULL,
        branch         text NOT NULL,
        target_branch  text NOT NULL,
        task_id        text,
        story_id       text,
        sprint_id      text,
        sprint_run_id  text
      )`);
    await q.query(`
      CREATE TABLE webhook_deliveries (
        delivery_id   text PRIMARY KEY,
        event         text NOT NULL,
        action        text,
        payload       text NOT NULL,
        received_at   timestamptz NOT NULL DEFAULT now(),
        processed_at  timestamptz,
        outcome       text
      )`);
    await q.query(`CREATE INDEX webhook_deliveries_unprocessed ON webhook_deliveries (received_at) WHERE processed_at IS NULL`);
  }

  async down(q: QueryRunner): Promise<void> {
    for (const table of ['webhook_deliveries', 'job_scopes', 'products', 'pull_requests']) await q.query(`DROP TABLE IF EXISTS ${table}`);
  }
}

/** The pull requests' `state` column, rewritten by every command on their row, compressed with lz4 where the server has it (setColumnCompression). */
export const PrServiceStateCompression1780272000000 = lz4ColumnsMigration('PrServiceStateCompression1780272000000', [['pull_requests', 'state']]);

/** The pull requests' `state` as `json`, written and read whole (jsonTextColumnsMigration; docs/architecture.md, "The log's JSON is text"). */
export const PrServiceStateJsonText1782050000000 = jsonTextColumnsMigration('PrServiceStateJsonText1782050000000', [['pull_requests', 'state']]);

/** The pruning of processed deliveries (WebhookIntake.prune) finds them by when they were processed. */
export class PrServiceWebhookDeliveriesProcessed1784000000000 implements MigrationInterface {
  name = 'PrServiceWebhookDeliveriesProcessed1784000000000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`CREATE INDEX IF NOT EXISTS webhook_deliveries_processed ON webhook_deliveries (processed_at) WHERE processed_at IS NOT NULL`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP INDEX IF EXISTS webhook_deliveries_processed`);
  }
}

/**
 * When the service learnt that a job ended (its finish, its cancel, a claim end that failed it, its
 * red checks), by the database's clock: its `job_scopes` row is pruned from there (docs/pr-service.md,
 * "Retention of job scopes"). Rows from before have none and are kept: this service never learnt
 * their ends.
 */
export class PrServiceJobScopesEnded1785000000000 implements MigrationInterface {
  name = 'PrServiceJobScopesEnded1785000000000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE job_scopes ADD COLUMN IF NOT EXISTS ended_at timestamptz`);
    await q.query(`CREATE INDEX IF NOT EXISTS job_scopes_ended ON job_scopes (ended_at) WHERE ended_at IS NOT NULL`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE job_scopes DROP COLUMN IF EXISTS ended_at`);
  }
}

/** A delivery finds its pull requests by repository in any case (PullRequestLog.idsFor): GitHub's names are case-insensitive. */
export class PrServicePullRequestsByRepositoryAnyCase1786000000000 implements MigrationInterface {
  name = 'PrServicePullRequestsByRepositoryAnyCase1786000000000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`CREATE INDEX IF NOT EXISTS pull_requests_by_repository_any_case ON pull_requests (lower(repository))`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP INDEX IF EXISTS pull_requests_by_repository_any_case`);
  }
}

/**
 * The reset of GitHub's primary rate limit the service last met (GitHubRateLimitHold): the limit is the token's, so
 * every replica, and a process started again, holds its runs until then.
 */
export class PrServiceGitHubRateLimit1787000000000 implements MigrationInterface {
  name = 'PrServiceGitHubRateLimit1787000000000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`CREATE TABLE IF NOT EXISTS github_rate_limit (scope text PRIMARY KEY, until timestamptz NOT NULL)`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP TABLE IF EXISTS github_rate_limit`);
  }
}

/**
 * PR-15, PR-18: per pull request, what GitHub's reads have shown back (an earlier head, the base before the recorded
 * change) and since when, every read since showing it too — kept here, not in one process's memory, so that a read by
 * any replica showing something else starts the wait again, and a replica or a restart goes on from it.
 */
export class PrServicePullRequestShownBack1788000000000 implements MigrationInterface {
  name = 'PrServicePullRequestShownBack1788000000000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`CREATE TABLE IF NOT EXISTS pull_request_shown_back (pull_request_id text PRIMARY KEY, shown text NOT NULL, since text NOT NULL)`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP TABLE IF EXISTS pull_request_shown_back`);
  }
}

/**
 * PR-15: when the last read showing that head or base was made. The wait goes on only from a recent one: after a long
 * gap with no reads, a read showing it again starts the wait again (rows from before have none, and start it again too).
 */
export const PrServicePullRequestShownBackLastRead1789000000000 = addColumnMigration('PrServicePullRequestShownBackLastRead1789000000000', 'pull_request_shown_back', 'last_read', 'text');

export const prServiceMigrations = [
  PrServiceTables1767312000000,
  PrServiceStateCompression1780272000000,
  PrServiceStateJsonText1782050000000,
  PrServiceWebhookDeliveriesProcessed1784000000000,
  PrServiceJobScopesEnded1785000000000,
  PrServicePullRequestsByRepositoryAnyCase1786000000000,
  PrServiceGitHubRateLimit1787000000000,
  PrServicePullRequestShownBack1788000000000,
  PrServicePullRequestShownBackLastRead1789000000000,
];
