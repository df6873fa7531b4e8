import {
  deriveIdempotencyKey,
  ErrorCode,
  finishJob,
  GantryError,
  isGantryError,
  listJobs,
  listWorktreeLeases,
  releaseWorktree,
  reportPush,
  rollbackClaim,
  type JobView,
  type WorktreeLeaseStatus,
} from '@gantry/contracts';
import { readAllPages, type CommandClient } from '@gantry/messaging';
import { AGENT_OUTLIVED_ITS_KILL, runLogFields, type RunnerLog } from './job-run.js';
import { originBranchHead } from '../infrastructure/worktrees/push-branch.js';
import { pushReportKey } from '../infrastructure/job-service/job-lease-session.js';
import { OrphanedAgentsLeft, removeRun, stopOrphanedAgents, type AgentLeft, type RecordedPush, type RunRecord } from './orphaned-agents.js';
import type { RunnerConfig } from './runner-config.js';

const LIVE_LEASE: ReadonlySet<WorktreeLeaseStatus> = new Set(['acquiring_lock', 'creating_or_reusing', 'syncing', 'ready']);

export interface SettledClaim {
  jobId: string;
  leaseToken: number;
  /** What became of the claim: rolled back, its cancelled run reported stopped, or already over. */
  outcome: 'rolled_back' | 'stop_reported' | 'ended';
  /** The run had pushed and not reported it; the push, found on the origin, was reported before the rollback. */
  pushReported: boolean;
  worktreeLeasesReleased: number;
}

/**
 * A runner started again under its id settles what its earlier run left before it takes an offer
 * (docs/jobs.md, "Claims"): it stops the agents it finds in its scratch folder (and waits until they
 * are gone), rolls back every claim the job service says it still holds — cause RUNNER, so no attempt
 * is spent — reports the stop of runs whose job was cancelled meanwhile, and releases the worktree
 * leases of those claims with their fences. A run that had pushed and not reported it yet has its push
 * reported first, when the origin's branch is at the commit it pushed: the next claim then finishes it
 * instead of running the agent again on top of it (docs/jobs.md, "A verified push is finished, not redone"). Without this its jobs would wait for their leases to
 * expire, and their worktrees for theirs. Every request is retried while `until()` is in the future,
 * and given up, a try in flight too, when `abandon` aborts (the runner's stop deadline); so are the
 * wait for the agents to be gone and the question to the origin (its git stopped). Given up, it throws
 * EarlierRunLeft, naming the agents it leaves running and the claims it leaves to their leases.
 */
export async function settleEarlierRun(deps: SettlingDeps): Promise<SettledClaim[]> {
  const progress: SettlingProgress = { agentsLeft: [], claims: new Map(), settled: new Set() };
  try {
    return await settle(deps, progress);
  } catch (error) {
    if (!deps.abandon.aborted) throw error;
    if (error instanceof OrphanedAgentsLeft) {
      progress.agentsLeft = error.left;
      for (const agent of error.left) if (agent.jobId !== null && agent.leaseToken !== null) progress.claims.set(`${agent.jobId}/${agent.leaseToken}`, { jobId: agent.jobId, leaseToken: agent.leaseToken });
      for (const { run } of error.stopped) if (run) progress.claims.set(`${run.jobId}/${run.leaseToken}`, { jobId: run.jobId, leaseToken: run.leaseToken });
    }
    const claimsLeft = [...progress.claims].filter(([key]) => !progress.settled.has(key)).map(([, claim]) => claim);
    throw new EarlierRunLeft(error, progress.agentsLeft, claimsLeft);
  }
}

export interface SettlingDeps {
  config: RunnerConfig;
  commands: CommandClient;
  log: RunnerLog;
  until: () => number;
  abandon: AbortSignal;
}

/** What the settling had learnt and done when it was given up: what it leaves, and whose. */
interface SettlingProgress {
  agentsLeft: AgentLeft[];
  /** The claims of the earlier run it knew of, by `<jobId>/<leaseToken>`. */
  claims: Map<string, { jobId: string; leaseToken: number }>;
  settled: Set<string>;
}

/**
 * The settling was given up at the stop's deadline (`abandon`): `agentsLeft` are the earlier run's
 * agents not known to be gone (left running in their process groups), `claimsLeft` the claims it knew
 * of and had not settled (left to their leases). The message is the one of what was given up.
 */
export class EarlierRunLeft extends Error {
  constructor(
    cause: unknown,
    readonly agentsLeft: AgentLeft[],
    readonly claimsLeft: { jobId: string; leaseToken: number }[],
  ) {
    super(cause instanceof Error ? cause.message : String(cause), { cause });
    this.name = cause instanceof Error ? cause.name : 'Error';
  }
}

async function settle(deps: SettlingDeps, progress: SettlingProgress): Promise<SettledClaim[]> {
  const { config, commands, log } = deps;
  const options: SettlingOptions = { timeoutMs: config.commandTimeoutMs, retryUntil: deps.until, abandon: deps.abandon };
  const orphans = await stopOrphanedAgents(config.scratchDir, config.agentKillGraceMs, deps.abandon);
  for (const { run } of orphans) if (run) progress.claims.set(`${run.jobId}/${run.leaseToken}`, { jobId: run.jobId, leaseToken: run.leaseToken });
  for (const orphan of orphans) {
    if (orphan.pid !== null) log.warn('stopped an agent left behind by an earlier run of this runner', { pid: orphan.pid, killed: orphan.killed, groupGone: orphan.groupGone, scratch: orphan.scratch });
    // Said as a run says it of its own agent: the claim and the worktree are settled all the same.
    if (!orphan.groupGone) log.error(AGENT_OUTLIVED_ITS_KILL, { ...claimFieldsOf(orphan.run), agentPid: orphan.pid, scratch: orphan.scratch, earlierRun: true });
  }
  const held = await heldClaims(commands, config.runnerId, options);
  const runs = new Map<string, RunRecord>();
  for (const orphan of orphans) if (orphan.run) runs.set(`${orphan.run.jobId}/${orphan.run.leaseToken}`, orphan.run);
  const claims = new Map<string, { jobId: string; leaseToken: number; view: JobView | null }>();
  for (const job of held) claims.set(`${job.jobId}/${job.lease!.leaseToken}`, { jobId: job.jobId, leaseToken: job.lease!.leaseToken, view: job });
  for (const orphan of orphans) {
    if (orphan.run && !claims.has(`${orphan.run.jobId}/${orphan.run.leaseToken}`)) {
      claims.set(`${orphan.run.jobId}/${orphan.run.leaseToken}`, { jobId: orphan.run.jobId, leaseToken: orphan.run.leaseToken, view: null });
    }
  }
  for (const [key, { jobId, leaseToken }] of claims) progress.claims.set(key, { jobId, leaseToken });

  const settled: SettledClaim[] = [];
  for (const { jobId, leaseToken, view } of claims.values()) {
    const fenced = { jobId, runnerId: config.runnerId, leaseToken };
    let outcome: SettledClaim['outcome'] = 'ended';
    let pushReported = false;
    if (view !== null) {
      const push = runs.get(`${jobId}/${leaseToken}`)?.push;
      if (push) pushReported = await reportPushFound({ commands, log, options }, fenced, push);
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
    progress.settled.add(`${jobId}/${leaseToken}`);
    settled.push({ jobId, leaseToken, outcome, pushReported, worktreeLeasesReleased: await releaseLeasesOf(commands, jobId, leaseToken, options) });
  }
  for (const orphan of orphans) await removeRun(orphan.scratch);
  for (const claim of settled) log.warn('settled a claim of an earlier run of this runner', { ...claim });
  return settled;
}

/** A run's log fields from its record; a record written before it kept the attempt and kind gives the claim alone. */
function claimFieldsOf(run: RunRecord | null): Record<string, unknown> {
  if (run === null) return { jobId: null, leaseToken: null };
  const { jobId, leaseToken, attempt, kind } = run;
  return attempt !== undefined && kind !== undefined ? runLogFields({ jobId, leaseToken, attempt, kind }) : { jobId, leaseToken };
}

/** How each request of the settling is sent: its try's timeout, retried until `retryUntil`, given up at `abandon`. */
interface SettlingOptions {
  timeoutMs: number;
  retryUntil: () => number;
  abandon: AbortSignal;
}

/** Refusals that say the claim is over already: nothing left to settle. */
const ENDED = new Set<string>([ErrorCode.STALE_FENCE, ErrorCode.INVALID_TRANSITION, ErrorCode.NOT_FOUND]);

/**
 * Reports the push a killed run made and did not report, if the origin's branch is at its commit: it
 * looks at the origin rather than trust its record, since the run may have died before the push went
 * out. The report is the one the run would have sent, under the same key. Whether the push sent the
 * commit is the run's recorded outcome, or, killed before it returned, taken as sent: the branch is
 * at a commit of this run's own verify. An origin it cannot ask leaves the push unreported (logged): the
 * claim is given back as before, and the next attempt runs again on the pushed branch.
 */
async function reportPushFound(
  deps: { commands: CommandClient; log: RunnerLog; options: SettlingOptions },
  fenced: { jobId: string; runnerId: string; leaseToken: number },
  push: RecordedPush,
): Promise<boolean> {
  const fields = { jobId: fenced.jobId, leaseToken: fenced.leaseToken, branch: push.branch, headSha: push.headSha };
  let head: string | null;
  try {
    head = await originBranchHead(push.worktreeDir, push.repositoryUrl, push.branch, deps.options.abandon);
  } catch (error) {
    if (deps.options.abandon.aborted) throw new GantryError(ErrorCode.TIMEOUT, `asking the origin for ${push.branch} was given up at its deadline before an answer came`);
    deps.log.warn('could not ask the origin for the branch an earlier run of this runner pushed; its push is not reported', { ...fields, error: String(error) });
    return false;
  }
  if (head !== push.headSha) return false;
  const report = { branch: push.branch, headSha: push.headSha, pushed: push.pushed ?? true, facts: push.facts };
  try {
    await deps.commands.request(reportPush, { ...fenced, ...report, idempotencyKey: pushReportKey(fenced.jobId, fenced.leaseToken, report) }, deps.options);
  } catch (error) {
    if (!isGantryError(error) || !ENDED.has(error.code)) throw error;
    return false;
  }
  deps.log.warn('reported the push of an earlier run of this runner, found on the origin', fields);
  return true;
}

async function heldClaims(commands: CommandClient, runnerId: string, options: SettlingOptions): Promise<JobView[]> {
  const jobs = await readAllPages(
    (cursor) => commands.request(listJobs, { runnerId, status: ['CLAIMED', 'RUNNING'], limit: 500, ...(cursor ? { cursor } : {}) }, options),
    (page) => page.jobs,
  );
  return jobs.filter((j) => j.lease?.runnerId === runnerId);
}

async function releaseLeasesOf(commands: CommandClient, jobId: string, jobLeaseToken: number, options: SettlingOptions): Promise<number> {
  const leases = await readAllPages(
    (cursor) => commands.request(listWorktreeLeases, { jobId, limit: 1000, ...(cursor ? { cursor } : {}) }, options),
    (page) => page.leases,
  );
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
