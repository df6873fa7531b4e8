import {
  askQuestion,
  deriveIdempotencyKey,
  ErrorCode,
  isGantryError,
  reportAgentStatus,
  finishJob,
  logCommit,
  logImplementation,
  logTestResult,
  renewJobLease,
  reportPush,
  rollbackClaim,
  startJob,
  type AlreadyPresentSchema,
  type ClaimedJob,
  type VerificationFacts,
} from '@gantry/contracts';
import type { CommandClient } from '@gantry/messaging';
import type { z } from 'zod';

export interface FinishReply {
  jobId: string;
  jobStatus: 'DONE' | 'FAILED' | 'SKIPPED' | 'CANCELLED';
  taskStatus: 'TO_DO' | 'IN_PROGRESS' | 'DONE' | null;
  error: string | null;
}

/**
 * Every job-service command a runner sends under one claim, each carrying the claim's fencing
 * token. Idempotency keys are derived from what the command means (job, token, content), so a
 * retry after a lost reply is recognised by the job service and a different command is not.
 */
export class JobLeaseSession {
  constructor(
    private readonly client: CommandClient,
    readonly runnerId: string,
    readonly job: ClaimedJob,
    private readonly options: { timeoutMs?: number; correlationId?: string; retries?: number } = {},
  ) {}

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
   * the same idempotency key, so a reply lost after the commit returns the stored result.
   */
  private async send<T>(call: (opts: { timeoutMs: number; correlationId?: string }) => Promise<T>): Promise<T> {
    const retries = this.options.retries ?? 3;
    for (let attempt = 0; ; attempt++) {
      try {
        return await call({ timeoutMs: this.options.timeoutMs ?? 10_000, correlationId: this.options.correlationId });
      } catch (error) {
        const transient = isGantryError(error) && (error.code === ErrorCode.TIMEOUT || error.code === ErrorCode.UNAVAILABLE);
        if (!transient || attempt >= retries) throw error;
        await new Promise((resolve) => setTimeout(resolve, 250 * 2 ** attempt));
      }
    }
  }

  renew(leaseDurationMs?: number) {
    return this.send((o) => this.client.request(renewJobLease, { ...this.fenced(), ...(leaseDurationMs ? { leaseDurationMs } : {}) }, o));
  }

  start(input: { baseSha?: string; branch?: string }) {
    return this.send((o) => this.client.request(startJob, { ...this.fenced(), ...input, idempotencyKey: this.key('start') }, o));
  }

  logImplementation(entry: {
    summary: string;
    branch?: string;
    plan?: string;
    taskId?: string;
    alreadyPresent?: z.infer<typeof AlreadyPresentSchema>;
  }) {
    return this.send((o) => this.client.request(logImplementation, { ...this.fenced(), ...entry, idempotencyKey: this.key('log-implementation', entry) }, o));
  }

  logCommit(entry: { commitSha: string; message: string; summary: string }) {
    return this.send((o) => this.client.request(logCommit, { ...this.fenced(), ...entry, idempotencyKey: this.key('log-commit', entry) }, o));
  }

  logTestResult(entry: { status: 'PASSED' | 'FAILED'; summary: string }) {
    return this.send((o) => this.client.request(logTestResult, { ...this.fenced(), ...entry, idempotencyKey: this.key('log-test-result', entry) }, o));
  }

  reportPush(input: { branch: string; headSha: string; pushed: boolean }) {
    return this.send((o) => this.client.request(reportPush, { ...this.fenced(), ...input, idempotencyKey: this.key('push', input) }, o));
  }

  reportAgentStatus(update: { status: 'IN_PROGRESS' | 'DONE' | 'PARTIAL' | 'FAILED'; summary: string; error?: string }, sequence: number) {
    return this.send((o) =>
      this.client.request(reportAgentStatus, { ...this.fenced(), ...update, idempotencyKey: this.key('agent-status', { update, sequence }) }, o),
    );
  }

  askQuestion(question: { question: string; context?: string; options?: string[] }, sequence: number) {
    return this.send((o) => this.client.request(askQuestion, { ...this.fenced(), ...question, idempotencyKey: this.key('question', { question, sequence }) }, o));
  }

  finish(facts: VerificationFacts): Promise<FinishReply> {
    return this.send((o) => this.client.request(finishJob, { ...this.fenced(), facts, idempotencyKey: this.key('finish', { facts }) }, o));
  }

  rollback(reason: string, exitCode?: number) {
    const bounded = reason.length > 2000 ? `${reason.slice(0, 1997)}...` : reason;
    return this.send((o) =>
      this.client.request(
        rollbackClaim,
        { ...this.fenced(), reason: bounded, ...(exitCode === undefined ? {} : { exitCode }), idempotencyKey: this.key('rollback') },
        o,
      ),
    );
  }
}
