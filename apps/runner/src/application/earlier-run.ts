import {
  deriveIdempotencyKey,
  ErrorCode,
  finishJob,
  isGantryError,
  listJobs,
  listWorktreeLeases,
  releaseWorktree,
  rollbackClaim,
  type JobView,
  type WorktreeLeaseStatus,
} from '@gantry/contracts';
import type { CommandClient } from '@gantry/messaging';
import type { RunnerLog } from './job-run.js';
import { removeRun, stopOrphanedAgents } from './orphaned-agents.js';
import type { RunnerConfig } from './runner-config.js';

const LIVE_LEASE: ReadonlySet<WorktreeLeaseStatus> = new Set(['acquiring_lock', 'creating_or_reusing', 'syncing', 'ready']);

export interface SettledClaim {
  jobId: string;
  leaseToken: number;
  /** What became of the claim: rolled back, its cancelled run reported stopped, or already over. */
  outcome: 'rolled_back' | 'stop_reported' | 'ended';
  worktreeLeasesReleased: number;
}

/**
 * A runner started again under its id settles what its earlier run left before it takes an offer
 * (docs/jobs.md, "Claims"): it stops the agents it finds in its scratch folder (and waits until they
 * are gone), rolls back every claim the job service says it still holds — cause RUNNER, so no attempt
 * is spent — reports the stop of runs whose job was cancelled meanwhile, and releases the worktree
 * leases of those claims with their fences. Without this its jobs would wait for their leases to
 * expire, and their worktrees for theirs. Every request is retried while `until()` is in the future.
 */
export async function settleEarlierRun(deps: { config: RunnerConfig; commands: CommandClient; log: RunnerLog; until: () => number }): Promise<SettledClaim[]> {
  const { config, commands, log } = deps;
  const options = { timeoutMs: config.commandTimeoutMs, retryUntil: deps.until };
  const orphans = await stopOrphanedAgents(config.scratchDir, config.agentKillGraceMs);
  for (const orphan of orphans) {
    if (orphan.pid !== null) log.warn('stopped an agent left behind by an earlier run of this runner', { pid: orphan.pid, killed: orphan.killed, scratch: orphan.scratch });
  }
  const held = await heldClaims(commands, config.runnerId, options);
  const claims = new Map<string, { jobId: string; leaseToken: number; view: JobView | null }>();
  for (const job of held) claims.set(`${job.jobId}/${job.lease!.leaseToken}`, { jobId: job.jobId, leaseToken: job.lease!.leaseToken, view: job });
  for (const orphan of orphans) {
    if (orphan.run && !claims.has(`${orphan.run.jobId}/${orphan.run.leaseToken}`)) {
      claims.set(`${orphan.run.jobId}/${orphan.run.leaseToken}`, { jobId: orphan.run.jobId, leaseToken: orphan.run.leaseToken, view: null });
    }
  }

  const settled: SettledClaim[] = [];
  for (const { jobId, leaseToken, view } of claims.values()) {
    const fenced = { jobId, runnerId: config.runnerId, leaseToken };
    let outcome: SettledClaim['outcome'] = 'ended';
    if (view !== null) {
      try {
        await commands.request(
          rollbackClaim,
          {
            ...fenced,
            reason: `runner ${config.runnerId} was started again; the claim of its earlier run is given back`,
            cause: 'RUNNER',
            idempotencyKey: deriveIdempotencyKey('runner/restart-rollback', { jobId, leaseToken }),
          },
          options,
        );
        outcome = 'rolled_back';
      } catch (error) {
        if (!isGantryError(error) || !ENDED.has(error.code)) throw error;
      }
    } else {
      // Not held any more: cancelled meanwhile (then the stop is ours to report), or ended otherwise.
      try {
        await commands.request(
          finishJob,
          {
            ...fenced,
            facts: {
              verifyResult: 'EMPTY',
              newCommit: false,
              netDiff: { filesChanged: 0, insertions: 0, deletions: 0 },
              workAlreadyOnTarget: false,
              diffIdenticalToMergedBranch: false,
              failure: null,
              cancelled: true,
            },
            idempotencyKey: deriveIdempotencyKey('runner/restart-stopped', { jobId, leaseToken }),
          },
          options,
        );
        outcome = 'stop_reported';
      } catch (error) {
        if (!isGantryError(error) || !ENDED.has(error.code)) throw error;
      }
    }
    settled.push({ jobId, leaseToken, outcome, worktreeLeasesReleased: await releaseLeasesOf(commands, jobId, leaseToken, options) });
  }
  for (const orphan of orphans) await removeRun(orphan.scratch);
  for (const claim of settled) log.warn('settled a claim of an earlier run of this runner', { ...claim });
  return settled;
}

/** Refusals that say the claim is over already: nothing left to settle. */
const ENDED = new Set<string>([ErrorCode.STALE_FENCE, ErrorCode.INVALID_TRANSITION, ErrorCode.NOT_FOUND]);

async function heldClaims(commands: CommandClient, runnerId: string, options: { timeoutMs: number; retryUntil: () => number }): Promise<JobView[]> {
  const held: JobView[] = [];
  let cursor: string | undefined;
  do {
    const page = await commands.request(listJobs, { runnerId, status: ['CLAIMED', 'RUNNING'], limit: 500, ...(cursor ? { cursor } : {}) }, options);
    held.push(...page.jobs.filter((j) => j.lease?.runnerId === runnerId));
    cursor = page.nextCursor ?? undefined;
  } while (cursor);
  return held;
}

async function releaseLeasesOf(commands: CommandClient, jobId: string, jobLeaseToken: number, options: { timeoutMs: number; retryUntil: () => number }): Promise<number> {
  const { leases } = await commands.request(listWorktreeLeases, { jobId, limit: 1000 }, options);
  let released = 0;
  for (const lease of leases) {
    if (lease.jobLeaseToken !== jobLeaseToken || lease.token === null || !LIVE_LEASE.has(lease.status)) continue;
    try {
      await commands.request(
        releaseWorktree,
        { leaseId: lease.leaseId, token: lease.token, idempotencyKey: deriveIdempotencyKey('runner/release-worktree', { leaseId: lease.leaseId, token: lease.token }) },
        { ...options, timeoutMs: Math.max(options.timeoutMs, 20_000) },
      );
      released++;
    } catch (error) {
      if (!isGantryError(error) || !ENDED.has(error.code)) throw error;
    }
  }
  return released;
}
