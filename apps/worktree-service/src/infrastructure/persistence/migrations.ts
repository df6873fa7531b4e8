import type { MigrationInterface, QueryRunner } from 'typeorm';
import { TERMINAL_JOB_STATUSES } from '@gantry/contracts';
import { addColumnMigration, leaseSweepsMigration, processTableDdl, type MigrationClass } from '@gantry/eventstore';

/**
 * The read models of the worktree service: leases (queries, renew/release lookups, the release by
 * a job's terminal event, the expiry sweep), worktrees (hygiene, list_worktrees), and the status of
 * the jobs this service learned from the jobs stream (the stale reset).
 */
export class WorktreeReadModels1764547200000 implements MigrationInterface {
  name = 'WorktreeReadModels1764547200000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`
      CREATE TABLE worktree_leases (
        lease_id         uuid PRIMARY KEY,
        worktree_key     text NOT NULL,
        job_id           text NOT NULL,
        job_lease_token  integer NOT NULL,
        repository_url   text NOT NULL,
        branch           text NOT NULL,
        base_ref         text NOT NULL,
        status           text NOT NULL,
        token            integer,
        path             text,
        base_sha         text,
        expires_at       timestamptz,
        lock_deadline    timestamptz NOT NULL,
        requested_at     timestamptz NOT NULL,
        release_reason   text,
        failure_reason   text,
        rescue_branch    text,
        rescue_sha       text,
        updated_at       timestamptz NOT NULL
      )`);
    await q.query(`CREATE INDEX worktree_leases_job ON worktree_leases (job_id)`);
    await q.query(`CREATE INDEX worktree_leases_key ON worktree_leases (worktree_key)`);
    await q.query(`CREATE INDEX worktree_leases_live ON worktree_leases (status) WHERE status NOT IN ('released', 'lock_timeout', 'sync_failed', 'stale_released', 'withdrawn')`);
    await q.query(`
      CREATE TABLE worktrees (
        worktree_key    text PRIMARY KEY,
        repository_url  text NOT NULL,
        branch          text NOT NULL,
        path            text NOT NULL,
        held_by         uuid,
        last_used_at    timestamptz NOT NULL,
        created_at      timestamptz NOT NULL
      )`);
    await q.query(`CREATE INDEX worktrees_repository ON worktrees (repository_url, last_used_at)`);
    // Fed by the jobs stream consumer (with its inbox), not by this service's log.
    await q.query(`
      CREATE TABLE job_statuses (
        job_id          text PRIMARY KEY,
        status          text NOT NULL,
        lease_token     integer,
        -- the job service's log position of the event it was learned from: only a later one overwrites it
        source_position bigint NOT NULL,
        updated_at      timestamptz NOT NULL
      )`);
  }

  async down(q: QueryRunner): Promise<void> {
    for (const table of ['job_statuses', 'worktrees', 'worktree_leases']) await q.query(`DROP TABLE IF EXISTS ${table}`);
  }
}

/**
 * A ready lease whose claim ended elsewhere waits for its holder's release (docs/worktrees.md): the
 * leases show since when and why; a job's status records whether its claim was ended by its holder
 * (a finish, a rollback, a confirmed stop) or by the job service (a cancel, an expired lease).
 */
export class ReleasePending1764720000000 implements MigrationInterface {
  name = 'ReleasePending1764720000000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE worktree_leases ADD COLUMN release_pending_cause text, ADD COLUMN release_pending_since timestamptz`);
    await q.query(`ALTER TABLE job_statuses ADD COLUMN ended_by text`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE job_statuses DROP COLUMN IF EXISTS ended_by`);
    await q.query(`ALTER TABLE worktree_leases DROP COLUMN IF EXISTS release_pending_since, DROP COLUMN IF EXISTS release_pending_cause`);
  }
}

/** The open epoch of each worktree key whose books were closed at least once (docs/worktrees.md). */
export class WorktreeEpochs1764806400000 implements MigrationInterface {
  name = 'WorktreeEpochs1764806400000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`CREATE TABLE worktree_epochs (worktree_key text PRIMARY KEY, epoch integer NOT NULL CHECK (epoch > 0))`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP TABLE IF EXISTS worktree_epochs`);
  }
}

/** The running processes of the service, each by its epoch (docs/worktrees.md, "Replicas"). */
export class WorktreeProcesses1764892800000 implements MigrationInterface {
  name = 'WorktreeProcesses1764892800000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(processTableDdl('worktree_processes'));
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP TABLE IF EXISTS worktree_processes`);
  }
}

/**
 * When a job's end (a terminal status) was recorded in `job_statuses`, by the database's clock: its row
 * is pruned once the retention has passed since (docs/worktrees.md, "Retention of job statuses").
 * Rows already terminal count from the migration: later than their end, so never too early.
 */
export class JobStatusesEnded1785000000000 implements MigrationInterface {
  name = 'JobStatusesEnded1785000000000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE job_statuses ADD COLUMN IF NOT EXISTS ended_at timestamptz`);
    await q.query(`UPDATE job_statuses SET ended_at = now() WHERE ended_at IS NULL AND status = ANY($1::text[])`, [[...TERMINAL_JOB_STATUSES]]);
    await q.query(`CREATE INDEX IF NOT EXISTS job_statuses_ended ON job_statuses (ended_at) WHERE ended_at IS NOT NULL`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE job_statuses DROP COLUMN IF EXISTS ended_at`);
  }
}

/**
 * The latest lease sweep a replica made with its bus up (`lease_sweeps`, @gantry/eventstore): where a
 * start after nobody served, or a replica that gets its bus back, takes the outage to have begun, so that
 * it resumes only the leases still live then (LeaseSweep.resumeHeldLeases, docs/worktrees.md "When a
 * lease ends"). Not a projection of the log; unlogged: emptied by a crash of the server, it says no sweep
 * is known, and every held lease is resumed, as before it existed.
 */
export const WorktreeLeaseSweeps1785100000000 = leaseSweepsMigration('WorktreeLeaseSweeps1785100000000');

/** Whose fault a lease that could not be prepared is (docs/worktrees.md, "Whose fault a refused lease is"); rows of before count as the host's. */
export const WorktreeLeaseFailureFault1785200000000 = addColumnMigration('WorktreeLeaseFailureFault1785200000000', 'worktree_leases', 'failure_fault', 'text');

export const worktreeServiceMigrations: MigrationClass[] = [
  WorktreeReadModels1764547200000,
  ReleasePending1764720000000,
  WorktreeEpochs1764806400000,
  WorktreeProcesses1764892800000,
  JobStatusesEnded1785000000000,
  WorktreeLeaseSweeps1785100000000,
  WorktreeLeaseFailureFault1785200000000,
];
