import type pg from 'pg';
import type { EventEnvelope } from '@gantry/contracts';
import { fold, inlineStatement, type EventStore, type StoredEvent } from '@gantry/eventstore';
import {
  jobDecider,
  jobExists,
  sprintRunDecider,
  sprintRunExists,
  type Job,
  type JobEvent,
  type Product,
  type SprintRun,
  type SprintRunEvent,
} from '../domain/index.js';

type Sql = pg.PoolClient | pg.Pool;

/** A job folded from its own stream, up to `version` when given (the state right after that event). */
export async function loadJob(store: EventStore, jobId: string, sql: Sql, version?: number): Promise<Job | null> {
  return jobOf(await store.readStream(jobId, sql as pg.PoolClient), version);
}

/** The job a stream's events make, up to a version (all of them without one); null before it exists. */
export function jobOf(events: StoredEvent[], version?: number): Job | null {
  const upTo = version === undefined ? events : events.filter((e) => e.streamVersion <= version);
  const state = fold<ReturnType<typeof jobDecider.evolve>, JobEvent>(jobDecider, upTo);
  return jobExists(state) ? state : null;
}

export async function loadSprintRun(store: EventStore, sprintRunId: string, sql: Sql, version?: number): Promise<{ run: SprintRun | null; events: StoredEvent[] }> {
  const events = await store.readStream(sprintRunId, sql as pg.PoolClient);
  const upTo = version === undefined ? events : events.filter((e) => e.streamVersion <= version);
  const state = fold<ReturnType<typeof sprintRunDecider.evolve>, SprintRunEvent>(sprintRunDecider, upTo);
  return { run: sprintRunExists(state) ? state : null, events: upTo };
}

/**
 * Whether a job belongs to a sprint run, by the jobs view (written in the commit of the job's
 * events). A job not in the view yet is answered yes, so that the caller reads its stream.
 */
export async function inSprintRun(sql: Sql, jobId: string): Promise<boolean> {
  const { rows } = await sql.query<{ sprint_run_id: string | null }>(`SELECT sprint_run_id FROM jobs WHERE job_id = $1`, [jobId]);
  return rows.length === 0 || rows[0]!.sprint_run_id !== null;
}

/** Per pool (one service's schema), the jobs found in no sprint run, the latest OUTSIDE_SPRINT_RUNS_KEPT. */
const jobsOutsideSprintRuns = new WeakMap<Sql, Set<string>>();
const OUTSIDE_SPRINT_RUNS_KEPT = 10_000;

/**
 * Of a batch of job events, those (their event ids) whose job belongs to no sprint run, by the jobs
 * view, in one query. A job's run is set when it is enqueued and never changes, so the answer holds
 * outside any transaction, and a job once found in none is not asked about again: a job's later
 * events (pushed, finished) cost no query. A job not in the view yet is not named (its events are
 * handled), and a sprint job is asked about each time.
 */
export async function eventsOfJobsOutsideSprintRuns(events: readonly EventEnvelope[], sql: Sql): Promise<Set<string>> {
  let outside = jobsOutsideSprintRuns.get(sql);
  if (!outside) jobsOutsideSprintRuns.set(sql, (outside = new Set()));
  const unknown = [...new Set(events.map((e) => e.streamId))].filter((jobId) => !outside.has(jobId));
  if (unknown.length > 0) {
    const { rows } = await sql.query<{ job_id: string }>(`SELECT job_id FROM jobs WHERE job_id = ANY($1) AND sprint_run_id IS NULL`, [unknown]);
    const found = new Set(rows.map((r) => r.job_id));
    for (const jobId of found) outside.add(jobId);
    for (const jobId of outside) {
      if (outside.size <= OUTSIDE_SPRINT_RUNS_KEPT) break;
      if (!found.has(jobId)) outside.delete(jobId);
    }
  }
  return new Set(events.filter((e) => outside.has(e.streamId)).map((e) => e.eventId));
}

export async function jobRow(sql: Sql, jobId: string): Promise<Job | null> {
  const { rows } = await sql.query<{ state: Job }>(`SELECT state FROM jobs WHERE job_id = $1`, [jobId]);
  return rows[0]?.state ?? null;
}

export async function sprintRunRow(sql: Sql, sprintRunId: string): Promise<SprintRun | null> {
  const { rows } = await sql.query<{ state: SprintRun }>(`SELECT state FROM sprint_runs WHERE sprint_run_id = $1`, [sprintRunId]);
  return rows[0]?.state ?? null;
}

const PRODUCT_ROW = `SELECT state FROM products WHERE product_id = $1`;

export async function productRow(sql: Sql, productId: string): Promise<Product | null> {
  const { rows } = await sql.query<{ state: Product }>(PRODUCT_ROW, [productId]);
  return rows[0]?.state ?? null;
}

/** productRow's read as a statement with its value written in, to go in a message with others (ExecuteOptions.reads). */
export function productRowStatement(productId: string): string {
  return inlineStatement(PRODUCT_ROW, [productId]);
}

/** The open sprint run on a (repository, branch): how a pull request's outcome finds its sprint run. */
export async function openSprintRunOf(sql: Sql, repository: string, branch: string): Promise<string | null> {
  const { rows } = await sql.query<{ sprint_run_id: string }>(
    `SELECT sprint_run_id FROM sprint_runs WHERE repository = $1 AND branch = $2 AND status NOT IN ('DONE', 'CANCELLED')
      ORDER BY created_at DESC LIMIT 1`,
    [repository, branch],
  );
  return rows[0]?.sprint_run_id ?? null;
}

/**
 * Whether the job's sprint run has a newer job for the same task: one a resume queued because this
 * one had ended (a run's task gets a new job only then), by the jobs view.
 */
export async function supersededInItsSprintRun(sql: Sql, jobId: string): Promise<boolean> {
  const { rowCount } = await sql.query(
    `SELECT 1 FROM jobs o JOIN jobs n ON n.sprint_run_id = o.sprint_run_id AND n.task_id = o.task_id AND n.enqueue_position > o.enqueue_position
      WHERE o.job_id = $1 LIMIT 1`,
    [jobId],
  );
  return (rowCount ?? 0) > 0;
}

/** Whether `causationId` names an event of the sprint run's own stream: a command its effect processor sent. */
export async function causedByItsSprintRun(sql: Sql, causationId: string | null, sprintRunId: string): Promise<boolean> {
  if (causationId === null) return false;
  const { rowCount } = await sql.query(`SELECT 1 FROM events WHERE stream_id = $1 AND event_id::text = $2`, [sprintRunId, causationId]);
  return (rowCount ?? 0) > 0;
}

/**
 * The DONE job that pushed `headSha` to (repository, branch), if one of ours did, with the sprint run
 * it belongs to (null for a job of no run).
 */
export async function doneJobOfHead(sql: Sql, repository: string, branch: string, headSha: string): Promise<{ jobId: string; sprintRunId: string | null } | null> {
  const { rows } = await sql.query<{ job_id: string; sprint_run_id: string | null }>(
    `SELECT job_id, sprint_run_id FROM jobs WHERE repository = $1 AND branch = $2 AND head_sha = $3 AND status = 'DONE' ORDER BY enqueue_position DESC LIMIT 1`,
    [repository, branch, headSha],
  );
  return rows[0] ? { jobId: rows[0].job_id, sprintRunId: rows[0].sprint_run_id } : null;
}
