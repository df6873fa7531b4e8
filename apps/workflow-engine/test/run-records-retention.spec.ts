import { randomUUID } from 'node:crypto';
import { cancelJob, eventSubject } from '@gantry/contracts';
import { EVENT_COLUMNS, toStoredEvent, type EventRow } from '@gantry/eventstore';
import { toEnvelope } from '@gantry/messaging';
import type { RetentionPass, RetentionPruner } from '@gantry/service-runtime';
import { eventually } from '@gantry/testing';
import { JOB_EVENTS_CONSUMER } from '../src/application/job-events.js';
import { RunRecordsRetention, runRecordsRetentionMs } from '../src/application/run-records-retention.js';
import { pruneRunRecords } from '../src/infrastructure/persistence/run-records-retention.js';
import { WorkflowWorld } from './harness.js';

/*
 * The retention of `task_jobs` and `queued_runs` (docs/workflow-engine.md, "Retention of runs and
 * jobs"): a job's rows go once no event about it can reach the engine any more — the receipt window
 * plus twice the jobs stream's max age (with its clock margin) after the job ended — and a run's once
 * its entry ended too. The streams keep events for 15 s here, receipts last 30 s (the retention is
 * 30 + 2 × 16.5 = 63 s), and the pruning job runs every 500 ms.
 */
const STREAM_MAX_AGE_MS = 15_000;
const RECEIPT_TTL_MS = 30_000;
const HOUR = 60 * 60 * 1000;

describe('retention of the engine\'s runs and jobs', () => {
  const world = new WorkflowWorld('wf_run_retention');

  beforeAll(async () => {
    const limits = { GANTRY_STREAM_MAX_AGE_MS: String(STREAM_MAX_AGE_MS), GANTRY_RECEIPT_TTL_MS: String(RECEIPT_TTL_MS) };
    await world.start({ jobServiceEnv: limits, engineEnv: { ...limits, GANTRY_PRUNE_INTERVAL_MS: '500' } });
    await world.profile('implementer');
    await world.importYaml('loop', `
name: Loop
steps:
  - id: todo
    name: To do
  - id: work
    name: Work
    agent_profile_id: implementer
    on_enter:
      - type: auto_start_agent
    on_turn_complete:
      - type: move_to_next
  - id: review
    name: Review
`);
  }, 120_000);
  afterAll(() => world.close(), 60_000);

  const rows = async (table: 'task_jobs' | 'queued_runs', jobId: string) => (await world.db.query(`SELECT * FROM ${table} WHERE job_id = $1`, [jobId])).rows;


  const autoStarted = (taskId: string, count: number) =>
    eventually(async () => {
      const jobs = await world.jobs(taskId, 'TASK_IMPLEMENTATION');
      return jobs.length === count ? jobs : null;
    }, { what: `the entry's auto-started job (${count})`, timeoutMs: 60_000 });

  it('keeps a finished job\'s rows while an event about it can still come — a late finish of an earlier entry moves nothing — and prunes them after', async () => {
    const { taskId } = await world.task('loop');
    await world.move(taskId, 'work');
    const [first] = await autoStarted(taskId, 1);
    const firstJob = first!.jobId;
    await eventually(async () => (await rows('task_jobs', firstJob)).length === 1, { what: 'the first job recorded from its JobEnqueued', timeoutMs: 60_000 });
    expect(await rows('queued_runs', firstJob)).toHaveLength(1);

    // Its turn completes (the entry ends, the task moves on), then the task comes back: a second entry, a second job.
    await world.skippedTurn(firstJob);
    await world.atStep(taskId, 'review', 120_000);
    await eventually(async () => (await rows('task_jobs', firstJob))[0]?.ended_at != null, { what: 'the first job\'s end recorded', timeoutMs: 60_000 });
    await world.move(taskId, 'work');
    const jobs = await autoStarted(taskId, 2);
    const secondJob = jobs.find((j) => j.jobId !== firstJob)!.jobId;

    // The first job's JobFinished, handled, leaves the engine's inbox once the stream dropped it
    // (1.1 × its max age), and the receipt of the turn it made goes after the receipt window: then it
    // comes again, as a dead letter handed back or a republish would. Nothing but the job's rows
    // tells the engine now that it is an earlier entry's.
    const [finished] = (await world.jobsDb.query<EventRow>(`SELECT ${EVENT_COLUMNS} FROM events WHERE type = 'JobFinished' AND stream_id = $1`, [firstJob])).rows;
    const event = toStoredEvent(finished!);
    const inboxRow = async () => (await world.db.query(`SELECT 1 FROM inbox WHERE consumer = $1 AND event_id = $2`, [JOB_EVENTS_CONSUMER, event.eventId])).rowCount === 1;
    const turnReceipt = async () => (await world.db.query(`SELECT 1 FROM idempotency_receipts WHERE scope = 'workflow.turn' AND key = $1`, [event.eventId])).rowCount === 1;
    expect(await turnReceipt()).toBe(true);
    await eventually(async () => !(await inboxRow()) && !(await turnReceipt()), { what: 'the inbox row and the turn receipt of the first JobFinished pruned', timeoutMs: 180_000 });
    expect(await rows('task_jobs', firstJob)).toHaveLength(1);
    const entriesBefore = (await world.entries(taskId)).length;
    await world.bus.js.publish(eventSubject(world.naming, 'jobs', event.type, event.streamId), JSON.stringify(toEnvelope(event)), { msgID: `${event.eventId}:late` });
    await eventually(inboxRow, { what: 'the late JobFinished handled', timeoutMs: 60_000 });
    // Attributed to the entry it was queued for, it is the turn of an occupancy the task has left.
    const task = await world.getTask(taskId);
    expect(task.placement).toMatchObject({ stepId: 'work', admitted: true });
    expect(await world.entries(taskId)).toHaveLength(entriesBefore);
    await world.logged((r) => r.message === 'turn of an earlier step occupancy; nothing to do' && r.jobId === firstJob, 'the late finish judged as an earlier occupancy\'s');

    // Past the retention, the pruning job deletes the first job's rows; the second job's (not ended, its entry open) stay.
    await eventually(async () => (await rows('task_jobs', firstJob)).length === 0 && (await rows('queued_runs', firstJob)).length === 0, {
      what: 'the first job\'s rows pruned',
      timeoutMs: 240_000,
    });
    expect(await rows('task_jobs', secondJob)).toHaveLength(1);
    expect(await rows('queued_runs', secondJob)).toHaveLength(1);
  }, 600_000);

  it('a job cancelled has ended too: its rows count their retention from the cancel', async () => {
    const { taskId } = await world.task('loop');
    await world.move(taskId, 'work');
    const [job] = await autoStarted(taskId, 1);
    await eventually(async () => (await rows('task_jobs', job!.jobId)).length === 1, { what: 'the job recorded from its JobEnqueued', timeoutMs: 60_000 });
    expect((await rows('task_jobs', job!.jobId))[0].ended_at).toBeNull();
    await world.client.request(cancelJob, { jobId: job!.jobId, reason: 'not needed', idempotencyKey: world.key('cancel') });
    await eventually(async () => (await rows('task_jobs', job!.jobId))[0]?.ended_at != null && (await rows('queued_runs', job!.jobId))[0]?.ended_at != null, {
      what: 'the cancelled job\'s end recorded on both rows',
      timeoutMs: 60_000,
    });
  }, 180_000);

  describe('what a pass deletes, by the database\'s clock', () => {
    const windowMs = Math.ceil(STREAM_MAX_AGE_MS * 1.1);
    const retentionMs = RECEIPT_TTL_MS + 2 * windowMs;
    const noPruner = { register: () => undefined } as unknown as RetentionPruner;
    const retention = new RunRecordsRetention(noPruner);
    let ended: Date;

    const pass = (atMs: number, window = windowMs): RetentionPass => ({
      now: new Date(ended.getTime() + atMs),
      pool: world.db,
      redeliveryWindowMs: (consumer) => (consumer === JOB_EVENTS_CONSUMER ? window : 0),
      receiptTtlMs: RECEIPT_TTL_MS,
    });
    const exists = async (table: string, column: string, value: string) => (await world.db.query(`SELECT 1 FROM ${table} WHERE ${column} = $1`, [value])).rowCount === 1;

    /** A task at a step with one entry (open or ended), a run queued for it and the run's job (ended or not). */
    async function runOf(options: { entryOpen: boolean; jobEnded: boolean; jobKnown?: boolean; endedAt?: Date }) {
      const at = options.endedAt ?? ended;
      const taskId = `T-${randomUUID()}`;
      const jobId = `job-${randomUUID()}`;
      const key = `key-${randomUUID()}`;
      await world.db.query(
        `INSERT INTO tasks (task_id, product_id, workflow_id, step_id, admitted, state) VALUES ($1, 'product-t', 'loop', 'work', true, '{}')`,
        [taskId],
      );
      await world.db.query(
        `INSERT INTO step_entries (task_id, workflow_id, step_id, entry_seq, entry_path, declaration_digest, opened_by_epoch, opened_at, terminal)
         VALUES ($1, 'loop', 'work', 1, 'move', 'digest', $2, now(), $3)`,
        [taskId, randomUUID(), !options.entryOpen],
      );
      const known = options.jobKnown !== false;
      await world.db.query(
        `INSERT INTO queued_runs (idempotency_key, job_id, task_id, workflow_id, step_id, entry_seq, position, action_type, agent_profile_id, queued_at, ended_at)
         VALUES ($1, $2, $3, 'loop', 'work', 1, 0, 'auto_start_agent', 'implementer', $4, $5)`,
        [key, known ? jobId : null, taskId, at, known && options.jobEnded ? at : null],
      );
      if (known) {
        await world.db.query(
          `INSERT INTO task_jobs (job_id, task_id, kind, workflow_id, step_id, entry_seq, ended_at) VALUES ($1, $2, 'TASK_IMPLEMENTATION', 'loop', 'work', 1, $3)`,
          [jobId, taskId, options.jobEnded ? at : null],
        );
      }
      return { taskId, jobId, key };
    }

    beforeAll(async () => {
      ended = (await world.db.query<{ now: Date }>(`SELECT now()`)).rows[0]!.now;
    });

    it('the retention is the receipt window plus twice the stream\'s window; none without an age limit', () => {
      expect(runRecordsRetentionMs(pass(0))).toBe(retentionMs);
      expect(runRecordsRetentionMs(pass(0, 0))).toBe(0);
    });

    it('keeps an ended job\'s rows until the retention has passed, then deletes them', async () => {
      const run = await runOf({ entryOpen: false, jobEnded: true });
      await retention.prune(pass(retentionMs - 1000));
      expect(await exists('task_jobs', 'job_id', run.jobId)).toBe(true);
      expect(await exists('queued_runs', 'idempotency_key', run.key)).toBe(true);
      await retention.prune(pass(retentionMs + 1000));
      expect(await exists('task_jobs', 'job_id', run.jobId)).toBe(false);
      expect(await exists('queued_runs', 'idempotency_key', run.key)).toBe(false);
      // the task's own rows are the views', not the pruning's
      expect(await exists('tasks', 'task_id', run.taskId)).toBe(true);
    });

    it('keeps what may still be needed: a job not ended, a run of an open entry, a job a dead letter names, and everything while the stream keeps events without an age limit', async () => {
      const running = await runOf({ entryOpen: false, jobEnded: false });
      const openEntry = await runOf({ entryOpen: true, jobEnded: true });
      const lettered = await runOf({ entryOpen: false, jobEnded: true });
      const unlimited = await runOf({ entryOpen: false, jobEnded: true });
      await world.db.query(
        `INSERT INTO dead_letters (consumer, subject, event_id, payload, error) VALUES ($1, 'jobs.evt.JobStarted', $2, $3, '{}')`,
        [JOB_EVENTS_CONSUMER, randomUUID(), JSON.stringify({ type: 'JobStarted', data: { jobId: lettered.jobId } })],
      );
      await retention.prune(pass(10 * retentionMs, 0));
      expect(await exists('task_jobs', 'job_id', unlimited.jobId)).toBe(true);

      await retention.prune(pass(10 * retentionMs));
      expect(await exists('task_jobs', 'job_id', running.jobId)).toBe(true);
      expect(await exists('queued_runs', 'idempotency_key', running.key)).toBe(true);
      // The open entry's run is kept (its dispatch may look it up); its job's row is not needed.
      expect(await exists('queued_runs', 'idempotency_key', openEntry.key)).toBe(true);
      expect(await exists('task_jobs', 'job_id', openEntry.jobId)).toBe(false);
      expect(await exists('task_jobs', 'job_id', lettered.jobId)).toBe(true);
      expect(await exists('queued_runs', 'idempotency_key', lettered.key)).toBe(true);
      expect(await exists('task_jobs', 'job_id', unlimited.jobId)).toBe(false);
    });

    it('a run that never learnt its job goes once no enqueue of it, nor its JobEnqueued, can come any more', async () => {
      const run = await runOf({ entryOpen: false, jobEnded: false, jobKnown: false });
      await retention.prune(pass(24 * HOUR + retentionMs - 1000));
      expect(await exists('queued_runs', 'idempotency_key', run.key)).toBe(true);
      await retention.prune(pass(24 * HOUR + retentionMs + 1000));
      expect(await exists('queued_runs', 'idempotency_key', run.key)).toBe(false);
    });

    it('deletes in batches, at most so many a pass: the rest goes at the next', async () => {
      // Ended a day after the other tests' rows (which a first pass clears): only these five are left
      // for the passes, and the running engine's own pruning does not reach them.
      const endedAt = new Date(ended.getTime() + 24 * HOUR);
      await pruneRunRecords(world.db, { endedBefore: endedAt, neverKnownBefore: ended, consumer: JOB_EVENTS_CONSUMER, batchSize: 1000, maxBatches: 100 });
      const runs = await Promise.all([1, 2, 3, 4, 5].map(() => runOf({ entryOpen: false, jobEnded: true, endedAt })));
      const left = async () => (await world.db.query(`SELECT count(*)::int AS n FROM task_jobs WHERE job_id = ANY($1)`, [runs.map((r) => r.jobId)])).rows[0].n as number;
      const prune = { endedBefore: new Date(endedAt.getTime() + 1000), neverKnownBefore: endedAt, consumer: JOB_EVENTS_CONSUMER, batchSize: 2, maxBatches: 2 };
      await pruneRunRecords(world.db, prune);
      expect(await left()).toBe(1);
      await pruneRunRecords(world.db, prune);
      expect(await left()).toBe(0);
    });

    it('two replicas pruning at once delete each row once, and nothing the other keeps', async () => {
      // As above: only these rows are left for the passes.
      const endedAt = new Date(ended.getTime() + 48 * HOUR);
      await pruneRunRecords(world.db, { endedBefore: endedAt, neverKnownBefore: ended, consumer: JOB_EVENTS_CONSUMER, batchSize: 1000, maxBatches: 100 });
      const runs = await Promise.all(Array.from({ length: 20 }, () => runOf({ entryOpen: false, jobEnded: true, endedAt })));
      const kept = await runOf({ entryOpen: true, jobEnded: false, endedAt });
      const ids = runs.map((r) => r.jobId);
      const prune = { endedBefore: new Date(endedAt.getTime() + 1000), neverKnownBefore: endedAt, consumer: JOB_EVENTS_CONSUMER, batchSize: 3, maxBatches: 100 };
      const [a, b] = await Promise.all([pruneRunRecords(world.db, prune), pruneRunRecords(world.db, prune)]);
      expect(a.taskJobs + b.taskJobs).toBe(20);
      expect(a.queuedRuns + b.queuedRuns).toBe(20);
      expect((await world.db.query(`SELECT count(*)::int AS n FROM task_jobs WHERE job_id = ANY($1)`, [ids])).rows[0].n).toBe(0);
      expect(await exists('task_jobs', 'job_id', kept.jobId)).toBe(true);
      expect(await exists('queued_runs', 'idempotency_key', kept.key)).toBe(true);
    });
  });
});
