import { Controller, Inject } from '@nestjs/common';
import {
  cancelJob,
  claimableFrom,
  claimJob,
  enqueueJob,
  ErrorCode,
  finishJob,
  GantryError,
  logCommit,
  logImplementation,
  logTestResult,
  renewJobLease,
  reportPush,
  rollbackClaim,
  startJob,
  type ClaimedJob,
  type ReplyOf,
  type RequestOf,
} from '@gantry/contracts';
import { decideWithin, EventStore, handleWithDecider, type Decision, type ExecuteResult, type StreamWork } from '@gantry/eventstore';
import type { CommandContext } from '@gantry/messaging';
import { CommandHandler } from '@gantry/service-runtime';
import {
  cancelJobCommand,
  claimJobCommand,
  finishJobCommand,
  isLeaseExpired,
  jobDecider,
  jobExists,
  logCommitCommand,
  logImplementationCommand,
  logTestResultCommand,
  renewJobLeaseCommand,
  reportPushCommand,
  rollbackClaimCommand,
  startJobCommand,
  type Job,
  type JobCommand,
  type JobEvent,
  type JobState,
} from '../domain/index.js';
import { ClaimPicker } from './claim-picker.js';
import { LeaseExpirySweep } from './lease-expiry.js';
import { idempotencyFor, metadataOf } from './command-context.js';
import { enqueueJobRequest } from './run-queue.js';
import { crashAfterCommitIfAsked, stopBeforeCommitIfAsked } from './test-crash-hook.js';
import { loadJob } from '../infrastructure/job-store.js';

type JobDecision = Decision<JobState, JobEvent>;

function jobAfter(decision: JobDecision): Job {
  if (!jobExists(decision.after)) throw new Error('a decided job command left no job');
  return decision.after;
}

function eventOf<T extends JobEvent['type']>(decision: JobDecision, type: T): Extract<JobEvent, { type: T }>['data'] {
  const event = decision.decided.find((e) => e.type === type);
  if (!event) throw new Error(`expected a ${type} event`);
  return event.data as never;
}

export function claimedJob(job: Job): ClaimedJob {
  if (!job.lease || !job.agentConfig) throw new Error(`job ${job.jobId} holds no lease`);
  return {
    jobId: job.jobId,
    kind: job.kind,
    productId: job.productId,
    storyId: job.storyId,
    sprintId: job.sprintId,
    sprintRunId: job.sprintRunId,
    taskId: job.taskId,
    prompts: job.prompts,
    payloads: job.payloads,
    leaseToken: job.lease.token,
    leaseExpiresAt: job.lease.expiresAt,
    attempt: job.attempt,
    agentConfig: job.agentConfig,
    effort: job.effort,
    baseRef: job.baseRef,
    baseSha: job.baseSha,
    repository: job.repository ?? null,
    repositoryUrl: job.repositoryUrl ?? null,
    branch: job.workBranch ?? null,
    targetBranch: job.targetBranch ?? null,
    verifiedPush: job.verifiedPush
      ? {
          leaseToken: job.verifiedPush.leaseToken,
          attempt: job.verifiedPush.attempt,
          branch: job.verifiedPush.branch,
          baseSha: job.verifiedPush.baseSha,
          headSha: job.verifiedPush.headSha,
          pushedAt: job.verifiedPush.pushedAt,
          facts: job.verifiedPush.facts,
        }
      : null,
    unfinishedRun: job.unfinishedRun
      ? {
          leaseToken: job.unfinishedRun.leaseToken,
          branch: job.unfinishedRun.branch,
          baseSha: job.unfinishedRun.baseSha,
          commits: job.unfinishedRun.storyLog.commits,
          lastTestResult: job.unfinishedRun.storyLog.testResults.at(-1) ?? null,
        }
      : null,
  };
}

/**
 * A claim refused because the job is still in its pause after a hand-back: an answer that holds only
 * until a moment, so it is not kept under the claim's key (the store keeps a GantryError, not this). A
 * runner's claim is keyed by the offer it took, and the same offer comes again (published again by the
 * offer sweep) once the pause is over; kept, the refusal would answer that claim too, for as long as
 * the receipt lives.
 */
class ClaimableLater extends Error {
  constructor(readonly refusal: GantryError) {
    super(refusal.message);
  }
}

function notKeptWhilePaused(error: unknown): never {
  throw error instanceof GantryError && claimableFrom(error) !== null ? new ClaimableLater(error) : error;
}

/** The job commands (docs/domain.md, "Job"), each one transaction: decide on the stream, append at its version. */
@Controller()
export class JobCommandHandlers {
  constructor(
    @Inject(EventStore) private readonly store: EventStore,
    @Inject(ClaimPicker) private readonly picker: ClaimPicker,
    @Inject(LeaseExpirySweep) private readonly leases: LeaseExpirySweep,
  ) {}

  private now(): string {
    return this.store.clock().toISOString();
  }

  @CommandHandler(enqueueJob)
  enqueue(request: RequestOf<typeof enqueueJob>, context?: CommandContext): Promise<ReplyOf<typeof enqueueJob>> {
    return enqueueJobRequest(this.store, request, metadataOf(request, context));
  }

  /**
   * The offered job, or the oldest queued job of the runner's kinds that no other claim of this
   * process is taking (ClaimPicker: claims that arrive together get different jobs). The append at
   * the loaded version is the compare-and-set: of 50 concurrent claims of one job one appends, the
   * others reload and are ALREADY_CLAIMED; a picked job that another replica claimed first is
   * passed over for the next.
   */
  @CommandHandler(claimJob)
  async claim(request: RequestOf<typeof claimJob>, context?: CommandContext): Promise<ReplyOf<typeof claimJob>> {
    const picked: string[] = [];
    /** Picked jobs the decision found no longer queued. */
    const stale = new Set<string>();
    let claimed: string | null = null;
    let executed: ExecuteResult<ReplyOf<typeof claimJob>>;
    const options = { metadata: metadataOf(request, context), idempotency: idempotencyFor('claim_job', request), streams: request.jobId ? [request.jobId] : [] };
    const decide = async (uow: StreamWork): Promise<ReplyOf<typeof claimJob>> => {
      const now = this.now();
      const claimOne = async (jobId: string) => {
        const decision = await decideWithin(uow, jobDecider, jobId, claimJobCommand(request, { jobId, now }));
        stopBeforeCommitIfAsked('claim_job');
        return { claimed: true as const, job: claimedJob(jobAfter(decision)) };
      };
      if (request.jobId) return claimOne(request.jobId).catch(notKeptWhilePaused);
      // Decided again on fresh reads (a refusal rested on what this process remembered of a
      // stream), the claim picks afresh: the jobs an earlier run picked are no longer its own.
      for (const jobId of picked) this.picker.release(jobId);
      const passed: string[] = [];
      for (;;) {
        const jobId = await this.picker.pick(request.kinds, passed);
        if (!jobId) return { claimed: false as const };
        picked.push(jobId);
        try {
          return await claimOne(jobId);
        } catch (error) {
          // The view row was stale (claimed or cancelled in the meantime): try the next one. The
          // refusal came from the decision, before anything was written: nothing to undo.
          if (!(error instanceof GantryError) || error.code === ErrorCode.VERSION_CONFLICT) throw error;
          passed.push(jobId);
          stale.add(jobId);
        }
      }
    };
    try {
      try {
        executed = await this.store.executeInOneMessage<ReplyOf<typeof claimJob>>(options, decide);
      } catch (error) {
        if (!(error instanceof ClaimableLater)) throw error;
        // Written in one message, the claim is decided before its key is looked at: a repeat of a claim
        // answered already, or another request under its key, is told so by the full path, which looks first.
        executed = await this.store.execute<ReplyOf<typeof claimJob>>(options, decide);
      }
      claimed = executed.result.claimed ? executed.result.job.jobId : null;
    } catch (error) {
      throw error instanceof ClaimableLater ? error.refusal : error;
    } finally {
      for (const jobId of picked) this.picker.release(jobId);
      // A picked job neither claimed nor gone from the queue (the write failed, or was tried again on
      // another job) is older than the look-ahead's jobs.
      if (picked.some((jobId) => jobId !== claimed && !stale.has(jobId))) this.picker.requeued();
    }
    if (!executed.replayed) crashAfterCommitIfAsked('claim_job');
    return this.withLeaseLeft(executed.replayed ? await this.asItIsNow(executed.result, request.runnerId) : executed.result);
  }

  /**
   * A claim's answer with what is left of its lease by this service's clock as it answers, reckoned at
   * every answer, a repeat's too: its lease may have been resumed at a start since it was granted
   * (docs/jobs.md, "A runner's clock").
   */
  private withLeaseLeft(reply: ReplyOf<typeof claimJob>): ReplyOf<typeof claimJob> {
    if (!reply.claimed) return reply;
    return { ...reply, leaseExpiresInMs: Math.max(0, Date.parse(reply.job.leaseExpiresAt) - Date.parse(this.now())) };
  }

  /**
   * A replayed claim answers with the job as it is now (docs/jobs.md, "Claims"): the stored grant
   * only while it is still the job's live claim, held by this runner — refreshed (its expiry moves
   * with renewals) — and `claimed: false` once it ended (rolled back, expired, cancelled, finished).
   * Otherwise a runner restarted under its id would start the agent again under a dead claim.
   */
  private async asItIsNow(stored: ReplyOf<typeof claimJob>, runnerId: string): Promise<ReplyOf<typeof claimJob>> {
    if (!stored.claimed) return stored;
    const job = await loadJob(this.store, stored.job.jobId, this.store.pool);
    const lease = job?.lease ?? null;
    const live = lease !== null && lease.token === stored.job.leaseToken && lease.runnerId === runnerId && !isLeaseExpired(lease.expiresAt, this.now());
    return live ? { claimed: true, job: claimedJob(job!) } : { claimed: false };
  }

  @CommandHandler(renewJobLease)
  async renew(request: RequestOf<typeof renewJobLease>, context?: CommandContext): Promise<ReplyOf<typeof renewJobLease>> {
    return this.decide(request.jobId, (now) => renewJobLeaseCommand(request, { now }), request, context, undefined, (d) => {
      const e = eventOf(d, 'JobLeaseRenewed');
      return { jobId: e.jobId, leaseToken: e.leaseToken, leaseExpiresAt: e.leaseExpiresAt };
    });
  }

  @CommandHandler(startJob)
  async start(request: RequestOf<typeof startJob>, context?: CommandContext): Promise<ReplyOf<typeof startJob>> {
    return this.decide(request.jobId, (now) => startJobCommand(request, { now }), request, context, 'start_job', statusReply);
  }

  @CommandHandler(logImplementation)
  async logImplementation(request: RequestOf<typeof logImplementation>, context?: CommandContext): Promise<ReplyOf<typeof logImplementation>> {
    return this.decide(request.jobId, (now) => logImplementationCommand(request, { now }), request, context, 'log_implementation', statusReply);
  }

  @CommandHandler(logCommit)
  async logCommit(request: RequestOf<typeof logCommit>, context?: CommandContext): Promise<ReplyOf<typeof logCommit>> {
    return this.decide(request.jobId, (now) => logCommitCommand(request, { now }), request, context, 'log_commit', statusReply);
  }

  @CommandHandler(logTestResult)
  async logTestResult(request: RequestOf<typeof logTestResult>, context?: CommandContext): Promise<ReplyOf<typeof logTestResult>> {
    return this.decide(request.jobId, (now) => logTestResultCommand(request, { now }), request, context, 'log_test_result', statusReply);
  }

  @CommandHandler(reportPush)
  async reportPush(request: RequestOf<typeof reportPush>, context?: CommandContext): Promise<ReplyOf<typeof reportPush>> {
    return this.decide(request.jobId, (now) => reportPushCommand(request, { now }), request, context, 'report_push', (d) => {
      const e = eventOf(d, 'JobPushReported');
      return { jobId: e.jobId, headSha: e.headSha, pushedAt: e.pushedAt };
    });
  }

  @CommandHandler(finishJob)
  async finish(request: RequestOf<typeof finishJob>, context?: CommandContext): Promise<ReplyOf<typeof finishJob>> {
    return this.decide(request.jobId, (now) => finishJobCommand(request, { now }), request, context, 'finish_job', (d) => {
      // The runner of a cancelled job reporting its stop: the job stays as the cancel left it.
      if (d.decided.some((e) => e.type === 'JobRunStopped')) {
        const job = jobAfter(d);
        return { jobId: job.jobId, jobStatus: 'CANCELLED' as const, taskStatus: job.taskStatus, error: null };
      }
      const e = eventOf(d, 'JobFinished');
      return { jobId: e.jobId, jobStatus: e.jobStatus, taskStatus: e.taskStatus, error: e.error };
    });
  }

  @CommandHandler(rollbackClaim)
  async rollback(request: RequestOf<typeof rollbackClaim>, context?: CommandContext): Promise<ReplyOf<typeof rollbackClaim>> {
    const reply = await this.decide(request.jobId, (now) => rollbackClaimCommand(request, { now }), request, context, 'rollback_claim', (d) => {
      const job = jobAfter(d);
      return { jobId: job.jobId, status: job.status, attempt: job.attempt };
    });
    // Back in the queue, in its place ahead of the claims' look-ahead.
    if (reply.status === 'QUEUED') this.picker.requeued();
    return reply;
  }

  @CommandHandler(cancelJob)
  async cancel(request: RequestOf<typeof cancelJob>, context?: CommandContext): Promise<ReplyOf<typeof cancelJob>> {
    return this.decide(request.jobId, (now) => cancelJobCommand(request, { now }), request, context, 'cancel_job', statusReply);
  }

  /**
   * `command` is made once this service has resumed its leases after a loss of its bus: its time is
   * the decision's, not the request's arrival (a renewal that waited for the resumption would
   * otherwise run out early by the wait).
   */
  private async decide<R>(
    jobId: string,
    command: (now: string) => JobCommand,
    request: { idempotencyKey?: string; correlationId?: string; causationId?: string; actor?: string },
    context: CommandContext | undefined,
    idempotentAs: string | undefined,
    reply: (decision: JobDecision) => R,
  ): Promise<R> {
    // A lease this service could not renew while its bus was down is judged as resumed.
    await this.leases.afterBusLoss();
    const idempotency = idempotentAs && request.idempotencyKey ? idempotencyFor(idempotentAs, { ...request, idempotencyKey: request.idempotencyKey }) : undefined;
    const executed = await handleWithDecider(this.store, {
      decider: jobDecider,
      streamId: jobId,
      command: command(this.now()),
      metadata: metadataOf(request, context),
      idempotency,
      // The answer is made before the write is sent (executeInOneMessage): a stop here comes between the two.
      reply: idempotentAs ? (decision: JobDecision) => (stopBeforeCommitIfAsked(idempotentAs), reply(decision)) : reply,
    });
    if (idempotentAs && !executed.replayed) crashAfterCommitIfAsked(idempotentAs);
    return executed.result;
  }
}

function statusReply(decision: JobDecision) {
  const job = jobAfter(decision);
  return { jobId: job.jobId, status: job.status };
}
