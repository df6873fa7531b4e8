import { acquireWorktree, deriveIdempotencyKey, releaseWorktree, renewWorktreeLease, type WorktreeLeaseGrant } from '@gantry/contracts';
import type { CommandClient } from '@gantry/messaging';

export interface WorktreeRequest {
  jobId: string;
  jobLeaseToken: number;
  repositoryUrl: string;
  branch: string;
  baseRef: string;
  leaseDurationMs: number;
  lockTimeoutMs?: number;
}

/**
 * The worktree service on this host, as the runner uses it: acquire a lease for a claim, keep it
 * alive while the agent runs, and — only on the paths where a claim is rolled back — give it back
 * early. On the normal path the worktree service releases the lease itself on the job's terminal event.
 */
export class WorktreeLeaseClient {
  constructor(
    private readonly client: CommandClient,
    private readonly options: { correlationId?: string } = {},
  ) {}

  acquire(request: WorktreeRequest): Promise<WorktreeLeaseGrant> {
    // Waiting in line for the lock is part of the call: the request must outlive the lock timeout.
    const timeoutMs = (request.lockTimeoutMs ?? 60_000) + 120_000;
    return this.client.request(
      acquireWorktree,
      {
        ...request,
        idempotencyKey: deriveIdempotencyKey('runner/acquire-worktree', { jobId: request.jobId, jobLeaseToken: request.jobLeaseToken }),
        correlationId: this.options.correlationId,
      },
      { timeoutMs, correlationId: this.options.correlationId },
    );
  }

  renew(lease: { leaseId: string; token: number }, leaseDurationMs: number, renewal: number) {
    return this.client.request(
      renewWorktreeLease,
      {
        leaseId: lease.leaseId,
        token: lease.token,
        leaseDurationMs,
        idempotencyKey: deriveIdempotencyKey('runner/renew-worktree', { ...lease, renewal }),
        correlationId: this.options.correlationId,
      },
      { timeoutMs: 10_000, correlationId: this.options.correlationId },
    );
  }

  release(lease: { leaseId: string; token: number }) {
    return this.client.request(
      releaseWorktree,
      {
        leaseId: lease.leaseId,
        token: lease.token,
        idempotencyKey: deriveIdempotencyKey('runner/release-worktree', lease),
        correlationId: this.options.correlationId,
      },
      { timeoutMs: 10_000, correlationId: this.options.correlationId },
    );
  }
}
