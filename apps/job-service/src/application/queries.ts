import { Controller, Inject } from '@nestjs/common';
import { ErrorCode, GantryError, getJob, getSprintRun, listJobs, type ReplyOf, type RequestOf } from '@gantry/contracts';
import { EventStore } from '@gantry/eventstore';
import { CommandHandler } from '@gantry/service-runtime';
import { jobView, sprintRunView, type Job } from '../domain/index.js';
import { jobRow, sprintRunRow } from '../infrastructure/job-store.js';

function encodeCursor(position: string): string {
  return Buffer.from(JSON.stringify({ after: position })).toString('base64url');
}

const MAX_POSITION = 2n ** 63n - 1n;

/** At most this many bytes of jobs (as JSON) in one page of list_jobs: half of NATS's default max_payload. */
export const MAX_PAGE_BYTES = 512 * 1024;

function decodeCursor(cursor: string): string {
  try {
    const after = (JSON.parse(Buffer.from(cursor, 'base64url').toString()) as { after?: unknown }).after;
    // A position the bigint column can hold: a longer one would be PostgreSQL's out-of-range error, an INTERNAL.
    if (typeof after === 'string' && /^\d+$/.test(after) && BigInt(after) <= MAX_POSITION) return after;
  } catch {
    // falls through to the refusal
  }
  throw new GantryError(ErrorCode.INVALID_COMMAND, 'the cursor is not one this service handed out', undefined, [{ path: ['cursor'], message: 'unknown cursor' }]);
}

/** The queries, answered from the projections (never from another service's tables). */
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
    const where: string[] = [];
    const values: unknown[] = [];
    const add = (clause: (p: string) => string, value: unknown) => {
      values.push(value);
      where.push(clause(`$${values.length}`));
    };
    if (request.status) add((p) => `status = ANY(${p})`, request.status);
    if (request.kind) add((p) => `kind = ANY(${p})`, request.kind);
    if (request.productId) add((p) => `product_id = ${p}`, request.productId);
    if (request.sprintId) add((p) => `sprint_id = ${p}`, request.sprintId);
    if (request.sprintRunId) add((p) => `sprint_run_id = ${p}`, request.sprintRunId);
    if (request.storyId) add((p) => `story_id = ${p}`, request.storyId);
    if (request.taskId) add((p) => `task_id = ${p}`, request.taskId);
    if (request.runnerId) add((p) => `runner_id = ${p}`, request.runnerId);
    if (request.cursor) add((p) => `enqueue_position > ${p}::bigint`, decodeCursor(request.cursor));
    values.push(request.limit + 1);
    const { rows } = await this.store.pool.query<{ state: Job; enqueue_position: string }>(
      `SELECT state, enqueue_position FROM jobs ${where.length ? `WHERE ${where.join(' AND ')}` : ''}
        ORDER BY enqueue_position LIMIT $${values.length}`,
      values,
    );
    // A page ends at `limit` jobs or at MAX_PAGE_BYTES of them, whichever comes first: a job's prompts and
    // payloads may be large, and the answer must fit one NATS message (docs/jobs.md, "Listing jobs").
    const jobs: ReplyOf<typeof listJobs>['jobs'] = [];
    let bytes = 0;
    for (const row of rows.slice(0, request.limit)) {
      const view = jobView(row.state);
      const size = Buffer.byteLength(JSON.stringify(view)) + 1;
      if (jobs.length > 0 && bytes + size > MAX_PAGE_BYTES) break;
      jobs.push(view);
      bytes += size;
    }
    const more = rows.length > jobs.length;
    return { jobs, nextCursor: more ? encodeCursor(rows[jobs.length - 1]!.enqueue_position) : null };
  }

  @CommandHandler(getSprintRun)
  async getSprintRun(request: RequestOf<typeof getSprintRun>): Promise<ReplyOf<typeof getSprintRun>> {
    const run = await sprintRunRow(this.store.pool, request.sprintRunId);
    if (!run) throw new GantryError(ErrorCode.NOT_FOUND, `sprint run ${request.sprintRunId} does not exist`);
    return sprintRunView(run);
  }
}
