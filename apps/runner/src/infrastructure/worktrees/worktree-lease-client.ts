import { acquireWorktree, deriveIdempotencyKey, releaseWorktree, renewWorktreeLease, type WorktreeLeaseGrant } from '@gantry/contracts';
import type { CommandClient } from '@gantry/messaging';
import { AnsweredTry } from '../answered-try.js';

export interface WorktreeRequest {
  jobId: string;
  jobLeaseToken: number;
  repositoryUrl: string;
  branch: string;
  baseRef: string;
  leaseDurationMs: number;
  lockTimeoutMs?: number;
}

/** A grant, and when its lease runs out by this runner's clock (docs/jobs.md, "A runner's clock"). */
export interface WorktreeLeaseGranted {
  grant: WorktreeLeaseGrant;
  /** Epoch ms on this runner's clock; never after the worktree service's own expiry. */
  expiresAt: number;
}

/** What an acquire may take beyond its wait for the lock: creating the worktree and syncing it (the worktree service's own budget). */
const PREPARE_BUDGET_MS = 120_000;

/**
 * The worktree service on this host, as the runner uses it: acquire a lease for a claim, keep it
 * alive while the agent runs, and give it back when the claim ends other than by the runner's own
 * finish (on that path the worktree service releases the lease itself, on the job's terminal event).
 *
 * Every request is sent again under its idempotency key when it got no answer (docs/jobs.md,
 * "Commands under a claim"), each try bounded by `tryTimeoutMs`: an acquire the worktree service
 * swallowed when it died is asked again within seconds, and the service, recognising the key,
 * waits for the same lease.
 */
export class WorktreeLeaseClient {
  constructor(
    private readonly client: CommandClient,
    /** `abandon`: the runner's stop deadline, which every request gives up at. */
    private readonly options: { correlationId?: string; tryTimeoutMs?: number; abandon?: AbortSignal } = {},
  ) {}

  private get tryTimeoutMs(): number {
    return this.options.tryTimeoutMs ?? 10_000;
  }

  async acquire(request: WorktreeRequest, signal?: AbortSignal): Promise<WorktreeLeaseGranted> {
    // Waiting in line for the lock is part of the call: the retries must outlast the lock timeout.
    const giveUpAt = Date.now() + (request.lockTimeoutMs ?? 60_000) + PREPARE_BUDGET_MS;
    const answered = new AnsweredTry();
    const grant = await this.client.request(
      acquireWorktree,
      {
        ...request,
        idempotencyKey: deriveIdempotencyKey('runner/acquire-worktree', { jobId: request.jobId, jobLeaseToken: request.jobLeaseToken }),
        correlationId: this.options.correlationId,
      },
      {
        timeoutMs: this.tryTimeoutMs,
        correlationId: this.options.correlationId,
        retryUntil: giveUpAt,
        abandon: this.options.abandon,
        onTryStarted: answered.started,
        ...(signal ? { signal } : {}),
      },
    );
    // A worktree service that does not say: granted once the worktree was ready, the lease runs about what was asked from the answer.
    return { grant, expiresAt: answered.endOf(grant.expiresInMs, Date.now() + request.leaseDurationMs) };
  }

  /**
   * `until`: the lease's current expiry — retrying past it would renew nothing. Returns the reply and
   * when the renewed lease runs out by this runner's clock, counted as an acquire's: the reply says
   * what is left of it as the service answers — a repeat answered from its receipt after a restart
   * too, whose lease the start resumed while this runner's tries found nobody serving.
   */
  async renew(lease: { leaseId: string; token: number }, leaseDurationMs: number, renewal: number, until: number) {
    let askedAt = Date.now();
    const answered = new AnsweredTry();
    const reply = await this.client.request(
      renewWorktreeLease,
      {
        leaseId: lease.leaseId,
        token: lease.token,
        leaseDurationMs,
        idempotencyKey: deriveIdempotencyKey('runner/renew-worktree', { ...lease, renewal }),
        correlationId: this.options.correlationId,
      },
      // The worktree service resumes held leases at its start: the time NATS says nobody serves does not count.
      {
        timeoutMs: this.tryTimeoutMs,
        correlationId: this.options.correlationId,
        retryUntil: until,
        outagesStopTheClock: true,
        onClockStopped: (ms) => {
          askedAt += ms;
        },
        onTryStarted: answered.started,
        abandon: this.options.abandon,
      },
    );
    // A worktree service that does not say: counted from the first try, the time nobody served aside.
    return { reply, expiresAt: answered.endOf(reply.expiresInMs, askedAt + leaseDurationMs) };
  }

  /** `maxTryMs`: the longest one try may wait, when less than the service's own wait (what is left of a stop). */
  release(lease: { leaseId: string; token: number }, until: number, maxTryMs = Infinity) {
    return this.client.request(
      releaseWorktree,
      {
        leaseId: lease.leaseId,
        token: lease.token,
        idempotencyKey: deriveIdempotencyKey('runner/release-worktree', lease),
        correlationId: this.options.correlationId,
      },
      // The service waits up to 15 s for the rescue to finish before it answers.
      { timeoutMs: Math.min(Math.max(this.tryTimeoutMs, 20_000), maxTryMs), correlationId: this.options.correlationId, retryUntil: until, outagesStopTheClock: true, abandon: this.options.abandon },
    );
  }
}
