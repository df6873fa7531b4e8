import { randomUUID } from 'node:crypto';
import { Controller, Inject } from '@nestjs/common';
import { InjectPinoLogger, PinoLogger } from 'nestjs-pino';
import type pg from 'pg';
import { ErrorCode, GantryError, recordDecision, recordReviewDecision, type JobView, type ReplyOf, type RequestOf } from '@gantry/contracts';
import { decideWithin, EventStore, type CommandMetadata, type IdempotencyOptions, type UnitOfWork } from '@gantry/eventstore';
import type { CommandContext } from '@gantry/messaging';
import { CommandHandler } from '@gantry/service-runtime';
import { decisionsOfEntry, quorumSeatsOf, stepOf, taskAtStepDecider, taskExists, transitionOnDecision, type Task } from '../domain/index.js';
import { RunQueue } from '../infrastructure/job-service/run-queue.js';
import { queuedRunByJob, queuedRunByKey, quorumLockStatement, recordQueuedRunJob, workflowAndSeats, type QueuedRunRow } from '../infrastructure/persistence/read-models.js';
import { decisionRecordedBy, loadTask, streamIds } from '../infrastructure/persistence/streams.js';
import { idempotencyFor, metadataOf } from './command-context.js';
import { EntryFlow } from './entry-flow.js';
import { Placements, type PlacementOutcome } from './placements.js';
import { TestHooks } from './test-hooks.js';

interface Deciding {
  taskId: string;
  stepId: string;
  /**
   * The entry the decision must belong to (a REVIEW job's: its workflow and entry number, the entry's
   * identity with the task and step); any current one when null (a person's).
   */
  entry: { workflowId: string; entrySeq: number } | null;
  participantId: string | null;
  verdict: 'approve' | 'reject';
  comment: string | null;
  decidedBy: { kind: 'person'; actor: string } | { kind: 'review_job'; jobId: string };
}

/** The read (ExecuteOptions.reads) that takes the task's quorum lock: sent with BEGIN, or at once where the transaction began otherwise. */
const QUORUM_LOCK = 0;

type Decided = { reply: Omit<ReplyOf<typeof recordDecision>, 'moved'>; moved: PlacementOutcome | null };

/**
 * Decisions per (task, step) (docs/workflow-engine.md, "Decisions and quorum"). The decision, the
 * re-evaluation of the step's guarded transitions and the move they call for are one transaction:
 * the move appends at the task's stream version, so two decisions recorded at once move it once.
 */
@Controller()
export class DecisionCommands {
  constructor(
    @Inject(EventStore) private readonly store: EventStore,
    @Inject(Placements) private readonly placements: Placements,
    @Inject(EntryFlow) private readonly flow: EntryFlow,
    @Inject(RunQueue) private readonly runs: RunQueue,
    @Inject(TestHooks) private readonly hooks: TestHooks,
    @InjectPinoLogger('decisions') private readonly log: PinoLogger,
  ) {}

  @CommandHandler(recordDecision)
  recordDecision(request: RequestOf<typeof recordDecision>, context?: CommandContext): Promise<ReplyOf<typeof recordDecision>> {
    const idempotency = idempotencyFor('record_decision', request);
    const withoutActor = idempotency.request as object;
    return this.decide(
      {
        taskId: request.taskId,
        stepId: request.stepId,
        entry: null,
        participantId: request.participantId ?? null,
        verdict: request.verdict,
        comment: request.comment ?? null,
        decidedBy: { kind: 'person', actor: request.actor },
      },
      // The person deciding is part of the decision, not only who called: the key sent again for
      // another person is IDEMPOTENCY_CONFLICT (the call's actor is left out of every other command's request).
      // A decision answered before the person counted has its receipt under the request without them:
      // it answers a repeat by the person who recorded it, and no one else (docs/workflow-engine.md,
      // "Idempotency of the commands").
      {
        metadata: metadataOf(request, context),
        idempotency: {
          ...idempotency,
          request: { ...withoutActor, actor: request.actor },
          former: [{ request: withoutActor, accepts: (answer, sql) => this.recordedBy(answer, sql, request) }],
        },
      },
    );
  }

  /** Whether a stored answer of record_decision is a decision the request's person recorded (a refusal names no one: not theirs). */
  private async recordedBy(answer: { ok: boolean; result?: unknown }, sql: pg.Pool | pg.PoolClient, request: RequestOf<typeof recordDecision>): Promise<boolean> {
    if (!answer.ok) return false;
    const decided = answer.result as Decided;
    const by = await decisionRecordedBy(sql, request.taskId, request.stepId, decided.reply.decisionId);
    return by?.kind === 'person' && by.actor === request.actor;
  }

  /**
   * AC-R1: only a job that still holds exactly this claim decides, for the seat and entry it was
   * queued for. A repeat of a decision already answered under its key (its answer lost, the job
   * finished since) gets that answer, as every repeat does: the claim is asked for only when there
   * is no answer to give back.
   */
  @CommandHandler(recordReviewDecision)
  async recordReviewDecision(request: RequestOf<typeof recordReviewDecision>, context?: CommandContext): Promise<ReplyOf<typeof recordReviewDecision>> {
    const idempotency = idempotencyFor('record_review_decision', request);
    const repeat = await this.store.answered(idempotency);
    const run = repeat ? null : await this.fencedRun(request);
    return this.decide(
      run && {
        taskId: run.taskId,
        stepId: run.stepId,
        entry: { workflowId: run.workflowId, entrySeq: run.entrySeq },
        participantId: run.participantId,
        verdict: request.verdict,
        comment: request.comment ?? null,
        decidedBy: { kind: 'review_job', jobId: request.jobId },
      },
      { metadata: metadataOf(request, context), idempotency },
    );
  }

  /** The run the job was queued as, while the job holds exactly the claim the request names. */
  private async fencedRun(request: RequestOf<typeof recordReviewDecision>) {
    const job = await this.runs.job(request.jobId);
    const holds = (job.status === 'CLAIMED' || job.status === 'RUNNING') && job.lease?.runnerId === request.runnerId && job.lease.leaseToken === request.leaseToken;
    if (!holds) {
      throw new GantryError(ErrorCode.STALE_FENCE, `job ${request.jobId} no longer holds the claim of runner ${request.runnerId} with token ${request.leaseToken}`, { jobId: request.jobId, status: job.status });
    }
    const run = (await queuedRunByJob(this.store.pool, request.jobId)) ?? (await this.runEnqueuedAs(job));
    if (!run) throw new GantryError(ErrorCode.NOT_FOUND, `job ${request.jobId} is not a run the workflow engine queued`, { jobId: request.jobId });
    return run;
  }

  /**
   * The run whose enqueue made the job, found by that enqueue's key, when the engine has not recorded
   * the job yet: the enqueue's answer is slow, lost and sent again, its JobEnqueued not handled yet. The
   * job is recorded for the run as that answer would record it.
   */
  private async runEnqueuedAs(job: JobView): Promise<QueuedRunRow | null> {
    for (const key of job.enqueueKeys) {
      const run = await queuedRunByKey(this.store.pool, key);
      if (!run || (run.jobId !== null && run.jobId !== job.jobId)) continue;
      await recordQueuedRunJob(this.store.pool, key, job.jobId);
      return { ...run, jobId: job.jobId };
    }
    return null;
  }

  /** `deciding` null: a repeat, answered from its receipt (the claim it was decided under is not asked for again). */
  private async decide(deciding: Deciding | null, options: { metadata: CommandMetadata; idempotency: IdempotencyOptions }): Promise<ReplyOf<typeof recordDecision>> {
    // The quorum lock goes with BEGIN and the receipt's claim (it is taken before anything of the task is read).
    const reads = deciding ? [quorumLockStatement(this.store.schema, deciding.taskId)] : [];
    const executed = await this.store.execute<Decided>({ ...options, reads }, (uow) => {
      // The receipt went (its window passed) after it was found: not a refusal to store, a plain
      // error; the request sent again has no answer to repeat and is checked under its claim.
      if (!deciding) throw new Error(`the answer under key ${options.idempotency.key} is gone; send the request again`);
      return this.decideWithin(uow, deciding);
    });
    if (executed.result.moved) await this.flow.afterCommit(executed.result.moved, { replayed: executed.replayed, correlationId: options.metadata.correlationId });
    return { ...executed.result.reply, moved: executed.result.moved?.reply ?? null };
  }

  private async decideWithin(uow: UnitOfWork, deciding: Deciding): Promise<Decided> {
    await uow.read(QUORUM_LOCK);
    const task = await loadTask(this.store, deciding.taskId, uow.sql);
    if (!taskExists(task)) throw new GantryError(ErrorCode.NOT_FOUND, `task ${deciding.taskId} does not exist`);
    const at = task.placement;
    if (!at.admitted || at.stepId !== deciding.stepId) {
      throw new GantryError(ErrorCode.PRECONDITION_FAILED, `task ${deciding.taskId} is not at step ${deciding.stepId}; decisions are taken while it is`, { taskId: deciding.taskId, stepId: deciding.stepId });
    }
    const entrySeq = (task as Task).currentEntry?.entrySeq ?? 0;
    if (deciding.entry !== null && (deciding.entry.workflowId !== at.workflowId || deciding.entry.entrySeq !== entrySeq)) {
      throw new GantryError(ErrorCode.PRECONDITION_FAILED, `the review round of this job is over: task ${deciding.taskId} is at step ${deciding.stepId} in another entry (workflow ${at.workflowId}, entry ${entrySeq})`, { workflowId: at.workflowId, entrySeq });
    }
    const { workflow, seats } = await workflowAndSeats(uow.sql, at.workflowId, deciding.stepId, deciding.taskId);
    const step = workflow ? stepOf(workflow.definition, deciding.stepId) : null;
    if (!workflow || !step) throw new GantryError(ErrorCode.NOT_FOUND, `workflow ${at.workflowId} has no step ${deciding.stepId}`);
    if (deciding.participantId !== null && !seats.some((s) => s.participantId === deciding.participantId)) {
      throw new GantryError(ErrorCode.NOT_FOUND, `step ${step.id} has no seat ${deciding.participantId} for task ${deciding.taskId}`);
    }
    const decisionId = `decision-${randomUUID()}`;
    const decision = await decideWithin(uow, taskAtStepDecider, streamIds.taskAtStep(deciding.taskId, at.workflowId, step.id), {
      type: 'RecordDecision',
      data: {
        taskId: deciding.taskId,
        workflowId: at.workflowId,
        stepId: step.id,
        entrySeq,
        decisionId,
        participantId: deciding.participantId,
        verdict: deciding.verdict,
        comment: deciding.comment,
        decidedBy: deciding.decidedBy,
        now: this.store.clock().toISOString(),
      },
    });
    const target = transitionOnDecision(step.onTurnComplete, workflow.definition, step.id, quorumSeatsOf(seats), decisionsOfEntry(decision.after, entrySeq));
    await this.hooks.reached('quorum', `${deciding.taskId}@${step.id}#${entrySeq}`);
    if (!target) return { reply: { decisionId, entrySeq, transitionRefused: null }, moved: null };
    // The move is from the occupancy the decision was taken in: a task moved on meanwhile (a move
    // that committed after the task was read above) is not pulled back by it; the decision is then
    // refused, as one arriving after that move would be.
    const { moved, refused } = await this.placements.placeUnlessMissing(uow, {
      taskId: deciding.taskId,
      workflowId: target.workflowId,
      stepId: target.stepId,
      entryPath: target.entryPath,
      from: { workflowId: at.workflowId, stepId: step.id, entrySeq },
    });
    if (refused) this.log.warn({ taskId: deciding.taskId, stepId: step.id, decisionId, target, code: refused.code, error: refused.message }, 'the decision\'s transition was refused');
    return { reply: { decisionId, entrySeq, transitionRefused: refused }, moved };
  }
}
