import { Controller, Inject } from '@nestjs/common';
import { ErrorCode, GantryError, getJob, getJobStory, getSprintRun, JobStatusSchema, listJobs, type JobStatus, type ReplyOf, type RequestOf, type StoryEntryView } from '@gantry/contracts';
import { EventStore } from '@gantry/eventstore';
import { CommandHandler, cursorField, cutPage, decodeCursor, encodeCursor } from '@gantry/service-runtime';
import { jobView, sprintRunView, type Job } from '../domain/index.js';
import { jobRow, sprintRunRow } from '../infrastructure/job-store.js';

const MAX_POSITION = 2n ** 63n - 1n;

/** A list_jobs cursor: the enqueue position of the page's last job. */
function listJobsCursor(position: string): string {
  return encodeCursor({ after: position });
}

function positionAfter(cursor: string): string {
  return decodeCursor(cursor, (decoded) => {
    const after = cursorField(decoded, 'after', /^\d{1,19}$/);
    // A position the bigint column can hold: a longer one would be PostgreSQL's out-of-range error, an INTERNAL.
    return after !== undefined && BigInt(after) <= MAX_POSITION ? after : undefined;
  });
}

/** A job status as a literal of the statement: the partial index of that status is chosen when it is planned. */
const STATUS_LITERALS: Readonly<Record<JobStatus, string>> = Object.fromEntries(JobStatusSchema.options.map((status) => [status, `'${status}'`])) as Record<JobStatus, string>;

/**
 * The statement of a `list_jobs` page: the matching jobs in enqueue order, one more than the limit.
 * A runner is named on a job only while it holds the job's claim (CLAIMED or RUNNING), so a filter by
 * runner says so too: the claims' index then answers it, where PostgreSQL would otherwise read the
 * whole view and sort it, or walk the listing index through every finished job. A filter by status
 * reads each status on its own, a page at most from its own index in enqueue order, and the pages
 * are merged: one index walk cannot give several statuses' jobs in order, and with one status in
 * fifty PostgreSQL would rather walk the listing through the other 49 (docs/jobs.md, "Listing jobs").
 * A filter by kind without one by status or runner is read the same way, a page of each kind from
 * the kinds' index.
 */
export function listJobsStatement(request: RequestOf<typeof listJobs>): { text: string; values: unknown[] } {
  const where: string[] = [];
  const values: unknown[] = [];
  const param = (value: unknown) => {
    values.push(value);
    return `$${values.length}`;
  };
  const add = (clause: (p: string) => string, value: unknown) => where.push(clause(param(value)));
  const statuses = request.runnerId || !request.status ? [] : [...new Set(request.status)];
  const kinds = statuses.length === 0 && !request.runnerId ? [...new Set(request.kind ?? [])].map((kind) => `kind = ${param(kind)}`) : [];
  if (request.kind && kinds.length === 0) add((p) => `kind = ANY(${p})`, request.kind);
  if (request.productId) add((p) => `product_id = ${p}`, request.productId);
  if (request.sprintId) add((p) => `sprint_id = ${p}`, request.sprintId);
  if (request.sprintRunId) add((p) => `sprint_run_id = ${p}`, request.sprintRunId);
  if (request.storyId) add((p) => `story_id = ${p}`, request.storyId);
  if (request.taskId) add((p) => `task_id = ${p}`, request.taskId);
  if (request.runnerId) {
    add((p) => `runner_id = ${p}`, request.runnerId);
    where.push(`status IN ('CLAIMED', 'RUNNING')`);
    if (request.status) add((p) => `status = ANY(${p})`, request.status);
  }
  if (request.cursor) add((p) => `enqueue_position > ${p}::bigint`, positionAfter(request.cursor));
  const limit = param(request.limit + 1);
  const select = (clauses: string[]) => `SELECT state, enqueue_position FROM jobs ${clauses.length ? `WHERE ${clauses.join(' AND ')}` : ''} ORDER BY enqueue_position LIMIT ${limit}`;
  const pagesOf = statuses.length > 0 ? statuses.map((status) => `status = ${STATUS_LITERALS[status]}`) : kinds;
  if (pagesOf.length === 0) return { text: select(where), values };
  if (pagesOf.length === 1) return { text: select([pagesOf[0]!, ...where]), values };
  const pages = pagesOf.map((clause) => `(${select([clause, ...where])})`);
  return { text: `SELECT state, enqueue_position FROM (${pages.join(' UNION ALL ')}) AS pages ORDER BY enqueue_position LIMIT ${limit}`, values };
}

/** The events of a job's stream that are its story log, and the kind each is answered as. */
const STORY_KINDS = { ImplementationLogged: 'implementation', CommitLogged: 'commit', TestResultLogged: 'test_result' } as const;
const STORY_TYPES = Object.keys(STORY_KINDS);
const MAX_STREAM_VERSION = 2 ** 31 - 1;

/** A get_job_story cursor: the job, and the stream version of the page's last entry. */
function storyCursor(jobId: string, streamVersion: number): string {
  return encodeCursor({ q: 'get_job_story', jobId, after: streamVersion });
}

/** The stream version to read on after; another job's cursor is refused like any other it did not hand out. */
function storyAfter(cursor: string, jobId: string): number {
  return decodeCursor(cursor, (decoded) => {
    const { q, after } = decoded;
    if (q !== 'get_job_story' || decoded.jobId !== jobId) return undefined;
    return typeof after === 'number' && Number.isInteger(after) && after >= 1 && after <= MAX_STREAM_VERSION ? after : undefined;
  });
}

/** The queries, answered from the projections, and the story log from the job's own stream (never from another service's tables). */
@Controller()
export class JobQueries {
  constructor(@Inject(EventStore) private readonly store: EventStore) {}

  @CommandHandler(getJob)
  async getJob(request: RequestOf<typeof getJob>): Promise<ReplyOf<typeof getJob>> {
    const job = await jobRow(this.store.pool, request.jobId);
    if (!job) throw new GantryError(ErrorCode.NOT_FOUND, `job ${request.jobId} does not exist`);
    return jobView(job);
  }

  @CommandHandler(listJobs)
  async listJobs(request: RequestOf<typeof listJobs>): Promise<ReplyOf<typeof listJobs>> {
    const { rows } = await this.store.pool.query<{ state: Job; enqueue_position: string }>(listJobsStatement(request));
    // A page ends at `limit` jobs or at MAX_PAGE_BYTES of them, whichever comes first: a job's prompts and
    // payloads may be large, and the answer must fit one NATS message (docs/jobs.md, "Listing jobs").
    const page = cutPage(rows, request.limit, (row) => jobView(row.state));
    return { jobs: page.items, nextCursor: page.last ? listJobsCursor(page.last.enqueue_position) : null };
  }

  /**
   * The job's story log from its own stream, every attempt's entries in the order logged, a page
   * at a time (docs/jobs.md, "The story log"). Read on by stream version: an entry keeps its version,
   * and an entry logged meanwhile gets a higher one than every entry before it.
   */
  @CommandHandler(getJobStory)
  async getJobStory(request: RequestOf<typeof getJobStory>): Promise<ReplyOf<typeof getJobStory>> {
    const after = request.cursor ? storyAfter(request.cursor, request.jobId) : 0;
    if (!(await jobRow(this.store.pool, request.jobId))) throw new GantryError(ErrorCode.NOT_FOUND, `job ${request.jobId} does not exist`);
    const { rows } = await this.store.pool.query<{ stream_version: number; type: keyof typeof STORY_KINDS; data: Record<string, unknown> }>(
      `SELECT stream_version, type, data FROM events WHERE stream_id = $1 AND type = ANY($2::text[]) AND stream_version > $3
        ORDER BY stream_version LIMIT $4`,
      [request.jobId, STORY_TYPES, after, request.limit + 1],
    );
    const { rows: counted } = await this.store.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM events WHERE stream_id = $1 AND type = ANY($2::text[])`,
      [request.jobId, STORY_TYPES],
    );
    const page = cutPage(rows, request.limit, (row) => ({ ...row.data, kind: STORY_KINDS[row.type] }) as StoryEntryView);
    return {
      jobId: request.jobId,
      total: counted[0]!.n,
      entries: page.items,
      nextCursor: page.last ? storyCursor(request.jobId, page.last.stream_version) : null,
    };
  }

  @CommandHandler(getSprintRun)
  async getSprintRun(request: RequestOf<typeof getSprintRun>): Promise<ReplyOf<typeof getSprintRun>> {
    const run = await sprintRunRow(this.store.pool, request.sprintRunId);
    if (!run) throw new GantryError(ErrorCode.NOT_FOUND, `sprint run ${request.sprintRunId} does not exist`);
    return sprintRunView(run);
  }
}
