import {
  askQuestion,
  deriveIdempotencyKey,
  reportAgentStatus,
  finishJob,
  logCommit,
  logImplementation,
  logTestResult,
  recordReviewDecision,
  renewJobLease,
  reportPush,
  rollbackClaim,
  startJob,
  type AlreadyPresentSchema,
  type ClaimedJob,
  type ReplyOf,
  type RollbackCause,
  type VerificationFacts,
} from '@gantry/contracts';
import type { CommandClient, RequestOptions } from '@gantry/messaging';
import type { z } from 'zod';

/** What a push report says: the branch, the commit pushed, whether it was sent, and the facts the finish will carry. */
export interface PushReport {
  branch: string;
  headSha: string;
  pushed: boolean;
  facts?: VerificationFacts;
}

/**
 * The key of a push report, the same for the run that pushed and for its runner started again after
 * a SIGKILL, which reports the push the run could not (application/earlier-run.ts).
 */
export function pushReportKey(jobId: string, leaseToken: number, report: PushReport): string {
  return deriveIdempotencyKey('runner/push', { jobId, leaseToken, ...report });
}

/** The job service's answer to a finish: the job's terminal status and its task's. */
export type FinishReply = ReplyOf<typeof finishJob>;

/**
 * Every job-service command a runner sends under one claim, each carrying the claim's fencing
 * token. Idempotency keys are derived from what the command means (job, token, content), so a
 * retry after a lost reply is recognised by the job service and a different command is not.
 */
export class JobLeaseSession {
  /**
   * When the claim's lease runs out by this runner's clock: the moment the claim, then each renewal,
   * was first asked, plus the duration asked for. Never the job service's `leaseExpiresAt`, which is
   * by its own clock (docs/jobs.md, "A runner's clock").
   */
  private leaseExpiresAtMs: number;

  constructor(
    private readonly client: CommandClient,
    readonly runnerId: string,
    readonly job: ClaimedJob,
    /** When the claim's lease runs out by this runner's clock: when the claim was first asked plus the duration asked for. */
    leaseRunsOutAt: number,
    /** `abandon`: the runner's stop deadline, which every command under the claim gives up at. */
    private readonly options: { timeoutMs?: number; correlationId?: string; abandon?: AbortSignal } = {},
  ) {
    this.leaseExpiresAtMs = leaseRunsOutAt;
  }

  /** The moment the claim's lease runs out by this runner's clock, unless renewed before. */
  get leaseExpiresAt(): number {
    return this.leaseExpiresAtMs;
  }

  get jobId(): string {
    return this.job.jobId;
  }

  get leaseToken(): number {
    return this.job.leaseToken;
  }

  private fenced() {
    return { jobId: this.job.jobId, runnerId: this.runnerId, leaseToken: this.job.leaseToken, correlationId: this.options.correlationId };
  }

  private key(action: string, parts: Record<string, unknown> = {}): string {
    return deriveIdempotencyKey(`runner/${action}`, { jobId: this.job.jobId, leaseToken: this.job.leaseToken, ...parts });
  }

  /**
   * A command that got no answer (TIMEOUT) or found no job service (UNAVAILABLE) is sent again with
   * the same idempotency key for as long as the claim's lease runs (docs/jobs.md, "Commands under a
   * claim"), so a job service that restarts meanwhile answers it, and a reply lost after the commit
   * returns the stored result. The lease does not run while no job service does: a job service
   * resumes it at its start ("A job service outage"), so the time NATS says nobody serves (no
   * responders) does not use up the retries. The time this runner cannot reach NATS does: the job
   * service may be running and judging the lease meanwhile ("Commands under a claim").
   */
  private send<T>(call: (opts: RequestOptions) => Promise<T>, retry: Pick<RequestOptions, 'retryUntil' | 'signal' | 'timeoutMs' | 'onClockStopped'> = {}): Promise<T> {
    return call({
      timeoutMs: this.options.timeoutMs ?? 10_000,
      correlationId: this.options.correlationId,
      retryUntil: () => this.leaseExpiresAtMs,
      outagesStopTheClock: true,
      ...retry,
      abandon: this.options.abandon,
    });
  }

  /**
   * The job service renews from the moment it decides, after this was first asked: the lease runs at
   * least `leaseDurationMs` from then. The time no job service ran meanwhile moves that moment on: the
   * one that answers resumed the lease at its start.
   */
  async renew(leaseDurationMs: number) {
    let askedAt = Date.now();
    const reply = await this.send((o) => this.client.request(renewJobLease, { ...this.fenced(), leaseDurationMs }, o), {
      onClockStopped: (ms) => {
        askedAt += ms;
      },
    });
    this.leaseExpiresAtMs = Math.max(this.leaseExpiresAtMs, askedAt + leaseDurationMs);
    return reply;
  }

  start(input: { baseSha?: string; branch?: string; adoptPushOf?: number; adoptRunOf?: number }) {
    return this.send((o) => this.client.request(startJob, { ...this.fenced(), ...input, idempotencyKey: this.key('start') }, o));
  }

  logImplementation(entry: {
    summary: string;
    branch?: string;
    plan?: string;
    taskId?: string;
    alreadyPresent?: z.infer<typeof AlreadyPresentSchema>;
  }, sequence?: number) {
    return this.send((o) =>
      this.client.request(logImplementation, { ...this.fenced(), ...entry, idempotencyKey: this.key('log-implementation', sequence === undefined ? entry : { entry, sequence }) }, o),
    );
  }

  logCommit(entry: { commitSha: string; message: string; summary: string }) {
    return this.send((o) => this.client.request(logCommit, { ...this.fenced(), ...entry, idempotencyKey: this.key('log-commit', entry) }, o));
  }

  /**
   * `sequence` numbers the agent's own calls: an agent that reports PASSED, then FAILED, then PASSED
   * again made three entries, and the third must not be taken for a repeat of the first. The runner's
   * own entries (one of each per run) are keyed by their content alone.
   */
  logTestResult(entry: { status: 'PASSED' | 'FAILED'; summary: string }, sequence?: number) {
    return this.send((o) =>
      this.client.request(logTestResult, { ...this.fenced(), ...entry, idempotencyKey: this.key('log-test-result', sequence === undefined ? entry : { entry, sequence }) }, o),
    );
  }

  reportPush(input: PushReport) {
    return this.send((o) => this.client.request(reportPush, { ...this.fenced(), ...input, idempotencyKey: pushReportKey(this.job.jobId, this.job.leaseToken, input) }, o));
  }

  reportAgentStatus(update: { status: 'IN_PROGRESS' | 'DONE' | 'PARTIAL' | 'FAILED'; summary: string; error?: string }, sequence: number) {
    return this.send((o) =>
      this.client.request(reportAgentStatus, { ...this.fenced(), ...update, idempotencyKey: this.key('agent-status', { update, sequence }) }, o),
    );
  }

  askQuestion(question: { question: string; context?: string; options?: string[] }, sequence: number) {
    return this.send((o) => this.client.request(askQuestion, { ...this.fenced(), ...question, idempotencyKey: this.key('question', { question, sequence }) }, o));
  }

  /**
   * A REVIEW job's decision, to the workflow engine under this claim (docs/workflow-engine.md,
   * AC-R1): the engine accepts it only while the job service says this claim holds.
   */
  recordReviewDecision(decision: { verdict: 'approve' | 'reject'; comment: string }, sequence: number) {
    return this.send((o) =>
      this.client.request(recordReviewDecision, { ...this.fenced(), ...decision, idempotencyKey: this.key('review-decision', { decision, sequence }) }, o),
    );
  }

  finish(facts: VerificationFacts): Promise<FinishReply> {
    return this.send((o) => this.client.request(finishJob, { ...this.fenced(), facts, idempotencyKey: this.key('finish', { facts }) }, o));
  }

  /** `retry`: asked again until another deadline than the lease's (a claim given back after it could have ended). */
  rollback(reason: string, cause: RollbackCause, exitCode?: number, retry?: Pick<RequestOptions, 'retryUntil' | 'signal' | 'timeoutMs'>) {
    const bounded = reason.length > 2000 ? `${reason.slice(0, 1997)}...` : reason;
    return this.send(
      (o) =>
        this.client.request(
          rollbackClaim,
          { ...this.fenced(), reason: bounded, cause, ...(exitCode === undefined ? {} : { exitCode }), idempotencyKey: this.key('rollback') },
          o,
        ),
      retry,
    );
  }

  /** After a cancel: the agent of this (revoked) claim is gone (docs/jobs.md, "Cancelling a running job"). */
  reportStopped(): Promise<FinishReply> {
    const facts: VerificationFacts = {
      verifyResult: 'EMPTY',
      newCommit: false,
      netDiff: { filesChanged: 0, insertions: 0, deletions: 0 },
      workAlreadyOnTarget: false,
      diffIdenticalToMergedBranch: false,
      failure: null,
      cancelled: true,
    };
    return this.send((o) => this.client.request(finishJob, { ...this.fenced(), facts, idempotencyKey: this.key('stopped') }, o));
  }
}
