import type { MigrationInterface, QueryRunner } from 'typeorm';
import { createIndexWhileWritten, indexWhileWrittenMigration, jsonTextColumnsMigration, leaseSweepsMigration, lz4ColumnsMigration } from '@gantry/eventstore';

/**
 * The read side of job-service. Each row keeps the folded aggregate (`state`) — the views are
 * computed from it — plus the columns the queries, the claim selection, the expiry sweep and the
 * coalescing look-up filter on. Both tables are projections: rebuildable from the log.
 */
export class JobServiceViews1764547200000 implements MigrationInterface {
  name = 'JobServiceViews1764547200000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`
      CREATE TABLE jobs (
        job_id                  text PRIMARY KEY,
        enqueue_position        bigint NOT NULL,
        status                  text NOT NULL,
        kind                    text NOT NULL,
        product_id              text NOT NULL,
        story_id                text,
        sprint_id               text,
        sprint_run_id           text,
        task_id                 text,
        agent_profile_id        text,
        reason                  text,
        exclude_from_coalescing boolean NOT NULL,
        created_at              timestamptz NOT NULL,
        attempt                 integer NOT NULL,
        max_attempts            integer NOT NULL,
        lease_token             integer,
        runner_id               text,
        lease_expires_at        timestamptz,
        base_sha                text,
        head_sha                text,
        pushed_at               timestamptz,
        error                   text,
        task_status             text,
        payloads                jsonb NOT NULL,
        agent_config            jsonb,
        state                   jsonb NOT NULL
      )`);
    await q.query(`CREATE INDEX jobs_queue ON jobs (kind, enqueue_position) WHERE status = 'QUEUED'`);
    await q.query(`CREATE INDEX jobs_leases ON jobs (lease_expires_at) WHERE status IN ('CLAIMED', 'RUNNING')`);
    await q.query(`CREATE INDEX jobs_coalescing ON jobs (product_id, kind, agent_profile_id, created_at) WHERE status = 'QUEUED' AND NOT exclude_from_coalescing`);
    await q.query(`CREATE INDEX jobs_by_sprint_run ON jobs (sprint_run_id) WHERE sprint_run_id IS NOT NULL`);
    await q.query(`CREATE INDEX jobs_by_sprint ON jobs (sprint_id) WHERE sprint_id IS NOT NULL`);
    await q.query(`CREATE INDEX jobs_by_story ON jobs (story_id) WHERE story_id IS NOT NULL`);
    await q.query(`CREATE INDEX jobs_listing ON jobs (enqueue_position)`);
    await q.query(`
      CREATE TABLE sprint_runs (
        sprint_run_id  text PRIMARY KEY,
        sprint_id      text NOT NULL,
        product_id     text NOT NULL,
        status         text NOT NULL,
        branch         text NOT NULL,
        created_at     timestamptz NOT NULL,
        state          jsonb NOT NULL
      )`);
    await q.query(`CREATE INDEX sprint_runs_by_branch ON sprint_runs (branch, status)`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP TABLE IF EXISTS sprint_runs`);
    await q.query(`DROP TABLE IF EXISTS jobs`);
  }
}

/**
 * Products and where work lands: the products view, and the repository and branch of jobs and
 * sprint runs, so that a pull request's outcome finds them by (repository, branch).
 */
export class JobServiceProducts1767225600000 implements MigrationInterface {
  name = 'JobServiceProducts1767225600000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`
      CREATE TABLE products (
        product_id  text PRIMARY KEY,
        repository  text NOT NULL,
        state       jsonb NOT NULL
      )`);
    await q.query(`ALTER TABLE jobs ADD COLUMN repository text, ADD COLUMN branch text`);
    await q.query(`CREATE INDEX jobs_by_head ON jobs (repository, branch, head_sha) WHERE head_sha IS NOT NULL`);
    await q.query(`ALTER TABLE sprint_runs ADD COLUMN repository text`);
    await q.query(`DROP INDEX IF EXISTS sprint_runs_by_branch`);
    await q.query(`CREATE INDEX sprint_runs_by_branch ON sprint_runs (repository, branch, status)`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP INDEX IF EXISTS sprint_runs_by_branch`);
    await q.query(`ALTER TABLE sprint_runs DROP COLUMN repository`);
    await q.query(`CREATE INDEX sprint_runs_by_branch ON sprint_runs (branch, status)`);
    await q.query(`DROP INDEX IF EXISTS jobs_by_head`);
    await q.query(`ALTER TABLE jobs DROP COLUMN repository, DROP COLUMN branch`);
    await q.query(`DROP TABLE IF EXISTS products`);
  }
}

/** The views' `state` columns, rewritten by every command on their row, compressed with lz4 where the server has it (setColumnCompression). */
export const JobServiceStateCompression1780272000000 = lz4ColumnsMigration('JobServiceStateCompression1780272000000', [['jobs', 'state'], ['sprint_runs', 'state'], ['products', 'state']]);

/**
 * The queue's index carries the job id, so that a claim's pick (ClaimPicker) reads a kind's oldest
 * queued jobs from it alone, in order, and stops after the few it needs. Without it PostgreSQL may
 * prefer the listing index (enqueue_position) and walk every finished job before the queue.
 */
export class JobServiceQueueIndex1780358400000 implements MigrationInterface {
  name = 'JobServiceQueueIndex1780358400000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`DROP INDEX IF EXISTS jobs_queue`);
    await q.query(`CREATE INDEX jobs_queue ON jobs (kind, enqueue_position, job_id) WHERE status = 'QUEUED'`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP INDEX IF EXISTS jobs_queue`);
    await q.query(`CREATE INDEX jobs_queue ON jobs (kind, enqueue_position) WHERE status = 'QUEUED'`);
  }
}

/**
 * The claim's pick as a function of the schema (`gantry_pick_queued(kinds, passed, wanted)`, see
 * ClaimPicker): the oldest `wanted` queued jobs of the kinds, but those passed, each kind read oldest
 * first from the queue's index and only as far as needed, then merged. It runs with incremental
 * sorts off. The queue's index gives each kind's jobs in the order asked; the listing index gives
 * them in enqueue order but not by job id within a position, which an incremental sort would add.
 * PostgreSQL prices a walk of the listing index as if the queued jobs were spread evenly among the
 * finished ones, so on some table sizes it took that walk and read every finished job before the
 * queue (docs/jobs.md, "Claims"). Without incremental sorts that walk has to sort the kind's whole
 * queue before answering, and is never the cheaper plan.
 */
export class JobServiceQueuePick1781050000000 implements MigrationInterface {
  name = 'JobServiceQueuePick1781050000000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`
      CREATE FUNCTION gantry_pick_queued(kinds text[], passed text[], wanted integer) RETURNS SETOF text
        LANGUAGE sql STABLE SET enable_incremental_sort = off AS $$
          SELECT q.job_id FROM unnest(ARRAY(SELECT DISTINCT unnest(kinds))) AS k(kind)
            CROSS JOIN LATERAL (SELECT job_id, enqueue_position FROM jobs
                                 WHERE status = 'QUEUED' AND kind = k.kind AND NOT (job_id = ANY(passed))
                                 ORDER BY enqueue_position, job_id LIMIT wanted) AS q
           ORDER BY q.enqueue_position LIMIT wanted
        $$`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP FUNCTION IF EXISTS gantry_pick_queued(text[], text[], integer)`);
  }
}

/**
 * Room on each page of the jobs view for its rows' next versions. A job's row is rewritten by every
 * command on it; when the new version fits on the row's page and no indexed column changed (a
 * story-log entry), PostgreSQL writes it there without touching the view's nine indexes (a
 * heap-only tuple). Full pages, the default, left most such rewrites to go through every index.
 * Rows added from now on get the room; pages already written stay as they are (docs/architecture.md,
 * "Rows rewritten in place").
 */
export class JobServiceViewsFillFactor1781100000000 implements MigrationInterface {
  name = 'JobServiceViewsFillFactor1781100000000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE jobs SET (fillfactor = 50)`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE jobs RESET (fillfactor)`);
  }
}

/**
 * The views' JSON columns as `json`: they are written and read whole, never searched, and `jsonb`
 * cost the server a parse on every write and a conversion back to text on every read (docs/architecture.md,
 * "The log's JSON is text").
 */
export const JobServiceViewsJsonText1782050000000 = jsonTextColumnsMigration('JobServiceViewsJsonText1782050000000', [
  ['jobs', 'payloads'],
  ['jobs', 'agent_config'],
  ['jobs', 'state'],
  ['sprint_runs', 'state'],
  ['products', 'state'],
]);

/**
 * The body of `gantry_pick_and_hold` around the pick it makes (`pick`: the call of `gantry_pick_queued`
 * on `others.held`, the jobs other holders hold): the oldest `wanted` queued jobs of the kinds, but those
 * passed and those another holder holds; each is then held for `holder`, in the queue's order (so two
 * look-ups that wait for each other's holds always wait in the same order). A job another holder took
 * meanwhile comes back with held = false. Holds that ran out are taken over here, and removed by a
 * statement of their own (ClaimPicker), which never waits for a row: removed in a look-up's transaction
 * they could make two look-ups wait for each other.
 */
function pickAndHoldBody(pick: string): string {
  return `
          WITH others AS (
            SELECT coalesce(array_agg(h.job_id), '{}') AS held FROM claim_holds h
             WHERE h.holder <> gantry_pick_and_hold.holder AND h.held_until > clock_timestamp()
          ), picked AS (
            SELECT p.job_id, p.n FROM others CROSS JOIN LATERAL ${pick} WITH ORDINALITY AS p(job_id, n)
          ), taken AS (
            INSERT INTO claim_holds AS h (job_id, holder, held_until)
            SELECT picked.job_id, gantry_pick_and_hold.holder, clock_timestamp() + make_interval(secs => hold_ms / 1000.0) FROM picked ORDER BY picked.n
            ON CONFLICT (job_id) DO UPDATE SET holder = EXCLUDED.holder, held_until = EXCLUDED.held_until
              WHERE h.holder = EXCLUDED.holder OR h.held_until <= clock_timestamp()
            RETURNING h.job_id
          )
          SELECT picked.job_id, taken.job_id IS NOT NULL FROM picked LEFT JOIN taken USING (job_id) ORDER BY picked.n
        `;
}

/**
 * Holds on queued jobs a replica's claims picked (`claim_holds`, `gantry_pick_and_hold`, see
 * ClaimPicker): a look-up of one replica skips the jobs another holds, so replicas claiming from one
 * queue do not pick the same jobs and lose their writes to each other. A hold is a hint with an
 * expiry, not a lock: the claim's compare-and-set still decides, a replica that stops leaves its
 * holds to run out, and the table is unlogged (after a crash of the server it starts empty).
 */
export class JobServiceClaimHolds1782100000000 implements MigrationInterface {
  name = 'JobServiceClaimHolds1782100000000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`CREATE UNLOGGED TABLE claim_holds (job_id text PRIMARY KEY, holder text NOT NULL, held_until timestamptz NOT NULL)`);
    await q.query(`
      CREATE FUNCTION gantry_pick_and_hold(kinds text[], passed text[], wanted integer, holder text, hold_ms integer)
        RETURNS TABLE (job_id text, held boolean) LANGUAGE sql VOLATILE AS $$
${pickAndHoldBody('gantry_pick_queued(kinds, passed || others.held, wanted)')}$$`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP FUNCTION IF EXISTS gantry_pick_and_hold(text[], text[], integer, text, integer)`);
    await q.query(`DROP TABLE IF EXISTS claim_holds`);
  }
}

/**
 * One open sprint run per (repository, branch) (docs/jobs.md, "Sprint runs"): the runs view is
 * written in the transaction of the run's events, so a create or a resume that would make a second
 * run open on a branch fails on this index, and of two at once exactly one commits. A run that ends
 * (DONE, FAILED, CANCELLED) leaves it.
 */
export class JobServiceOneOpenRunPerBranch1782200000000 implements MigrationInterface {
  name = 'JobServiceOneOpenRunPerBranch1782200000000';

  async up(q: QueryRunner): Promise<void> {
    // Runs that already shared a branch when the rule came are left out of it, but the newest on each
    // (the one a pull request's facts reach): an index they broke could not be made, and the service,
    // which alone can cancel them, could not start.
    const shared: { sprint_run_id: string }[] = await q.query(
      `SELECT sprint_run_id FROM (
         SELECT sprint_run_id, row_number() OVER (PARTITION BY repository, branch ORDER BY created_at DESC, sprint_run_id DESC) AS n
           FROM sprint_runs WHERE status IN ('QUEUED', 'RUNNING', 'PAUSED') AND repository IS NOT NULL) AS open_runs
        WHERE n > 1`,
    );
    const leftOut = shared.length > 0 ? ` AND sprint_run_id <> ALL (ARRAY[${shared.map((r) => `'${r.sprint_run_id.replaceAll("'", "''")}'`).join(', ')}]::text[])` : '';
    await q.query(`CREATE UNIQUE INDEX ${OPEN_RUN_PER_BRANCH} ON sprint_runs (repository, branch) WHERE status IN ('QUEUED', 'RUNNING', 'PAUSED')${leftOut}`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP INDEX IF EXISTS ${OPEN_RUN_PER_BRANCH}`);
  }
}

/**
 * The latest lease sweep a replica made with its bus up (`lease_sweeps`, one row): where a start, or a
 * replica that gets its bus back, takes the outage to have begun, so that it resumes only the leases
 * still live then (LeaseExpirySweep, docs/jobs.md "A job service outage"). Not a projection of the
 * log; unlogged, like the claim holds: emptied by a crash of the server, it says no sweep is known,
 * and every live lease is resumed, as before it existed.
 */
export const JobServiceLeaseSweeps1782300000000 = leaseSweepsMigration('JobServiceLeaseSweeps1782300000000');

/**
 * The listing's filters by product, by task and by a finished status, each in enqueue order, so that
 * a `list_jobs` page by one of them reads the matching jobs only (listJobsStatement; docs/jobs.md,
 * "Listing jobs"), where it walked the listing index through every other job. The finished jobs'
 * index holds a job from its finish on only, so the steps of its life before add nothing to it; the
 * task's leaves out the jobs of no task. Built while the service's replicas write (createIndexWhileWritten).
 */
export class JobServiceListingFilters1782400000000 implements MigrationInterface {
  name = 'JobServiceListingFilters1782400000000';
  /** CREATE INDEX CONCURRENTLY cannot run in a transaction. */
  transaction = false;

  async up(q: QueryRunner): Promise<void> {
    await createIndexWhileWritten(q, 'jobs', 'jobs_by_product', '(product_id, enqueue_position)');
    await createIndexWhileWritten(q, 'jobs', 'jobs_by_task', '(task_id, enqueue_position) WHERE task_id IS NOT NULL');
    await createIndexWhileWritten(q, 'jobs', 'jobs_finished', `(status, enqueue_position) WHERE status IN ('DONE', 'FAILED', 'SKIPPED', 'CANCELLED')`);
  }

  async down(q: QueryRunner): Promise<void> {
    for (const index of ['jobs_finished', 'jobs_by_task', 'jobs_by_product']) await q.query(`DROP INDEX CONCURRENTLY IF EXISTS ${index}`);
  }
}

/** The statuses a job ends in, each with an index of its jobs in enqueue order (JobServiceListingByStatus). */
const FINISHED_STATUSES = ['DONE', 'FAILED', 'SKIPPED', 'CANCELLED'] as const;
const finishedIndex = (status: (typeof FINISHED_STATUSES)[number]) => `jobs_${status.toLowerCase()}`;

/**
 * The finished jobs of each status in enqueue order, one partial index per status, in place of one
 * index of them all by status (`jobs_finished`). With that one, PostgreSQL reckoned a page's rows
 * scattered over the view (the index's leading column is the status) and walked the listing instead
 * through the jobs of every other status: 525 rows for a page of ten of a status one job in fifty
 * has. In enqueue order alone, each index reads a page and one more, and a filter by several statuses
 * merges a page of each (listJobsStatement; docs/jobs.md, "Listing jobs"). A job enters one of them
 * at its finish only, as it entered `jobs_finished`. Built while the service's replicas write.
 */
export class JobServiceListingByStatus1782500000000 implements MigrationInterface {
  name = 'JobServiceListingByStatus1782500000000';
  /** CREATE INDEX CONCURRENTLY cannot run in a transaction. */
  transaction = false;

  async up(q: QueryRunner): Promise<void> {
    for (const status of FINISHED_STATUSES) await createIndexWhileWritten(q, 'jobs', finishedIndex(status), `(enqueue_position) WHERE status = '${status}'`);
    await q.query(`DROP INDEX CONCURRENTLY IF EXISTS jobs_finished`);
  }

  async down(q: QueryRunner): Promise<void> {
    await createIndexWhileWritten(q, 'jobs', 'jobs_finished', `(status, enqueue_position) WHERE status IN ('DONE', 'FAILED', 'SKIPPED', 'CANCELLED')`);
    for (const status of FINISHED_STATUSES) await q.query(`DROP INDEX CONCURRENTLY IF EXISTS ${finishedIndex(status)}`);
  }
}

/**
 * The jobs of each kind in enqueue order, so that a `list_jobs` page by kind alone reads that kind's
 * jobs only, a page and one more (several kinds: a page of each, merged; listJobsStatement,
 * docs/jobs.md, "Listing jobs"), where it walked the listing index through the jobs of every other
 * kind, all of them for a kind without jobs. Built while the service's replicas write.
 */
export const JobServiceListingByKind1782600000000 = indexWhileWrittenMigration('JobServiceListingByKind1782600000000', 'jobs', 'jobs_by_kind', '(kind, enqueue_position)');

/**
 * A polling claim's pick leaves out the jobs still in their hand-back pause (docs/jobs.md, "Attempts"):
 * the jobs view keeps the moment a queued job may be claimed from (`offer_not_before`, null when at
 * once), the queue's index carries it (`jobs_queue_due`, in place of `jobs_queue`: the pick still reads
 * the index alone), and the pick takes the claim's time (`gantry_pick_queued` and `gantry_pick_and_hold`
 * with `due_at`, the job service's clock). Before, the pick handed a paused job to every look-up, which
 * the claim's decision refused, and the look-up was made again without it: a refusal and a look-up more
 * per claim and paused job, for up to a minute. The functions without `due_at` stay for replicas of
 * the version before, which pick as they did; the job's decision still refuses a paused job.
 */
export class JobServicePausedJobsOutOfPick1782700000000 implements MigrationInterface {
  name = 'JobServicePausedJobsOutOfPick1782700000000';
  /** CREATE INDEX CONCURRENTLY cannot run in a transaction. */
  transaction = false;

  async up(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE jobs ADD COLUMN IF NOT EXISTS offer_not_before timestamptz`);
    await q.query(
      `UPDATE jobs SET offer_not_before = (state->>'offerNotBefore')::timestamptz
        WHERE status = 'QUEUED' AND state->>'offerNotBefore' IS NOT NULL AND offer_not_before IS NULL`,
    );
    await createIndexWhileWritten(q, 'jobs', 'jobs_queue_due', `(kind, enqueue_position, job_id) INCLUDE (offer_not_before) WHERE status = 'QUEUED'`);
    await q.query(`DROP INDEX CONCURRENTLY IF EXISTS jobs_queue`);
    await q.query(`
      CREATE OR REPLACE FUNCTION gantry_pick_queued(kinds text[], passed text[], wanted integer, due_at timestamptz) RETURNS SETOF text
        LANGUAGE sql STABLE SET enable_incremental_sort = off AS $$
          SELECT q.job_id FROM unnest(ARRAY(SELECT DISTINCT unnest(kinds))) AS k(kind)
            CROSS JOIN LATERAL (SELECT job_id, enqueue_position FROM jobs
                                 WHERE status = 'QUEUED' AND kind = k.kind AND NOT (job_id = ANY(passed))
                                   AND (offer_not_before IS NULL OR offer_not_before <= due_at)
                                 ORDER BY enqueue_position, job_id LIMIT wanted) AS q
           ORDER BY q.enqueue_position LIMIT wanted
        $$`);
    await q.query(`
      CREATE OR REPLACE FUNCTION gantry_pick_and_hold(kinds text[], passed text[], wanted integer, holder text, hold_ms integer, due_at timestamptz)
        RETURNS TABLE (job_id text, held boolean) LANGUAGE sql VOLATILE AS $$
${pickAndHoldBody('gantry_pick_queued(kinds, passed || others.held, wanted, due_at)')}$$`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP FUNCTION IF EXISTS gantry_pick_and_hold(text[], text[], integer, text, integer, timestamptz)`);
    await q.query(`DROP FUNCTION IF EXISTS gantry_pick_queued(text[], text[], integer, timestamptz)`);
    await createIndexWhileWritten(q, 'jobs', 'jobs_queue', `(kind, enqueue_position, job_id) WHERE status = 'QUEUED'`);
    await q.query(`DROP INDEX CONCURRENTLY IF EXISTS jobs_queue_due`);
    await q.query(`ALTER TABLE jobs DROP COLUMN IF EXISTS offer_not_before`);
  }
}

/** The index that holds a branch for its open sprint run. */
export const OPEN_RUN_PER_BRANCH = 'sprint_runs_open_branch';

export const jobServiceMigrations = [
  JobServiceViews1764547200000,
  JobServiceProducts1767225600000,
  JobServiceStateCompression1780272000000,
  JobServiceQueueIndex1780358400000,
  JobServiceQueuePick1781050000000,
  JobServiceViewsFillFactor1781100000000,
  JobServiceViewsJsonText1782050000000,
  JobServiceClaimHolds1782100000000,
  JobServiceOneOpenRunPerBranch1782200000000,
  JobServiceLeaseSweeps1782300000000,
  JobServiceListingFilters1782400000000,
  JobServiceListingByStatus1782500000000,
  JobServiceListingByKind1782600000000,
  JobServicePausedJobsOutOfPick1782700000000,
];
