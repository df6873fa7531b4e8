import { Controller, Inject } from '@nestjs/common';
import { InjectPinoLogger, PinoLogger } from 'nestjs-pino';
import type pg from 'pg';
import {
  ErrorCode,
  GantryError,
  PullRequestChecksFailed,
  PullRequestMergeConflict,
  type EventEnvelope,
  type PullRequestChecksFailedData,
  type PullRequestMergeConflictData,
} from '@gantry/contracts';
import { EventStore, fold } from '@gantry/eventstore';
import { Bus, RetryLater } from '@gantry/messaging';
import { DurableConsumer, type ConsumerContext } from '@gantry/service-runtime';
import {
  checksFailedCommand,
  currentHead,
  jobDecider,
  mergeConflictCommand,
  passedOverHead,
  sprintRunCommandFor,
  sprintRunDecider,
  sprintRunExists,
  type JobCommand,
  type JobEvent,
  type SprintRunCommand,
  type SprintRunEvent,
} from '../domain/index.js';
import { causedByItsSprintRun, doneJobOfHead, eventsOfJobsOutsideSprintRuns, inSprintRun, loadJob, openSprintRunOf, supersededInItsSprintRun } from '../infrastructure/job-store.js';
import { OWN_EVENTS_DURABLE } from './durables.js';

/** The job events that can mean something to a sprint run (see sprintRunCommandFor). */
const SPRINT_RELEVANT_JOB_EVENTS = new Set<string>(['JobClaimed', 'JobPushReported', 'JobFinished', 'JobClaimRolledBack', 'JobLeaseExpired', 'JobCancelled'] satisfies JobEvent['type'][]);

/**
 * The sprint run learns from events: its jobs' (first claim, heads pushed, task done / failed) from
 * the service's own stream, and the PR side's merge conflict / failed checks from the `prs` stream.
 * Each fact is decided and appended in the consumer's transaction, together with its inbox row, so a
 * redelivered event changes nothing; a PR fact about a head the run has moved on from changes nothing
 * either, whenever it is handled (docs/jobs.md, "Sprint runs", SR-1).
 */
@Controller()
export class SprintRunReactions {

  constructor(
    @Inject(EventStore) private readonly store: EventStore,
    @Inject(Bus) private readonly bus: Bus,
    @InjectPinoLogger('sprint-runs') private readonly log: PinoLogger,
  ) {}

  private now(): string {
    return this.store.clock().toISOString();
  }

  /**
   * Most jobs belong to no sprint run: one column of the jobs view says so (a job never changes
   * run), for a whole batch of events in one query before its transaction, and here again for the
   * events that batch check left (a job not in the view then, or a check that failed), without
   * reading and folding the job's whole stream.
   */
  @DurableConsumer({
    name: 'job-service-sprint-runs-from-jobs',
    source: 'jobs',
    durable: OWN_EVENTS_DURABLE,
    types: [...SPRINT_RELEVANT_JOB_EVENTS],
    unaffected: eventsOfJobsOutsideSprintRuns,
  })
  async onJobEvent(envelope: EventEnvelope, { sql }: ConsumerContext): Promise<void> {
    if (!SPRINT_RELEVANT_JOB_EVENTS.has(envelope.type)) return;
    if (!(await inSprintRun(sql, envelope.streamId))) return;
    const job = await loadJob(this.store, envelope.streamId, sql, envelope.streamVersion);
    if (!job || job.sprintRunId === null) return;
    // The run's own failure or cancel cancelled it (CANCEL_SPRINT_JOBS): that says nothing new to the run,
    // and handled after a resume it would fail the resumed run.
    if (envelope.type === 'JobCancelled' && (await causedByItsSprintRun(sql, envelope.causationId, job.sprintRunId))) return;
    const command = sprintRunCommandFor({ type: envelope.type, data: envelope.data } as JobEvent, job, { now: this.now(), position: envelope.position });
    if (command?.type === 'RecordSprintTaskFailed') command.data.superseded = await supersededInItsSprintRun(sql, job.jobId);
    if (command) await this.decide(command, envelope, sql);
  }

  @DurableConsumer({ name: 'job-service-sprint-runs-merge-conflicts', source: 'prs', type: PullRequestMergeConflict.type })
  async onMergeConflict(envelope: EventEnvelope<PullRequestMergeConflictData>, { sql }: ConsumerContext): Promise<void> {
    const { repository, branch } = envelope.data;
    const sprintRunId = await openSprintRunOf(sql, repository, branch);
    if (!sprintRunId) return this.log.info({ repository, branch, eventId: envelope.eventId }, 'merge conflict on a branch no open sprint run uses');
    // One question per conflict report: its id is derived from the event, so a redelivery asks nothing new.
    const questionId = `question-${envelope.eventId}`;
    await this.decide(mergeConflictCommand(envelope.data, { sprintRunId, questionId, now: this.now() }), envelope, sql);
  }

  /** Red checks fail the sprint run of the branch; on a branch without one, the job that pushed that head (docs/pr-service.md, PR-9). */
  @DurableConsumer({ name: 'job-service-sprint-runs-checks-failed', source: 'prs', type: PullRequestChecksFailed.type })
  async onChecksFailed(envelope: EventEnvelope<PullRequestChecksFailedData>, { sql }: ConsumerContext): Promise<void> {
    const { repository, branch, headSha } = envelope.data;
    const sprintRunId = await openSprintRunOf(sql, repository, branch);
    if (sprintRunId) return this.decide(checksFailedCommand(envelope.data, { sprintRunId, now: this.now() }), envelope, sql);
    const pushedBy = await doneJobOfHead(sql, repository, branch, headSha);
    if (!pushedBy) return this.log.info({ repository, branch, headSha, eventId: envelope.eventId }, 'failed checks on a head no sprint run or job of ours pushed');
    // A job of a sprint run answers to its run, and the run has ended (DONE or CANCELLED: no open run holds the
    // branch). A run over changes for no fact (docs/jobs.md, "Sprint runs"), nor does its job: the red checks stay
    // on the pull request, for the person who reviews it.
    if (pushedBy.sprintRunId !== null) {
      this.log.info({ repository, branch, headSha, sprintRunId: pushedBy.sprintRunId, jobId: pushedBy.jobId, eventId: envelope.eventId }, 'failed checks on a head of a sprint run that has ended passed over');
      return;
    }
    const { jobId } = pushedBy;
    const command: JobCommand = {
      type: 'RecordChecksFailed',
      data: { jobId, headSha, prUrl: envelope.data.prUrl, failedChecks: envelope.data.failedChecks.map((c) => c.name), failedChecksLeftOut: envelope.data.failedChecksLeftOut ?? 0, now: this.now() },
    };
    const history = await this.store.readStream(jobId, sql);
    const events = jobDecider.decide(command, fold<ReturnType<typeof jobDecider.evolve>, JobEvent>(jobDecider, history));
    if (events.length === 0) return;
    try {
      await this.store.appendWithin(sql, jobId, history.length, events, { correlationId: envelope.correlationId, causationId: envelope.eventId, actor: 'job-service', idempotencyKey: null });
    } catch (error) {
      if (error instanceof GantryError && error.code === ErrorCode.VERSION_CONFLICT) throw new RetryLater('job appended concurrently', 50);
      throw error;
    }
  }

  /** Decide on the sprint run's stream and append at the loaded version, inside the consumer's transaction. */
  private async decide(command: SprintRunCommand, cause: EventEnvelope, sql: pg.PoolClient): Promise<void> {
    const streamId = command.data.sprintRunId;
    const history = await this.store.readStream(streamId, sql);
    const state = fold<ReturnType<typeof sprintRunDecider.evolve>, SprintRunEvent>(sprintRunDecider, history);
    if ((command.type === 'RecordMergeConflict' || command.type === 'RecordChecksFailed') && sprintRunExists(state)) {
      // The decider passes it over too; said here, where it can be logged.
      const why = passedOverHead(state, command.data.headSha);
      if (why !== null) {
        const current = currentHead(state)?.headSha ?? null;
        this.log.info({ sprintRunId: streamId, command: command.type, headSha: command.data.headSha, currentHead: current, why, causationId: cause.eventId }, 'pull-request fact about a head the sprint run has moved on from passed over');
        return;
      }
    }
    let events: SprintRunEvent[];
    try {
      events = sprintRunDecider.decide(command, state);
    } catch (error) {
      if (!(error instanceof GantryError)) throw error;
      // A fact the run refuses (e.g. a conflict before it started) is recorded in the log, not retried forever.
      this.log.warn({ sprintRunId: streamId, command: command.type, code: error.code, error: error.message, causationId: cause.eventId }, 'sprint run refused a fact');
      return;
    }
    if (events.length === 0) return;
    try {
      await this.store.appendWithin(sql, streamId, history.length, events, {
        correlationId: cause.correlationId,
        causationId: cause.eventId,
        actor: 'job-service',
        idempotencyKey: null,
      });
    } catch (error) {
      if (error instanceof GantryError && error.code === ErrorCode.VERSION_CONFLICT) throw new RetryLater('sprint run appended concurrently', 50);
      throw error;
    }
  }
}
