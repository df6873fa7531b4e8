import type pg from 'pg';
import { withoutQueryTimeout, withTransaction } from '@gantry/eventstore';
import type { ClaimEndedBy, KnownJob } from '../../domain/index.js';

/*
 * An acquire and the end of its claim race (docs/worktrees.md, "When a lease ends"): the jobs
 * consumer records the end in `job_statuses` and ends the claim's leases, an acquire refuses a claim
 * known to have ended and then asks for its lease — each reading what the other may not have
 * committed yet. So the acquire reads the job again once its lease is in the log, under a lock of the
 * job that the consumer holds (shared) from before it looks for the claim's leases until it commits:
 * either the consumer's look comes after the lease was written and finds it, or the acquire's read
 * waits for the consumer's commit and sees the end.
 */

/** The job's lock, of this schema. */
const JOB_LOCK = `hashtextextended('gantry.worktree.claim-ends:' || current_schema() || ':' || $1, 0)`;

interface JobStatusRow {
  status: string;
  lease_token: number | null;
  ended_by: ClaimEndedBy | null;
}

const knownJob = (row: JobStatusRow | undefined): KnownJob | undefined =>
  row && { status: row.status, leaseToken: row.lease_token, endedBy: row.ended_by };

/** What the service knows of a job now (a plain read: an end being recorded meanwhile is not waited for). */
export async function jobAsKnown(sql: pg.Pool | pg.PoolClient, jobId: string): Promise<KnownJob | undefined> {
  const { rows } = await sql.query<JobStatusRow>(`SELECT status, lease_token, ended_by FROM job_statuses WHERE job_id = $1`, [jobId]);
  return knownJob(rows[0]);
}

/**
 * In the jobs consumer's transaction, before it looks for the leases of a claim that ended: the job's
 * lock, shared (ends of claims of one job do not wait for each other), held until the transaction ends.
 */
export async function holdWhileClaimEnds(sql: pg.PoolClient, jobId: string): Promise<void> {
  await sql.query(`SELECT pg_advisory_xact_lock_shared(${JOB_LOCK})`, [jobId]);
}

/**
 * What the service knows of a job once no end of one of its claims is being recorded: read under the
 * job's lock, waiting (without the query bound: the consumer's transaction may take a while) for the
 * consumer's transaction that holds it to end.
 */
export function jobAfterClaimEnds(pool: pg.Pool, jobId: string): Promise<KnownJob | undefined> {
  return withTransaction(pool, (client) =>
    withoutQueryTimeout(client, async () => {
      await client.query(`SELECT pg_advisory_xact_lock(${JOB_LOCK})`, [jobId]);
      return jobAsKnown(client, jobId);
    }),
  );
}
