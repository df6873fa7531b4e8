import type pg from 'pg';
import { jobEventContracts, productEventContracts, sprintRunEventContracts } from '@gantry/contracts';
import { jsonRows, stateProjection, type Projection, type StoredEvent } from '@gantry/eventstore';
import {
  evolveJob,
  evolveProduct,
  evolveSprintRun,
  initialJobState,
  initialProductState,
  initialSprintRunState,
  jobExists,
  pauseEndOf,
  productExists,
  sprintRunExists,
  type Job,
  type JobEvent,
  type JobState,
  type Product,
  type ProductEvent,
  type ProductState,
  type SprintRun,
  type SprintRunEvent,
  type SprintRunState,
} from '../domain/index.js';

export const jobEventTypes = jobEventContracts.map((c) => c.type);
export const sprintRunEventTypes = sprintRunEventContracts.map((c) => c.type);
export const productEventTypes = productEventContracts.map((c) => c.type);

/** A job's row in the jobs view; `first` is the job's first event when the row is new. */
function jobRow(job: Job, first: StoredEvent | null) {
  return {
    job_id: job.jobId,
    // Only a new row takes it (the conflict branch leaves it): where the job entered the queue. Null
    // for a job created in one message, whose first event has no position yet (see save).
    enqueue_position: first ? first.position || null : 0,
    status: job.status,
    kind: job.kind,
    product_id: job.productId,
    story_id: job.storyId,
    sprint_id: job.sprintId,
    sprint_run_id: job.sprintRunId,
    task_id: job.taskId,
    agent_profile_id: job.agentProfile?.id ?? null,
    reason: job.reason,
    exclude_from_coalescing: job.excludeFromCoalescing,
    created_at: job.enqueuedAt,
    attempt: job.attempt,
    max_attempts: job.maxAttempts,
    lease_token: job.lease?.token ?? null,
    runner_id: job.lease?.runnerId ?? null,
    lease_expires_at: job.lease?.expiresAt ?? null,
    base_sha: job.baseSha,
    head_sha: job.headSha,
    pushed_at: job.pushedAt,
    error: job.error,
    task_status: job.taskStatus,
    payloads: job.payloads,
    agent_config: job.agentConfig,
    state: job,
    repository: job.repository ?? null,
    branch: job.workBranch ?? null,
    // A queued job's pause after a hand-back: the claims' pick leaves the job out until then.
    offer_not_before: pauseEndOf(job),
  };
}

/**
 * The jobs view: one row per job, the folded aggregate plus the columns that are filtered on.
 * Kept in the appending transaction, so the claim selection and the coalescing look-up read what
 * the log says (the append is still the compare-and-set).
 */
export const jobsProjection: Projection = stateProjection<JobState>({
  name: 'jobs_view',
  tables: ['jobs'],
  types: jobEventTypes,
  fields: [], // the job's state is made of its events' data
  initialState: initialJobState,
  evolve: (state, event) => evolveJob(state, { type: event.type, data: event.data } as JobEvent),
  async load(sql, jobIds) {
    const { rows } = await sql.query<{ job_id: string; state: Job }>(`SELECT job_id, state FROM jobs WHERE job_id = ANY($1)`, [jobIds]);
    return new Map(rows.map((r) => [r.job_id, r.state]));
  },
  async save(sql, changes) {
    const rows = changes.flatMap(({ state: job, first }) => (jobExists(job) ? [jobRow(job, first)] : []));
    if (rows.length === 0) return;
    // One statement for any number of jobs (a command writes one, a rebuild a batch). A job created
    // by a command written in one message (EventStore.executeInOneMessage) is saved before its first
    // event has a position (null here): that event, written just before in the same message, gives it.
    await sql.query(
      `INSERT INTO jobs (job_id, enqueue_position, status, kind, product_id, story_id, sprint_id, sprint_run_id, task_id,
         agent_profile_id, reason, exclude_from_coalescing, created_at, attempt, max_attempts, lease_token, runner_id,
         lease_expires_at, base_sha, head_sha, pushed_at, error, task_status, payloads, agent_config, state, repository, branch, offer_not_before)
       SELECT r.job_id,
              coalesce(r.enqueue_position, (SELECT e.position FROM events e WHERE e.stream_id = r.job_id AND e.stream_version = 1)),
              r.status, r.kind, r.product_id, r.story_id, r.sprint_id, r.sprint_run_id, r.task_id, r.agent_profile_id, r.reason,
              r.exclude_from_coalescing, r.created_at, r.attempt, r.max_attempts, r.lease_token, r.runner_id, r.lease_expires_at,
              r.base_sha, r.head_sha, r.pushed_at, r.error, r.task_status, r.payloads, r.agent_config, r.state, r.repository, r.branch,
              r.offer_not_before
         FROM json_to_recordset($1::json) AS r(job_id text, enqueue_position bigint, status text, kind text, product_id text,
         story_id text, sprint_id text, sprint_run_id text, task_id text, agent_profile_id text, reason text,
         exclude_from_coalescing boolean, created_at timestamptz, attempt integer, max_attempts integer, lease_token integer,
         runner_id text, lease_expires_at timestamptz, base_sha text, head_sha text, pushed_at timestamptz, error text,
         task_status text, payloads json, agent_config json, state json, repository text, branch text, offer_not_before timestamptz)
       ON CONFLICT (job_id) DO UPDATE SET
         status = EXCLUDED.status, attempt = EXCLUDED.attempt, lease_token = EXCLUDED.lease_token, runner_id = EXCLUDED.runner_id,
         lease_expires_at = EXCLUDED.lease_expires_at, base_sha = EXCLUDED.base_sha, head_sha = EXCLUDED.head_sha,
         pushed_at = EXCLUDED.pushed_at, error = EXCLUDED.error, task_status = EXCLUDED.task_status,
         payloads = EXCLUDED.payloads, agent_config = EXCLUDED.agent_config, state = EXCLUDED.state, offer_not_before = EXCLUDED.offer_not_before`,
      [jsonRows(rows)], // each row on its own: commands written together share this statement
    );
  },
  copy: { table: 'jobs', row: (job, first) => (jobExists(job) ? jobRow(job, first) : null) },
});

export const sprintRunsProjection: Projection = {
  name: 'sprint_runs_view',
  tables: ['sprint_runs'],
  types: sprintRunEventTypes,
  fields: [],
  async apply(sql: pg.PoolClient, event: StoredEvent): Promise<void> {
    const { rows } = await sql.query<{ state: SprintRun }>(`SELECT state FROM sprint_runs WHERE sprint_run_id = $1`, [event.streamId]);
    const before: SprintRunState = rows[0]?.state ?? initialSprintRunState;
    const run = evolveSprintRun(before, { type: event.type, data: event.data } as SprintRunEvent);
    if (!sprintRunExists(run)) return;
    await sql.query(
      `INSERT INTO sprint_runs (sprint_run_id, sprint_id, product_id, status, branch, created_at, state, repository)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
       ON CONFLICT (sprint_run_id) DO UPDATE SET status = EXCLUDED.status, state = EXCLUDED.state`,
      [run.sprintRunId, run.sprintId, run.productId, run.status, run.branch, run.createdAt, JSON.stringify(run), run.repository ?? null],
    );
  },
};

/** The products view: what an enqueue resolves its job against, in the same transaction. */
export const productsProjection: Projection = {
  name: 'products_view',
  tables: ['products'],
  types: productEventTypes,
  fields: [],
  async apply(sql: pg.PoolClient, event: StoredEvent): Promise<void> {
    const { rows } = await sql.query<{ state: Product }>(`SELECT state FROM products WHERE product_id = $1`, [(event.data as { productId: string }).productId]);
    const before: ProductState = rows[0]?.state ?? initialProductState;
    const product = evolveProduct(before, { type: event.type, data: event.data } as ProductEvent);
    if (!productExists(product)) return;
    await sql.query(
      `INSERT INTO products (product_id, repository, state) VALUES ($1, $2, $3)
       ON CONFLICT (product_id) DO UPDATE SET repository = EXCLUDED.repository, state = EXCLUDED.state`,
      [product.productId, product.settings.repository, JSON.stringify(product)],
    );
  },
};

export const jobServiceProjections: Projection[] = [jobsProjection, sprintRunsProjection, productsProjection];
