import type pg from 'pg';
import { jobEventContracts, productEventContracts, sprintRunEventContracts } from '@gantry/contracts';
import type { Projection, StoredEvent } from '@gantry/eventstore';
import {
  evolveJob,
  evolveProduct,
  evolveSprintRun,
  initialJobState,
  initialProductState,
  initialSprintRunState,
  jobExists,
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

/**
 * The jobs view: one row per job, the folded aggregate plus the columns that are filtered on.
 * Kept in the appending transaction, so the claim selection and the coalescing look-up read what
 * the log says (the append is still the compare-and-set).
 */
export const jobsProjection: Projection = {
  name: 'jobs_view',
  tables: ['jobs'],
  types: jobEventTypes,
  async apply(sql: pg.PoolClient, event: StoredEvent): Promise<void> {
    const { rows } = await sql.query<{ state: Job }>(`SELECT state FROM jobs WHERE job_id = $1`, [event.streamId]);
    const before: JobState = rows[0]?.state ?? initialJobState;
    const job = evolveJob(before, { type: event.type, data: event.data } as JobEvent);
    if (!jobExists(job)) return;
    await sql.query(
      `INSERT INTO jobs (job_id, enqueue_position, status, kind, product_id, story_id, sprint_id, sprint_run_id, task_id,
         agent_profile_id, reason, exclude_from_coalescing, created_at, attempt, max_attempts, lease_token, runner_id,
         lease_expires_at, base_sha, head_sha, pushed_at, error, task_status, payloads, agent_config, state, repository, branch)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26, $27, $28)
       ON CONFLICT (job_id) DO UPDATE SET
         status = EXCLUDED.status, attempt = EXCLUDED.attempt, lease_token = EXCLUDED.lease_token, runner_id = EXCLUDED.runner_id,
         lease_expires_at = EXCLUDED.lease_expires_at, base_sha = EXCLUDED.base_sha, head_sha = EXCLUDED.head_sha,
         pushed_at = EXCLUDED.pushed_at, error = EXCLUDED.error, task_status = EXCLUDED.task_status,
         payloads = EXCLUDED.payloads, agent_config = EXCLUDED.agent_config, state = EXCLUDED.state`,
      [
        job.jobId,
        event.position,
        job.status,
        job.kind,
        job.productId,
        job.storyId,
        job.sprintId,
        job.sprintRunId,
        job.taskId,
        job.agentProfile?.id ?? null,
        job.reason,
        job.excludeFromCoalescing,
        job.enqueuedAt,
        job.attempt,
        job.maxAttempts,
        job.lease?.token ?? null,
        job.lease?.runnerId ?? null,
        job.lease?.expiresAt ?? null,
        job.baseSha,
        job.headSha,
        job.pushedAt,
        job.error,
        job.taskStatus,
        JSON.stringify(job.payloads),
        job.agentConfig === null ? null : JSON.stringify(job.agentConfig),
        JSON.stringify(job),
        job.repository ?? null,
        job.workBranch ?? null,
      ],
    );
  },
};

export const sprintRunsProjection: Projection = {
  name: 'sprint_runs_view',
  tables: ['sprint_runs'],
  types: sprintRunEventTypes,
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
