import { Controller, Inject } from '@nestjs/common';
import { LRUCache } from 'lru-cache';
import { InjectPinoLogger, PinoLogger } from 'nestjs-pino';
import type pg from 'pg';
import {
  ErrorCode,
  GantryError,
  type EventEnvelope,
  type JobCancelledData,
  type JobClaimRolledBackData,
  type JobEnqueuedData,
  type JobFinishedData,
  type JobLeaseExpiredData,
  type JobStartedData,
  type JobView,
} from '@gantry/contracts';
import { EventStore, handleWithDecider, isDatabaseUnreachable } from '@gantry/eventstore';
import { isTransient, RetryLater } from '@gantry/messaging';
import { DurableConsumer, type ConsumerContext } from '@gantry/service-runtime';
import { occupancyOf, stepOf, taskDecider, taskExists, type Task, type TransitionTarget } from '../domain/index.js';
import { RunQueue } from '../infrastructure/job-service/run-queue.js';
import {
  latestWorkflow,
  queuedRunByJob,
  queuedRunByKey,
  recordJobEnded,
  recordQueuedRunJob,
  rememberTaskJob,
  taskJob,
  type QueuedRunRow,
  type TaskJobRow,
} from '../infrastructure/persistence/read-models.js';
import { loadTask, streamIds } from '../infrastructure/persistence/streams.js';
import { EntryFlow } from './entry-flow.js';
import { TestHooks } from './test-hooks.js';
import { TriggerInterrupted, TurnTriggers } from './triggers/turn-triggers.js';
import { TURN_MOVE, UnansweredMoves } from './unanswered-moves.js';

/**
 * What the engine learns from the job service (docs/workflow-engine.md, "Triggers other than
 * on_enter"): which jobs belong to which task and step occupancy (JobEnqueued), a turn started
 * (JobStarted: on_turn_start, and the task's agent session is started), a turn completed
 * (JobFinished DONE or SKIPPED: on_turn_complete, whose transition is the turn-complete entry path).
 * A redelivered event changes nothing: the inbox, and the move's key derived from the event. A job's
 * end (finished, cancelled, failed at a claim's end) is recorded on its rows, whose retention counts
 * from it (RunRecordsRetention).
 */
export const JOB_EVENTS_CONSUMER = 'workflow-engine-job-events';

@Controller()
export class JobEvents {
  /**
   * The task each job names (none, for a job of no task), for jobs this process learnt of without
   * recording them (their JobEnqueued named no task, or a task the engine did not have; or the job
   * service said so): their start and finish are judged without asking the job service whose they
   * are (jobOf). What a job names never changes; whether the engine has that task does — a task may
   * be created after its first job was queued — so that is read again at each event, and every
   * process, whatever it remembers, judges a job alike. Most jobs of a fleet are such jobs; the last
   * 100,000 are remembered.
   */
  private readonly named = new LRUCache<string, { taskId: string | null; kind: string }>({ max: 100_000 });

  constructor(
    @Inject(EventStore) private readonly store: EventStore,
    @Inject(TurnTriggers) private readonly triggers: TurnTriggers,
    @Inject(EntryFlow) private readonly flow: EntryFlow,
    @Inject(TestHooks) private readonly hooks: TestHooks,
    @Inject(RunQueue) private readonly runs: RunQueue,
    @Inject(UnansweredMoves) private readonly unanswered: UnansweredMoves,
    @InjectPinoLogger('job-events') private readonly log: PinoLogger,
  ) {}

  @DurableConsumer({
    name: JOB_EVENTS_CONSUMER,
    source: 'jobs',
    types: ['JobEnqueued', 'JobStarted', 'JobFinished', 'JobCancelled', 'JobClaimRolledBack', 'JobLeaseExpired'],
  })
  async onEvent(envelope: EventEnvelope, { sql }: ConsumerContext): Promise<void> {
    // The engine's database out of reach on a connection of the handler's own (the session start, the
    // turn's move, a guard's read) is an outage the consumer tells by the error: the event is handed back,
    // never counted towards its dead letter (a decision or a turn lost for good); a write that committed
    // before its connection was lost is found by its receipt, keyed by the event.
    await this.handle(envelope, sql);
  }

  private async handle(envelope: EventEnvelope, sql: pg.PoolClient): Promise<void> {
    switch (envelope.type) {
      case 'JobEnqueued':
        return this.onEnqueued(envelope as EventEnvelope<JobEnqueuedData>, sql);
      case 'JobStarted':
        return this.onStarted(envelope as EventEnvelope<JobStartedData>, sql);
      case 'JobFinished':
        return this.onFinished(envelope as EventEnvelope<JobFinishedData>, sql);
      case 'JobCancelled':
        return recordJobEnded(sql, (envelope as EventEnvelope<JobCancelledData>).data.jobId);
      case 'JobClaimRolledBack':
      case 'JobLeaseExpired': {
        const d = (envelope as EventEnvelope<JobClaimRolledBackData | JobLeaseExpiredData>).data;
        if (d.outcome === 'FAILED') await recordJobEnded(sql, d.jobId);
        return;
      }
      default:
        return;
    }
  }

  /** A job of one of our tasks: the run we queued says its entry; any other counts for the task's occupancy now. */
  private async onEnqueued(envelope: EventEnvelope<JobEnqueuedData>, sql: pg.PoolClient): Promise<void> {
    const d = envelope.data;
    if (d.taskId === null) {
      this.named.set(d.jobId, { taskId: null, kind: d.kind });
      return;
    }
    if (this.hooks.fails(`job-enqueued:${d.taskId}`)) throw new Error('the job could not be recorded (forced by a test)');
    const queued = await queuedRunByKey(sql, d.idempotencyKey);
    if (queued) await recordQueuedRunJob(sql, d.idempotencyKey, d.jobId);
    if (!(await this.remember(sql, d.jobId, d.taskId, d.kind, queued))) this.named.set(d.jobId, { taskId: d.taskId, kind: d.kind });
  }

  private async remember(sql: pg.PoolClient, jobId: string, taskId: string, kind: string, queued: QueuedRunRow | null): Promise<TaskJobRow | null> {
    if (queued) {
      const job = { jobId, taskId: queued.taskId, kind, workflowId: queued.workflowId, stepId: queued.stepId, entrySeq: queued.entrySeq };
      await rememberTaskJob(sql, job);
      return job;
    }
    const task = await loadTask(this.store, taskId, sql);
    if (!taskExists(task)) return null;
    // A task that occupies no step (parked) has no occupancy for the job to belong to: -1 never matches one.
    const at = occupancyOf(task) ?? { workflowId: task.placement.workflowId, stepId: task.placement.stepId, entrySeq: -1 };
    const job = { jobId, taskId: task.taskId, kind, ...at };
    await rememberTaskJob(sql, job);
    return job;
  }

  /**
   * The job an event names, as the engine recorded it. A job the engine has no record of may still be
   * one of its tasks': its JobEnqueued was not handled yet (a failed handler being retried, another
   * replica holding it, a redelivery after a crash) or was given up on, or it named a task the engine
   * did not have then. The event does not say whose the job is, the job service does (once per job in
   * a process: `named`): a job of a task the engine has now is recorded as its JobEnqueued would
   * record it; null for a job that is not of the engine's tasks.
   */
  private async jobOf(jobId: string, sql: pg.PoolClient): Promise<TaskJobRow | null> {
    const known = await taskJob(sql, jobId);
    if (known) return known;
    let named = this.named.get(jobId);
    if (!named) {
      let view: JobView;
      try {
        view = await this.runs.job(jobId, { patient: false });
      } catch (error) {
        if (isTransient(error)) throw new RetryLater(`the job service did not say whose job ${jobId} is`, 2000);
        if (error instanceof GantryError && error.code === ErrorCode.NOT_FOUND) return null;
        throw error;
      }
      named = { taskId: view.taskId, kind: view.kind };
      this.named.set(jobId, named);
    }
    if (named.taskId === null) return null;
    const recorded = await this.remember(sql, jobId, named.taskId, named.kind, await queuedRunByJob(sql, jobId));
    if (recorded) this.log.info({ taskId: recorded.taskId, jobId, stepId: recorded.stepId, entrySeq: recorded.entrySeq }, 'job of a task recorded from a later event of the job');
    return recorded;
  }

  private async onStarted(envelope: EventEnvelope<JobStartedData>, sql: pg.PoolClient): Promise<void> {
    const job = await this.jobOf(envelope.data.jobId, sql);
    if (!job) return;
    if (job.kind !== 'REVIEW') {
      // In a transaction of its own, committed before the turn's triggers run (its receipt, keyed by
      // the event, makes a redelivery a no-op): appended in the consumer's transaction, it would hold
      // the task stream's next version until that commits, and every append the triggers and the
      // turn's move make to that stream, each in its own transaction, would wait on it for ever.
      try {
        await this.hooks.loseConnectionOnce('session-start-database-lost-once', job.taskId, this.store.pool);
        await handleWithDecider(this.store, {
          decider: taskDecider,
          streamId: streamIds.task(job.taskId),
          command: { type: 'MarkSessionStarted', data: { taskId: job.taskId, jobId: job.jobId, now: this.store.clock().toISOString() } },
          metadata: { correlationId: envelope.correlationId, causationId: envelope.eventId, actor: 'workflow-engine' },
          idempotency: { scope: 'workflow.session_started', key: envelope.eventId, request: { jobId: job.jobId } },
          reply: () => undefined,
        });
      } catch (error) {
        // A task stream kept busy past the write's patience wrote nothing: the event is handed back and
        // the start recorded then (else the next job would start the session again instead of resuming it).
        if (error instanceof GantryError && error.code === ErrorCode.VERSION_CONFLICT) {
          throw new RetryLater(`the session start of task ${job.taskId} met a busy task stream: ${error.message}`);
        }
        // Nor is it lost to the database out of reach: handed back as well (onEvent).
        if (isDatabaseUnreachable(error)) throw error;
        this.log.warn({ taskId: job.taskId, jobId: job.jobId, error: String(error) }, 'could not record the session start');
      }
    }
    await this.turn('onTurnStart', job, envelope, sql);
  }

  /** A completed turn is a job that finished DONE or SKIPPED; a failed or cancelled one is not. */
  private async onFinished(envelope: EventEnvelope<JobFinishedData>, sql: pg.PoolClient): Promise<void> {
    if (envelope.data.jobStatus === 'DONE' || envelope.data.jobStatus === 'SKIPPED') {
      const job = await this.jobOf(envelope.data.jobId, sql);
      if (job) await this.turn('onTurnComplete', job, envelope, sql);
    }
    await recordJobEnded(sql, envelope.data.jobId);
  }

  private async turn(trigger: 'onTurnStart' | 'onTurnComplete', job: TaskJobRow, envelope: EventEnvelope, sql: pg.PoolClient): Promise<void> {
    if (this.hooks.sentElsewhere(job.taskId, envelope.eventId)) {
      this.log.info({ taskId: job.taskId, jobId: job.jobId, trigger }, 'the job\'s event is handed back for another replica (forced by a test)');
      throw new RetryLater(`the job's event of task ${job.taskId} is for another replica (forced by a test)`, 200);
    }
    // A move of this process's that lost its answer: delivered again here, the event finds the task gone
    // from the job's occupancy; the move stored under the event's key is found and the work after it
    // done now (live: no dispatch walked its entry, session actions included) — unless the process
    // found it first by itself, as it does when the event goes to another replica (UnansweredMoves).
    if (this.unanswered.has(envelope.eventId) && (await this.unanswered.finish(envelope.eventId, sql))) return;
    const task = await loadTask(this.store, job.taskId, sql);
    if (!taskExists(task)) return;
    const now = occupancyOf(task as Task);
    // The turn of an occupancy the task has left (a late review of an earlier round) moves nothing.
    if (!now || now.workflowId !== job.workflowId || now.stepId !== job.stepId || now.entrySeq !== job.entrySeq) {
      this.log.info({ taskId: job.taskId, jobId: job.jobId, jobStepId: job.stepId, jobEntrySeq: job.entrySeq, trigger }, 'turn of an earlier step occupancy; nothing to do');
      return;
    }
    const workflow = await latestWorkflow(sql, job.workflowId);
    const step = workflow ? stepOf(workflow.definition, job.stepId) : null;
    if (!workflow || !step) return;
    let target: TransitionTarget | null;
    try {
      target = await this.triggers.run(trigger, { task: task as Task, workflow, step, entrySeq: job.entrySeq, cause: envelope.eventId, correlationId: envelope.correlationId });
    } catch (error) {
      // An action that could not be done now (nothing written) has not failed: the event is handed
      // back and the turn decided again; what ran before it is keyed by the event and is not done twice.
      if (error instanceof TriggerInterrupted) throw new RetryLater(`the ${trigger} trigger of task ${job.taskId} was interrupted: ${error.message}`, 2000);
      throw error;
    }
    if (!target) return;
    try {
      await this.hooks.loseConnectionOnce('turn-move-database-lost-once', job.taskId, this.store.pool);
      await this.flow.place(
        { taskId: job.taskId, workflowId: target.workflowId, stepId: target.stepId, entryPath: target.entryPath, from: { workflowId: job.workflowId, stepId: job.stepId, entrySeq: job.entrySeq } },
        {
          metadata: { correlationId: envelope.correlationId, causationId: envelope.eventId, actor: 'workflow-engine' },
          idempotency: { scope: TURN_MOVE, key: envelope.eventId, request: { target, jobId: job.jobId } },
        },
      );
    } catch (error) {
      // A refused move (a target step the workflow lost, a deleted task) is an answer, not a reason to
      // redeliver. A task stream that stayed busy past the move's patience wrote nothing and answers
      // nothing: the event is handed back and the turn decided again (its actions are keyed by it).
      if (error instanceof GantryError && error.code === ErrorCode.VERSION_CONFLICT) {
        throw new RetryLater(`the turn's move of task ${job.taskId} met a busy task stream: ${error.message}`);
      }
      if (isDatabaseUnreachable(error)) {
        this.unanswered.lost(envelope.eventId, { taskId: job.taskId, jobId: job.jobId, trigger, correlationId: envelope.correlationId });
        if (this.hooks.sentElsewhere(job.taskId, envelope.eventId, true)) {
          this.log.info({ taskId: job.taskId, jobId: job.jobId, trigger }, 'the turn\'s move had its answer lost; its job\'s event goes to another replica (forced by a test)');
        }
      }
      if (!(error instanceof GantryError)) throw error;
      this.log.warn({ taskId: job.taskId, jobId: job.jobId, target, code: error.code, error: error.message }, 'the turn\'s transition was refused');
    }
  }
}
