import { mkdir, rm, writeFile } from 'node:fs/promises';
import { join, relative, resolve, sep } from 'node:path';
import {
  ErrorCode,
  GantryError,
  getJob,
  isGantryError,
  type ClaimedJob,
  type RollbackCause,
  type UnfinishedRun,
  type VerificationFacts,
  type WorktreeLeaseGrant,
  worktreeLeaseEndedOf,
} from '@gantry/contracts';
import { isTransient, type CommandClient } from '@gantry/messaging';
import { countClaimLeftToExpire, crashHereIfAsked, holdHereIfAsked } from '@gantry/service-runtime';
import {
  acquireRefusal,
  alreadyDoneFacts,
  bounded,
  claimGone,
  decideAfterAgent,
  hostRefusal,
  isHostRefusal,
  isPushFailureOfTheJob,
  refusedFinishRollsBack,
  rollbackCauseOf,
  unverifiedFacts,
  verifiedFacts,
  type AfterAgent,
  type ClaimStanding,
} from '../domain/after-agent.js';
import { buildAgentCommand, type AgentCommand, type AgentSession } from '../domain/agent-command.js';
import type { PrecheckResult } from '../domain/idempotency-precheck.js';
import { agentEnvironment, isAgentNotStarted, runAgent, type AgentRunResult } from '../infrastructure/agent/agent-process.js';
import { CommandJobReporter } from '../infrastructure/job-service/command-job-reporter.js';
import { JobLeaseSession, type FinishReply } from '../infrastructure/job-service/job-lease-session.js';
import { startMcpToolServer, type McpToolServer } from '../infrastructure/mcp/tool-server.js';
import { taskSessionOf } from '../infrastructure/workflow/task-session.js';
import { writeMcpConfigFile } from '../infrastructure/mcp/mcp-config-file.js';
import { alreadyPresent } from '../infrastructure/verify/finish-facts.js';
import { precheckPlan } from '../infrastructure/verify/plan-precheck.js';
import { verifyWorktree } from '../infrastructure/verify/verify-worktree.js';
import { pushBranch } from '../infrastructure/worktrees/push-branch.js';
import { WorktreeLeaseClient } from '../infrastructure/worktrees/worktree-lease-client.js';
import { jobWorkspaceOf, writesCode, type JobWorkspace } from './job-workspace.js';
import { recordAgentPid, recordRun, type RunRecord } from './orphaned-agents.js';
import type { RunnerConfig } from './runner-config.js';

/**
 * The line of an agent whose processes outlived their SIGKILL (uninterruptible sleep): its claim and
 * worktree are given back all the same. Said by a run, and by the settling of an earlier run's agents.
 */
export const AGENT_OUTLIVED_ITS_KILL = 'processes of the agent outlived their SIGKILL; the worktree is given back all the same';

/** The fields of a run's log lines: its claim, and the correlation id its commands carry. */
export function runLogFields(job: { jobId: string; attempt: number; leaseToken: number; kind: string }): Record<string, unknown> {
  return { jobId: job.jobId, attempt: job.attempt, leaseToken: job.leaseToken, kind: job.kind, correlationId: runCorrelationId(job) };
}

export function runCorrelationId(job: { jobId: string; attempt: number }): string {
  return `${job.jobId}-attempt-${job.attempt}`;
}

export interface RunnerLog {
  log(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}

export interface JobRunDependencies {
  config: RunnerConfig;
  commands: CommandClient;
  log: RunnerLog;
  /** The agent's credentials are no longer accepted: the runner must stop taking work. */
  onTokenExpired(reason: string): void;
  /** The agent CLI could not be started at all (missing, not executable): the runner must stop taking work. */
  onAgentNotStarted(reason: string): void;
  /** This runner's connection to NATS is up (not closed, not reconnecting). */
  natsConnected(): boolean;
  /** The moment a stop of the runner must have handed back its claims and worktrees by (epoch ms); Infinity while it is not stopping. */
  stopsBy(): number;
  /**
   * Aborts at `stopsBy()`: every command of the run still waiting then — a try in flight, a retry, its
   * pause — is given up (docs/jobs.md, "Stopping a runner").
   */
  stopDeadline: AbortSignal;
}

/** Less than this left of a stop, a command is not sent: its answer could not come in time. */
const MIN_TRY_MS = 100;

/** What a command sent at a stop that found no time left of it ends with: the same as one never answered. */
function stopOver(): GantryError {
  return new GantryError(ErrorCode.TIMEOUT, 'no time was left of the runner\'s stop limit (GANTRY_SHUTDOWN_GRACE_MS) to ask');
}

/** How a claimed job ended on this runner. */
export type JobRunOutcome =
  | { kind: 'finished'; reply: FinishReply; agentStarted: boolean }
  | { kind: 'rolled_back'; reason: string; cause: RollbackCause; agentStarted: boolean }
  /** A user cancelled the job: the agent was stopped and its stop reported. */
  | { kind: 'cancelled'; agentStarted: boolean }
  /** The claim was taken away (expired, another runner's): nothing more may be reported. */
  | { kind: 'lease_lost'; reason: string; agentStarted: boolean };

/**
 * One claimed job from the claim to its last report: lease a worktree, record base_sha, run the
 * pre-check, start, drive the agent through the per-job MCP tool server while renewing both leases,
 * verify against base_sha, push what is new, report the push, and finish with the facts. Every way
 * out that cannot finish rolls the claim back with its reason and its cause, so the job service
 * requeues (or fails) the job. Whatever the way out, the worktree lease is given back only once the
 * agent is gone, and renewed until then (docs/jobs.md, "Cancelling a running job").
 */
export async function runClaimedJob(job: ClaimedJob, deps: JobRunDependencies, shutdown: AbortSignal, leaseRunsOutAt: number): Promise<JobRunOutcome> {
  return new JobRun(job, deps, shutdown, leaseRunsOutAt).run();
}

export class JobRun {
  private readonly session: JobLeaseSession;
  private readonly worktrees: WorktreeLeaseClient;
  private readonly fields: Record<string, unknown>;
  private readonly stopAgent = new AbortController();
  private leaseLost: string | null = null;
  /** The claim was given up because no renewal was answered before its end, not because one was refused: it may still be live. */
  private leaseUnanswered = false;
  /** The claim's hand-back was asked again until a resumed claim could have ended: it is not offered back once more. */
  private handBackAsked = false;
  /** Why the worktree lease is no longer ours (a renewal refused, or unanswered until its end): the worktree may be another job's. */
  private worktreeLost: string | null = null;
  /** The run failed for a reason of this runner's host, not of the job (a host refusal): the runner backs off taking offers. */
  hostRefused = false;
  /** A command that ends the claim (finish, rollback, the stop's report) was sent: the worktree service may end the worktree lease on it. */
  private ending = false;
  private cancelled = false;
  private lease: WorktreeLeaseGrant | null = null;
  /** When the worktree lease runs out by this runner's clock, never by the worktree service's `expiresAt` (docs/jobs.md, "A runner's clock"). */
  private worktreeLeaseExpiresAt = 0;
  private jobRenewTimer: NodeJS.Timeout | undefined;
  private worktreeRenewTimer: NodeJS.Timeout | undefined;
  private renewingJob = false;
  private renewingWorktree = false;
  private renewals = 0;
  private agentStarted = false;
  private scratch: string | null = null;
  private server: McpToolServer | null = null;
  private runRecord: RunRecord;
  /** How the run ended, once it did; the rest is giving the worktree back and clearing up. */
  private outcome: JobRunOutcome | null = null;
  /** The claim was counted as left to expire (once per claim). */
  private countedLeft = false;

  constructor(
    readonly job: ClaimedJob,
    private readonly deps: JobRunDependencies,
    private readonly shutdown: AbortSignal,
    /** When the claim's lease runs out by this runner's clock: when the claim was first asked plus the job lease asked for. */
    leaseRunsOutAt: number,
  ) {
    const correlationId = runCorrelationId(job);
    const abandon = deps.stopDeadline;
    this.session = new JobLeaseSession(deps.commands, deps.config.runnerId, job, leaseRunsOutAt, { timeoutMs: deps.config.commandTimeoutMs, correlationId, abandon });
    this.worktrees = new WorktreeLeaseClient(deps.commands, { correlationId, tryTimeoutMs: deps.config.commandTimeoutMs, abandon });
    this.fields = runLogFields(job);
    this.runRecord = { jobId: job.jobId, leaseToken: job.leaseToken, attempt: job.attempt, kind: job.kind, worktreeLease: null, push: null };
  }

  /** The job was cancelled (its `JobCancelled` event, for this claim): stop the agent, report the stop, give the worktree back. */
  cancel(revokedLeaseToken: number | null): void {
    if (revokedLeaseToken !== null && revokedLeaseToken !== this.job.leaseToken) return;
    if (this.cancelled) return;
    this.cancelled = true;
    this.deps.log.warn('job cancelled; stopping the agent', this.fields);
    this.stopAgent.abort();
  }

  async run(): Promise<JobRunOutcome> {
    const onShutdown = () => this.stopAgent.abort();
    this.shutdown.addEventListener('abort', onShutdown, { once: true });
    this.startRenewing();
    try {
      let outcome: JobRunOutcome;
      try {
        outcome = await this.steps();
      } catch (error) {
        outcome = await this.afterError(error);
      }
      this.outcome = outcome;
      // The agent is gone by now (its run resolved only once its process group was), or it never started.
      if (outcome.kind !== 'finished') await this.releaseWorktree();
      return outcome;
    } finally {
      // Whatever the way out, an error too: nothing of the run renews on, listens on or stays on disk.
      clearInterval(this.jobRenewTimer);
      clearInterval(this.worktreeRenewTimer);
      this.shutdown.removeEventListener('abort', onShutdown);
      await this.server?.close().catch(() => undefined);
      if (this.scratch) await rm(this.scratch, { recursive: true, force: true }).catch(() => undefined);
    }
  }

  private async steps(): Promise<JobRunOutcome> {
    const { config, log } = this.deps;
    // A claim answered once the runner's stop had begun (sent before the SIGTERM and answered after it,
    // or asked again after a lost reply) starts nothing the stop would only kill at its grace's end: it
    // goes back at once (docs/jobs.md, "Stopping a runner").
    if (this.deps.stopsBy() !== Infinity) return this.rollback('the runner was stopping when its claim was answered; the job was not started', 'RUNNER');
    this.scratch = join(config.scratchDir, `${this.job.jobId}-${this.job.leaseToken}`);
    await rm(this.scratch, { recursive: true, force: true });
    await mkdir(this.scratch, { recursive: true, mode: 0o700 });
    await this.record({ worktreeLease: null });

    if (this.job.verifiedPush) return this.finishVerifiedPush(this.job.verifiedPush);

    let workspace: JobWorkspace;
    try {
      workspace = jobWorkspaceOf(this.job, {
        repositoryUrl: config.defaultRepositoryUrl,
        targetBranch: config.defaultTargetBranch,
        agentTimeoutMs: config.agentTimeoutMs,
      });
    } catch (error) {
      return this.refuseToRun(error, writesCode(this.job.kind), false);
    }

    if (workspace.writesCode && workspace.branch === workspace.targetBranch) {
      // A code job whose branch is the target would publish unreviewed work there: refused before any work.
      await this.session.start({});
      return this.finish(
        unverifiedFacts(workspace.writesCode, {
          kind: 'EXCEPTION',
          message: `the job's branch ${workspace.branch} is the target branch; a code job works and pushes only on a feature branch`,
        }),
      );
    }

    let workDir: string;
    let baseSha: string | null = this.job.baseSha;
    if (workspace.repositoryUrl !== null && workspace.branch !== null) {
      const granted = await this.worktrees
        .acquire(
          {
            jobId: this.job.jobId,
            jobLeaseToken: this.job.leaseToken,
            repositoryUrl: workspace.repositoryUrl,
            branch: workspace.branch,
            baseRef: workspace.baseRef ?? workspace.targetBranch,
            leaseDurationMs: config.worktreeLeaseMs,
            lockTimeoutMs: config.worktreeLockTimeoutMs,
          },
          this.stopAgent.signal,
        )
        .catch((error: unknown) => {
          // A lease that ended with its claim gives the job up; one the worktree service ended on its own is its failure.
          const ended = worktreeLeaseEndedOf(error);
          if (ended?.claimEnded) log.warn('the worktree lease ended with the claim before its grant came; giving the job up', { ...this.fields, ...ended });
          throw acquireRefusal(error);
        });
      this.lease = granted.grant;
      this.worktreeLeaseExpiresAt = granted.expiresAt;
      await this.record({ worktreeLease: { leaseId: this.lease.leaseId, token: this.lease.token } });
      workDir = this.confined(this.lease.path);
      baseSha = this.lease.baseSha;
      log.log('worktree leased', { ...this.fields, worktreeKey: this.lease.worktreeKey, path: workDir, baseSha });
    } else {
      workDir = join(this.scratch, 'work');
      await mkdir(workDir, { recursive: true });
    }
    const interrupted = await this.interrupted();
    if (interrupted) return interrupted;
    const pushedEarlier = await this.unfinishedRunPushed(workspace, workDir);
    if (pushedEarlier) return this.finishUnfinishedRun(pushedEarlier);

    // The task's session as the jobs before this one left it: read before this job's start, which the
    // engine records as the session's start once it sees it (after that, it would say "resume").
    const taskSession = await this.taskSession();
    await this.session.start({ ...(baseSha ? { baseSha } : {}), ...(workspace.branch ? { branch: workspace.branch } : {}) });

    let precheck: PrecheckResult | null = null;
    if (workspace.writesCode && this.lease && workspace.expectedChanges.length > 0) {
      precheck = await precheckPlan({ repoDir: workDir, target: `origin/${workspace.targetBranch}`, expectedChanges: workspace.expectedChanges });
      if (precheck.kind === 'already_done') return this.finishAlreadyDone(workspace, precheck);
      if (precheck.kind === 'partial') {
        await this.session.logImplementation({
          summary: `Part of the plan is already on origin/${workspace.targetBranch} (up to commit ${precheck.commit}): ${precheck.present.map((c) => c.path).join(', ')}; left to do: ${precheck.missing.map((c) => c.path).join(', ')}.`,
          branch: workspace.branch ?? undefined,
          alreadyPresent: alreadyPresent(precheck) ?? undefined,
          ...(this.job.taskId ? { taskId: this.job.taskId } : {}),
        });
      }
    }

    const reporter = new CommandJobReporter(this.session, this.job.taskId, (message, f) => log.log(message, { ...this.fields, ...f }));
    this.server = await startMcpToolServer({
      jobId: this.job.jobId,
      correlationId: this.fields.correlationId as string,
      reporter,
      ...(this.job.kind === 'REVIEW' ? { reviewDecisions: reporter } : {}),
      log: (level, message, f) => (level === 'info' ? log.log(message, f) : level === 'warn' ? log.warn(message, f) : log.error(message, f)),
    });
    const payloadPath = join(this.scratch, 'payload.json');
    const mcpConfigPath = join(this.scratch, 'mcp-config.json');
    await writeFile(payloadPath, JSON.stringify(this.payloadFile(workspace, baseSha, precheck), null, 2), { mode: 0o600 });
    await writeMcpConfigFile(mcpConfigPath, this.server);
    let command: AgentCommand;
    try {
      command = buildAgentCommand({
        kind: this.job.kind,
        config: this.job.agentConfig,
        payloadPath,
        mcpConfigPath,
        worktreeDir: workDir,
        bin: config.agentBin,
        session: taskSession,
      });
    } catch (error) {
      return this.refuseToRun(error, workspace.writesCode, true);
    }

    const beforeStart = await this.interrupted();
    if (beforeStart) return beforeStart;
    if (this.shutdown.aborted) return this.rollback('the runner is shutting down before the agent started', 'RUNNER');
    this.agentStarted = true;
    log.log('agent starting', { ...this.fields, bin: command.bin, timeoutMs: workspace.timeoutMs });
    const result = await runAgent({
      command,
      cwd: workDir,
      env: agentEnvironment(),
      timeoutMs: workspace.timeoutMs,
      killGraceMs: config.agentKillGraceMs,
      tokenExpiredPattern: config.tokenExpiredPattern,
      signal: this.stopAgent.signal,
      onSpawn: (pid) => {
        crashHereIfAsked('runner:agent-started');
        recordAgentPid(this.scratch!, pid).catch((error: unknown) => log.warn('could not record the agent pid', { ...this.fields, error: String(error) }));
      },
    }).catch((error: unknown) => {
      if (!isAgentNotStarted(error)) throw error;
      return error;
    });
    if (result instanceof GantryError) {
      // This runner cannot run any job, this one included: not the job's failure (docs/jobs.md, "Attempts").
      this.agentStarted = false;
      await this.server.close();
      this.deps.onAgentNotStarted(result.message);
      return this.rollback(result.message, 'RUNNER');
    }
    await this.server.close();
    log.log('agent exited', {
      ...this.fields,
      exitCode: result.exitCode,
      signal: result.signal,
      timedOut: result.timedOut,
      aborted: result.aborted,
      tokenExpired: result.tokenExpired,
      durationMs: result.durationMs,
      groupGone: result.groupGone,
      outputHeldOpen: result.outputHeldOpen,
    });
    if (!result.groupGone) log.error(AGENT_OUTLIVED_ITS_KILL, this.fields);
    if (result.outputHeldOpen) {
      log.warn('a process outside the agent\'s process group (started in a new session) held its output open; the run did not wait for it', this.fields);
    }
    // The agent's calls still under way end first (each bounded by the claim's lease and the stop).
    await reporter.settled();
    if (this.worktreeLost !== null) return (await this.interrupted())!;
    return this.afterAgent(result, workspace, workDir, baseSha, reporter, precheck);
  }

  /** Carries out the after-agent rules (domain/after-agent.ts) step by step until one ends the run. */
  private async afterAgent(
    result: AgentRunResult,
    workspace: JobWorkspace,
    workDir: string,
    baseSha: string | null,
    reporter: CommandJobReporter,
    precheck: PrecheckResult | null,
  ): Promise<JobRunOutcome> {
    let run: AfterAgent = {
      claim: await this.claimStanding(),
      exit: result,
      reports: { lastTestResult: reporter.lastTestResult, lastStatusUpdate: reporter.lastStatusUpdate, storyLog: reporter.storyLog },
      writesCode: workspace.writesCode,
      branch: workspace.branch,
      timeoutMs: workspace.timeoutMs,
      verifiable: this.lease !== null && baseSha !== null,
      precheckPartial: precheck?.kind === 'partial',
      verification: null,
      push: { kind: 'not_tried' },
    };
    for (;;) {
      const step = decideAfterAgent(run);
      switch (step.kind) {
        case 'report_stopped':
          return this.claimEnded('cancelled');
        case 'lease_lost':
          return this.claimEnded('lost');
        case 'rollback':
          if (step.stopTakingWork) this.deps.onTokenExpired(step.reason);
          return this.rollback(step.reason, step.cause, step.exitCode);
        case 'finish':
          if (step.testResult) await this.session.logTestResult(step.testResult);
          return this.finish(step.facts);
        case 'verify': {
          const report = await verifyWorktree({
            worktreeDir: workDir,
            baseSha: baseSha!,
            target: `origin/${workspace.targetBranch}`,
            partialCompletion: step.partialCompletion,
            expectedChanges: workspace.expectedChanges.length > 0 ? workspace.expectedChanges : undefined,
          });
          this.deps.log.log('verified', {
            ...this.fields,
            result: report.result,
            planCheck: report.planCheck,
            headSha: report.headSha,
            newCommits: report.newCommits.length,
            workAlreadyOnTarget: report.workAlreadyOnTarget,
            uncommittedPaths: report.uncommittedPaths.length,
          });
          run = { ...run, verification: report, claim: await this.claimStanding() };
          break;
        }
        case 'push':
          // A worktree lost since the agent exited may hold another job's work by now: nothing is pushed from it.
          if (this.worktreeLost !== null) return (await this.interrupted())!;
          try {
            // To the repository the worktree was leased for, by its URL: never to whatever `origin` now names.
            const repositoryUrl = this.leasedRepositoryUrl(workspace);
            // Recorded before the push and with its outcome: killed before the report, this runner's next
            // start finds the push on the origin and reports it (earlier-run.ts), so it is not redone.
            const intended = { worktreeDir: workDir, repositoryUrl, branch: step.branch, headSha: step.headSha, facts: step.facts };
            await this.record({ push: intended });
            const push = await pushBranch(workDir, repositoryUrl, step.branch, step.headSha, { targetBranch: workspace.targetBranch });
            crashHereIfAsked('runner:after-push');
            await this.record({ push: { ...intended, pushed: push.pushed } });
            this.deps.log.log('branch pushed', { ...this.fields, branch: push.branch, headSha: push.headSha, pushed: push.pushed });
            await this.session.reportPush({ ...push, facts: step.facts });
            run = { ...run, push: { kind: 'pushed' } };
          } catch (error) {
            if (!isPushFailureOfTheJob(isGantryError(error) ? error.code : null)) throw error;
            run = { ...run, push: { kind: 'failed', message: (error as Error).message } };
          }
          break;
        default: {
          const unknown: never = step;
          throw new Error(`unknown after-agent step ${JSON.stringify(unknown)}`);
        }
      }
    }
  }

  /** The pre-check (docs/jobs.md, "Before writing: the pre-check"): the plan is on the target already — say where, and finish without the agent. */
  private async finishAlreadyDone(workspace: JobWorkspace, precheck: Extract<PrecheckResult, { kind: 'already_done' }>): Promise<JobRunOutcome> {
    const target = `origin/${workspace.targetBranch}`;
    await this.session.logImplementation({
      summary: `The whole plan is already on ${target}, completed by commit ${precheck.commit}: ${precheck.present.map((c) => c.path).join(', ')}. Nothing to do; the agent is not started.`,
      branch: workspace.branch ?? undefined,
      alreadyPresent: alreadyPresent(precheck) ?? undefined,
      ...(this.job.taskId ? { taskId: this.job.taskId } : {}),
    });
    await this.session.logTestResult({ status: 'PASSED', summary: `Nothing was changed: the planned work is on ${target} at ${precheck.commit}.` });
    return this.finish(alreadyDoneFacts());
  }

  /**
   * What the job asks for cannot be run, here or on any other runner (a payload whose plan or timeout
   * is malformed, allowed tools the agent's command line cannot carry): FAILED with why, on the first
   * try, before any agent starts (docs/jobs.md, "The story log"). Given back instead, every attempt
   * would end the same way and the job's error would speak of rollbacks. Any other error is rethrown.
   */
  private async refuseToRun(error: unknown, codeJob: boolean, started: boolean): Promise<JobRunOutcome> {
    if (!isGantryError(error) || error.code !== ErrorCode.INVALID_COMMAND) throw error;
    this.deps.log.warn('the job cannot be run; finishing it FAILED', { ...this.fields, error: error.message });
    if (!started) await this.session.start({});
    return this.finish(unverifiedFacts(codeJob, { kind: 'EXCEPTION', message: bounded(`the job cannot be run: ${error.message}`) }));
  }

  /** An earlier claim verified and pushed this job but could not finish it: take its push over and finish with its facts. */
  private async finishVerifiedPush(pushed: NonNullable<ClaimedJob['verifiedPush']>): Promise<JobRunOutcome> {
    this.deps.log.log('finishing the verified push of an earlier claim', { ...this.fields, ofLeaseToken: pushed.leaseToken, headSha: pushed.headSha, branch: pushed.branch });
    await this.session.start({ adoptPushOf: pushed.leaseToken });
    return this.finish(pushed.facts);
  }

  /**
   * The work of an earlier claim that died between its push and its report, on another runner or one
   * never started again under its id (docs/jobs.md, "A verified push is finished, not redone"): the
   * worktree starts from the origin's branch, and when that is a commit the earlier claim's agent
   * logged, after a passed test result, and it verifies against that claim's base, it was that claim's
   * push. Null when it is not, or nothing says so: the agent runs as usual.
   */
  private async unfinishedRunPushed(workspace: JobWorkspace, workDir: string): Promise<{ run: UnfinishedRun; headSha: string; facts: VerificationFacts } | null> {
    const run = this.job.unfinishedRun;
    const head = this.lease?.baseSha ?? null;
    if (!run || !workspace.writesCode || head === null || workspace.branch !== run.branch) return null;
    if (head === run.baseSha || !run.commits.includes(head) || run.lastTestResult !== 'PASSED') return null;
    const report = await verifyWorktree({
      worktreeDir: workDir,
      baseSha: run.baseSha,
      target: `origin/${workspace.targetBranch}`,
      partialCompletion: false,
      expectedChanges: workspace.expectedChanges.length > 0 ? workspace.expectedChanges : undefined,
    });
    const finishable = report.headSha === head && (report.result === 'ALIGNED' || report.result === 'PARTIAL') && report.newCommits.length > 0 && !report.branchMerged;
    this.deps.log.log('looked at the pushed work of an earlier claim', { ...this.fields, ofLeaseToken: run.leaseToken, headSha: head, result: report.result, takenOver: finishable });
    return finishable ? { run, headSha: head, facts: verifiedFacts(report, null) } : null;
  }

  /** Takes the earlier claim's run over (its base, branch and story log), reports its push and finishes it, without the agent. */
  private async finishUnfinishedRun(found: { run: UnfinishedRun; headSha: string; facts: VerificationFacts }): Promise<JobRunOutcome> {
    await this.session.start({ adoptRunOf: found.run.leaseToken });
    // Sent by the earlier claim, found on the origin: the job's work was pushed, though not by this claim.
    await this.session.reportPush({ branch: found.run.branch, headSha: found.headSha, pushed: true, facts: found.facts });
    return this.finish(found.facts);
  }

  private async finish(facts: VerificationFacts): Promise<JobRunOutcome> {
    this.ending = true;
    try {
      const reply = await this.session.finish(facts);
      this.deps.log.log('job finished', { ...this.fields, jobStatus: reply.jobStatus, taskStatus: reply.taskStatus, error: reply.error });
      return { kind: 'finished', reply, agentStarted: this.agentStarted };
    } catch (error) {
      // The story log is the agent's duty; a DONE refused for it goes back with the job service's own words.
      if (isGantryError(error) && refusedFinishRollsBack(error.code)) return this.rollback(`the finish was refused: ${error.message}`, 'JOB');
      throw error;
    }
  }

  /** The task's agent session for the command line; a reviewer's run is its own, not the task's. */
  private async taskSession(): Promise<AgentSession | null> {
    if (this.job.taskId === null || this.job.kind === 'REVIEW') return null;
    const { session, unanswered } = await taskSessionOf(this.deps.commands, this.job.taskId, Math.min(this.deps.config.commandTimeoutMs, 5000), this.deps.stopDeadline);
    if (unanswered !== null) this.deps.log.warn('no workflow engine answered for the task\'s session; the job runs with its own configuration', { ...this.fields, error: unanswered });
    if (session === null) return null;
    const s = session.settings;
    return { sessionId: session.sessionId, resume: session.started, permissionMode: session.permissionMode, model: s.model, thinkingBudget: s.thinkingBudget, allowedTools: s.allowedTools };
  }

  private async afterError(error: unknown): Promise<JobRunOutcome> {
    if (isGantryError(error) && claimGone(error.code)) {
      this.leaseLost ??= error.message;
    }
    try {
      // A lost claim or worktree ends the run as it says (its own hand-back, which may fail too).
      const interrupted = await this.interrupted();
      if (interrupted) return interrupted;
      const message = error instanceof Error ? error.message : String(error);
      const cause = rollbackCauseOf(error);
      // The host's failure, not the job's: the runner takes no offers for a while (docs/jobs.md, "Attempts").
      if (isHostRefusal(error)) this.hostRefused = true;
      this.deps.log.error('job run failed', { ...this.fields, error: message, code: isGantryError(error) ? error.code : undefined, cause });
      return await this.rollback(`the runner could not run the job: ${message}`, cause);
    } catch (rollbackError) {
      const reason = rollbackError instanceof Error ? rollbackError.message : String(rollbackError);
      this.deps.log.error('rollback failed; the job lease will expire', { ...this.fields, error: reason });
      return { kind: 'lease_lost', reason: `rollback failed: ${reason}`, agentStarted: this.agentStarted };
    }
  }

  private async rollback(reason: string, cause: RollbackCause, exitCode?: number): Promise<JobRunOutcome> {
    clearInterval(this.jobRenewTimer);
    this.ending = true;
    // Test-only (GANTRY_TEST_HOLD_AT): the job service goes silent between the last renewal and the hand-back.
    await holdHereIfAsked('runner:rollback');
    try {
      // A shutdown past its grace asks once, not until the lease's end, and only for what is left of the
      // stop: the process exits 1 past its stop limit, with nothing said about the claim.
      const timeoutMs = this.withinTheStop(this.deps.config.commandTimeoutMs);
      if (timeoutMs === null) return this.leftToExpire(reason, cause, stopOver());
      const reply = await this.session.rollback(reason, cause, exitCode, {
        signal: this.shutdown,
        timeoutMs,
        retryUntil: () => Math.min(this.session.leaseExpiresAt, this.deps.stopsBy()),
      });
      this.deps.log.warn('claim rolled back', { ...this.fields, reason, cause, status: reply.status, nextAttempt: reply.attempt });
    } catch (error) {
      if (isGantryError(error) && claimGone(error.code)) {
        this.leaseLost ??= error.message;
        return (await this.interrupted())!;
      }
      if (isTransient(error)) return this.rollbackUnanswered(reason, cause, exitCode, error as GantryError);
      throw error;
    }
    return { kind: 'rolled_back', reason, cause, agentStarted: this.agentStarted };
  }

  /**
   * A hand-back asked until the claim's lease could have ended and never answered: the job service
   * may have written it and lost the reply, or never have had it, and its claim may still be live
   * (a job service whose own bus was away resumes its leases when it is back). So it is asked again
   * under its key, as long as a resumed claim lives; a refusal then says the claim is over. Never
   * answered, it is left to its lease's end, which the job service handles like any lost claim: said
   * in the log and counted (`gantry_runner_claims_left_to_expire_total`), and nothing more is sent
   * under the claim. A runner stopping past its grace does not ask again: its stop has a bound of its own.
   */
  private async rollbackUnanswered(reason: string, cause: RollbackCause, exitCode: number | undefined, unanswered: GantryError): Promise<JobRunOutcome> {
    if (this.shutdown.aborted) return this.leftToExpire(reason, cause, unanswered);
    this.deps.log.warn('the claim\'s hand-back got no answer; asking again under its key', { ...this.fields, reason, cause, error: unanswered.message });
    // This is the claim's one hand-back: a claim it finds lost is not offered back once more.
    this.handBackAsked = true;
    try {
      const reply = await this.session.rollback(reason, cause, exitCode, { retryUntil: this.whileAResumedClaimLives(), signal: this.shutdown });
      this.deps.log.warn('claim rolled back', { ...this.fields, reason, cause, status: reply.status, nextAttempt: reply.attempt });
      return { kind: 'rolled_back', reason, cause, agentStarted: this.agentStarted };
    } catch (error) {
      if (!isGantryError(error)) throw error;
      if (claimGone(error.code)) {
        this.leaseLost ??= error.message;
        this.deps.log.warn('the lost claim was not handed back', { ...this.fields, code: error.code, error: error.message });
        return (await this.interrupted())!;
      }
      if (!isTransient(error)) throw error;
      return this.leftToExpire(reason, cause, error);
    }
  }

  /**
   * The runner's stop reached its deadline before this run ended (an agent's processes that outlived
   * their SIGKILL hold it): unless its end was decided already, its claim is left to its lease, said
   * in the log and counted.
   */
  overranTheStop(): void {
    if (this.outcome !== null) return;
    this.countLeftToExpire();
    this.deps.log.warn('the run had not ended at the stop\'s deadline; its claim is left to expire', { ...this.fields, stopping: true });
  }

  private countLeftToExpire(): void {
    if (this.countedLeft) return;
    this.countedLeft = true;
    countClaimLeftToExpire();
  }

  /** The hand-back never answered: the claim is left to its lease's end, said in the log and counted. */
  private leftToExpire(reason: string, cause: RollbackCause, unanswered: GantryError): JobRunOutcome {
    this.leaseLost ??= `the claim could not be handed back: ${unanswered.message}`;
    this.countLeftToExpire();
    this.deps.log.warn('the claim could not be handed back; its lease will expire', { ...this.fields, reason, cause, error: unanswered.message, stopping: this.shutdown.aborted });
    return { kind: 'lease_lost', reason: this.leaseLost, agentStarted: this.agentStarted };
  }

  /**
   * How long a try may wait: `timeoutMs`, or at a stop no longer than what is left of it. Null when
   * too little is left to ask at all.
   */
  private withinTheStop(timeoutMs: number): number | null {
    const left = this.deps.stopsBy() - Date.now();
    if (left >= timeoutMs) return timeoutMs;
    return left >= MIN_TRY_MS ? left : null;
  }

  /** A deadline for asking again: until this runner has been on NATS for a whole job lease, as long as a claim a job service resumed lives. */
  private whileAResumedClaimLives(): () => number {
    let cutOffAt = Date.now();
    return () => {
      if (!this.deps.natsConnected()) cutOffAt = Date.now();
      return cutOffAt + this.deps.config.jobLeaseMs;
    };
  }

  /**
   * Null while the claim and the worktree are this runner's; else how the run ends. A claim lost
   * without a cancel event heard may still have been cancelled: the job says so, and the stop is
   * reported all the same. A worktree lost under a claim that holds gives the claim back (DEPENDENCY).
   */
  private async interrupted(): Promise<JobRunOutcome | null> {
    const claim = await this.claimStanding();
    if (claim !== 'held') return this.claimEnded(claim);
    // The claim holds but not the worktree: the worktree service did not keep it for us (not the job's doing).
    if (this.worktreeLost !== null) return this.rollback(`the worktree lease was lost while the job ran: ${this.worktreeLost}`, 'DEPENDENCY');
    return null;
  }

  /** A cancelled run reports its stop; a lost claim reports nothing more, but its hand-back when no renewal was answered. */
  private async claimEnded(claim: 'cancelled' | 'lost'): Promise<JobRunOutcome> {
    if (claim === 'cancelled') return this.reportStopped();
    if (this.leaseUnanswered && !this.handBackAsked) {
      const handedBack = await this.handBackUnansweredClaim();
      if (handedBack) return handedBack;
    }
    this.deps.log.warn('job lease lost; reporting nothing more', { ...this.fields, reason: this.leaseLost });
    return { kind: 'lease_lost', reason: this.leaseLost!, agentStarted: this.agentStarted };
  }

  /**
   * A claim given up because no renewal was answered may still be live: a job service that lost NATS
   * too resumes it once its bus is back, and it would sit with no agent until it expired, spending an
   * attempt (docs/jobs.md, "A runner cut off from NATS"). So it is rolled back under its fencing token
   * (DEPENDENCY), asked until NATS has been back for a whole job lease — as long as a resumed claim
   * lives. Refused (the claim expired or moved on meanwhile), or never answered: null, the claim is lost.
   * The agent is gone by now and nothing else is sent under the claim: its work is not reported.
   */
  private async handBackUnansweredClaim(): Promise<JobRunOutcome | null> {
    const reason = `the runner lost NATS until its job lease could have ended and stopped the agent: ${this.leaseLost}`;
    this.ending = true;
    try {
      const reply = await this.session.rollback(reason, 'DEPENDENCY', undefined, { retryUntil: this.whileAResumedClaimLives(), signal: this.shutdown });
      this.deps.log.warn('lost claim handed back', { ...this.fields, reason, status: reply.status, nextAttempt: reply.attempt });
      return { kind: 'rolled_back', reason, cause: 'DEPENDENCY', agentStarted: this.agentStarted };
    } catch (error) {
      // A refusal changed nothing (STALE_FENCE: the claim expired or moved on), and an unanswered one leaves it to expire.
      if (!isGantryError(error)) throw error;
      if (isTransient(error)) this.countLeftToExpire();
      this.deps.log.warn('the lost claim was not handed back', { ...this.fields, code: error.code, error: error.message });
      return null;
    }
  }

  /** Whose the claim is: a claim lost without a cancel event heard may still have been cancelled — the job says so. */
  private async claimStanding(): Promise<ClaimStanding> {
    if (!this.cancelled && this.leaseLost !== null) this.cancelled = await this.wasCancelled();
    if (this.cancelled) return 'cancelled';
    return this.leaseLost !== null ? 'lost' : 'held';
  }

  private async wasCancelled(): Promise<boolean> {
    try {
      const job = await this.deps.commands.request(getJob, { jobId: this.job.jobId }, { timeoutMs: this.deps.config.commandTimeoutMs, abandon: this.deps.stopDeadline });
      return job.status === 'CANCELLED' && job.cancelledRun?.leaseToken === this.job.leaseToken;
    } catch {
      return false;
    }
  }

  private async reportStopped(): Promise<JobRunOutcome> {
    clearInterval(this.jobRenewTimer);
    this.ending = true;
    try {
      await this.session.reportStopped();
      this.deps.log.log('reported the cancelled run stopped', this.fields);
    } catch (error) {
      // Already reported (a retry after a lost reply), or the job service is unreachable: nothing else to do.
      this.deps.log.warn('could not report the cancelled run stopped', { ...this.fields, error: String(error) });
    }
    return { kind: 'cancelled', agentStarted: this.agentStarted };
  }

  /** What a restart under this runner's id must know of this run (orphaned-agents.ts), written over the last. */
  private async record(change: Partial<Pick<RunRecord, 'worktreeLease' | 'push'>>): Promise<void> {
    this.runRecord = { ...this.runRecord, ...change };
    await recordRun(this.scratch!, this.runRecord);
  }

  /** Gives the worktree lease back with its fence; the worktree service keeps it for us until then. */
  private async releaseWorktree(): Promise<void> {
    if (!this.lease) return;
    const lease = this.lease;
    // At a stop the release gets what is left of it: a worktree service that is slow or silent must not make the process exit 1.
    const maxTryMs = this.withinTheStop(Infinity);
    if (maxTryMs === null) {
      this.deps.log.warn('worktree release failed; its lease will expire', { ...this.fields, error: stopOver().message });
      return;
    }
    try {
      const until = Math.min(Math.max(this.worktreeLeaseExpiresAt, Date.now() + this.deps.config.commandTimeoutMs), this.deps.stopsBy());
      const reply = await this.worktrees.release(lease, until, maxTryMs);
      this.deps.log.log('worktree released', { ...this.fields, leaseId: lease.leaseId, status: reply.status });
    } catch (error) {
      this.deps.log.warn('worktree release failed; its lease will expire', { ...this.fields, error: String(error) });
    }
  }

  private startRenewing(): void {
    const { config, log } = this.deps;
    this.jobRenewTimer = setInterval(() => {
      if (this.renewingJob || this.leaseLost !== null || this.cancelled) return;
      this.renewingJob = true;
      this.session
        .renew(config.jobLeaseMs)
        .catch((error: unknown) => {
          // Given up at the stop's deadline: that says nothing of the lease, and the run is ending anyway.
          if (this.deps.stopDeadline.aborted) return;
          if (isGantryError(error) && claimGone(error.code)) {
            this.leaseLost ??= error.message;
            clearInterval(this.jobRenewTimer);
            this.stopAgent.abort();
            log.warn('job lease renewal refused; stopping the agent', { ...this.fields, error: error.message });
          } else if (isTransient(error)) {
            // Asked again until the lease's end (the time no job service ran aside) and never answered:
            // the lease may have run out and the job been handed to another runner. The agent does not
            // work on, and nothing more is reported or pushed under it (docs/jobs.md, "Leases and liveness").
            if (this.leaseLost === null) {
              this.leaseLost = `the job lease ran out before a renewal was answered (${(error as Error).message})`;
              this.leaseUnanswered = true;
            }
            clearInterval(this.jobRenewTimer);
            this.stopAgent.abort();
            log.warn('job lease ran out before a renewal was answered; stopping the agent', { ...this.fields, error: (error as Error).message });
          } else {
            log.warn('job lease renewal failed; retrying at the next tick', { ...this.fields, error: String(error) });
          }
        })
        .finally(() => {
          this.renewingJob = false;
        });
    }, config.leaseRenewMs);
    // Renewed until the run is over, whatever happened to the claim: the worktree is ours until we give it back.
    this.worktreeRenewTimer = setInterval(() => {
      if (!this.lease || this.renewingWorktree) return;
      const lease = this.lease;
      const renewal = ++this.renewals;
      this.renewingWorktree = true;
      this.worktrees
        .renew(lease, config.worktreeLeaseMs, renewal, this.worktreeLeaseExpiresAt)
        .then(({ expiresAt }) => {
          this.worktreeLeaseExpiresAt = Math.max(this.worktreeLeaseExpiresAt, expiresAt);
        })
        .catch((error: unknown) => {
          if (this.deps.stopDeadline.aborted) return;
          const lost = isTransient(error) || (isGantryError(error) && error.code === ErrorCode.STALE_FENCE);
          // Once the claim is being ended the worktree service may release the lease on its own: a refusal then is no loss.
          if (!lost || this.ending) {
            log.warn('worktree lease renewal failed', { ...this.fields, error: String(error) });
            return;
          }
          // Asked again until the lease's end and never answered, or refused as ended: the worktree
          // service may have rescued the worktree and handed it to the next job of its branch. The agent
          // does not work on in it, and nothing is verified or pushed from it (docs/jobs.md, "Leases and liveness").
          this.worktreeLost ??= isTransient(error) ? `the worktree lease ran out before a renewal was answered (${(error as Error).message})` : (error as Error).message;
          clearInterval(this.worktreeRenewTimer);
          this.stopAgent.abort();
          log.warn('worktree lease lost; stopping the agent', { ...this.fields, error: (error as Error).message });
        })
        .finally(() => {
          this.renewingWorktree = false;
        });
    }, config.leaseRenewMs);
  }

  /** The repository the worktree lease was asked for (a push happens only with a lease). */
  private leasedRepositoryUrl(workspace: JobWorkspace): string {
    if (!this.lease || workspace.repositoryUrl === null) {
      throw new GantryError(ErrorCode.INTERNAL, 'a push without a leased worktree of a repository');
    }
    return workspace.repositoryUrl;
  }

  /** A lease path outside the configured worktree root is not used. */
  private confined(path: string): string {
    const root = this.deps.config.worktreeRoot;
    const absolute = resolve(path);
    const rel = relative(resolve(root), absolute);
    if (rel === '' || rel.startsWith('..') || rel.startsWith(sep)) {
      // This host's worktree service and runner disagree on the root: every job would be refused here alike.
      throw hostRefusal(`the worktree service leased ${absolute}, which is outside GANTRY_WORKTREE_ROOT ${root}`);
    }
    return absolute;
  }

  /** The agent's payload file: the job's payloads merged (later wins), plus what the runner knows under `gantry`. */
  private payloadFile(workspace: JobWorkspace, baseSha: string | null, precheck: PrecheckResult | null): Record<string, unknown> {
    return {
      ...Object.assign({}, ...this.job.payloads),
      gantry: {
        jobId: this.job.jobId,
        kind: this.job.kind,
        attempt: this.job.attempt,
        leaseToken: this.job.leaseToken,
        productId: this.job.productId,
        storyId: this.job.storyId,
        sprintId: this.job.sprintId,
        taskId: this.job.taskId,
        prompts: this.job.prompts,
        payloads: this.job.payloads,
        branch: workspace.branch,
        baseSha,
        targetBranch: workspace.targetBranch,
        alreadyOnTarget: precheck?.kind === 'partial' ? { commit: precheck.commit, present: precheck.present, missing: precheck.missing } : null,
      },
    };
  }
}
