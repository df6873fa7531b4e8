import { mkdir, rm, writeFile } from 'node:fs/promises';
import { join, relative, resolve, sep } from 'node:path';
import { ErrorCode, GantryError, isGantryError, type ClaimedJob, type VerificationFacts, type WorktreeLeaseGrant } from '@gantry/contracts';
import type { CommandClient } from '@gantry/messaging';
import { buildAgentCommand } from '../domain/agent-command.js';
import type { PrecheckResult } from '../domain/idempotency-precheck.js';
import { agentEnvironment, runAgent, type AgentRunResult } from '../infrastructure/agent/agent-process.js';
import { CommandJobReporter } from '../infrastructure/job-service/command-job-reporter.js';
import { JobLeaseSession, type FinishReply } from '../infrastructure/job-service/job-lease-session.js';
import { startMcpToolServer, type McpToolServer } from '../infrastructure/mcp/tool-server.js';
import { writeMcpConfigFile } from '../infrastructure/mcp/mcp-config-file.js';
import { alreadyPresent, finishFacts } from '../infrastructure/verify/finish-facts.js';
import { precheckPlan } from '../infrastructure/verify/plan-precheck.js';
import { verifyWorktree } from '../infrastructure/verify/verify-worktree.js';
import { pushBranch } from '../infrastructure/worktrees/push-branch.js';
import { WorktreeLeaseClient } from '../infrastructure/worktrees/worktree-lease-client.js';
import { jobWorkspaceOf, type JobWorkspace } from './job-workspace.js';
import { recordAgentPid } from './orphaned-agents.js';
import type { RunnerConfig } from './runner-config.js';

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
}

/** How a claimed job ended on this runner. */
export type JobRunOutcome =
  | { kind: 'finished'; reply: FinishReply; agentStarted: boolean }
  | { kind: 'rolled_back'; reason: string; agentStarted: boolean }
  /** The claim was taken away (expired, cancelled, another runner's): nothing more may be reported. */
  | { kind: 'lease_lost'; reason: string; agentStarted: boolean };

const NO_DIFF = { filesChanged: 0, insertions: 0, deletions: 0 };

/**
 * One claimed job from the claim to its last report: lease a worktree, record base_sha, run the
 * pre-check, start, drive the agent through the per-job MCP tool server while renewing both leases,
 * verify against base_sha, push what is new, report the push, and finish with the facts. Every way
 * out that cannot finish rolls the claim back with its reason, so the job service requeues (or fails
 * it after its last attempt).
 */
export async function runClaimedJob(job: ClaimedJob, deps: JobRunDependencies, shutdown: AbortSignal): Promise<JobRunOutcome> {
  return new JobRun(job, deps, shutdown).run();
}

class JobRun {
  private readonly session: JobLeaseSession;
  private readonly worktrees: WorktreeLeaseClient;
  private readonly fields: Record<string, unknown>;
  private readonly stopAgent = new AbortController();
  private leaseLost: string | null = null;
  private lease: WorktreeLeaseGrant | null = null;
  private renewTimer: NodeJS.Timeout | undefined;
  private renewals = 0;
  private agentStarted = false;
  private scratch: string | null = null;
  private server: McpToolServer | null = null;

  constructor(
    private readonly job: ClaimedJob,
    private readonly deps: JobRunDependencies,
    private readonly shutdown: AbortSignal,
  ) {
    const correlationId = `${job.jobId}-attempt-${job.attempt}`;
    this.session = new JobLeaseSession(deps.commands, deps.config.runnerId, job, { timeoutMs: deps.config.commandTimeoutMs, correlationId });
    this.worktrees = new WorktreeLeaseClient(deps.commands, { correlationId });
    this.fields = { jobId: job.jobId, attempt: job.attempt, leaseToken: job.leaseToken, kind: job.kind, correlationId };
  }

  async run(): Promise<JobRunOutcome> {
    const onShutdown = () => this.stopAgent.abort();
    this.shutdown.addEventListener('abort', onShutdown, { once: true });
    this.startRenewing();
    try {
      return await this.steps();
    } catch (error) {
      return await this.afterError(error);
    } finally {
      clearInterval(this.renewTimer);
      this.shutdown.removeEventListener('abort', onShutdown);
      await this.server?.close().catch(() => undefined);
      if (this.scratch) await rm(this.scratch, { recursive: true, force: true }).catch(() => undefined);
    }
  }

  private async steps(): Promise<JobRunOutcome> {
    const { config, log } = this.deps;
    const workspace = jobWorkspaceOf(this.job, {
      repositoryUrl: config.defaultRepositoryUrl,
      targetBranch: config.defaultTargetBranch,
      agentTimeoutMs: config.agentTimeoutMs,
    });
    this.scratch = join(config.scratchDir, `${this.job.jobId}-${this.job.leaseToken}`);
    await rm(this.scratch, { recursive: true, force: true });
    await mkdir(this.scratch, { recursive: true, mode: 0o700 });

    let workDir: string;
    let baseSha: string | null = this.job.baseSha;
    if (workspace.repositoryUrl !== null && workspace.branch !== null) {
      this.lease = await this.worktrees.acquire({
        jobId: this.job.jobId,
        jobLeaseToken: this.job.leaseToken,
        repositoryUrl: workspace.repositoryUrl,
        branch: workspace.branch,
        baseRef: workspace.baseRef ?? workspace.targetBranch,
        leaseDurationMs: config.worktreeLeaseMs,
        lockTimeoutMs: config.worktreeLockTimeoutMs,
      });
      workDir = this.confined(this.lease.path);
      baseSha = this.lease.baseSha;
      log.log('worktree leased', { ...this.fields, worktreeKey: this.lease.worktreeKey, path: workDir, baseSha });
    } else {
      workDir = join(this.scratch, 'work');
      await mkdir(workDir, { recursive: true });
    }
    if (this.leaseLost) return this.lost();

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
      log: (level, message, f) => (level === 'info' ? log.log(message, f) : level === 'warn' ? log.warn(message, f) : log.error(message, f)),
    });
    const payloadPath = join(this.scratch, 'payload.json');
    const mcpConfigPath = join(this.scratch, 'mcp-config.json');
    await writeFile(payloadPath, JSON.stringify(this.payloadFile(workspace, baseSha, precheck), null, 2), { mode: 0o600 });
    await writeMcpConfigFile(mcpConfigPath, this.server);
    const command = buildAgentCommand({
      kind: this.job.kind,
      config: this.job.agentConfig,
      payloadPath,
      mcpConfigPath,
      worktreeDir: workDir,
      bin: config.agentBin,
    });

    if (this.leaseLost) return this.lost();
    if (this.shutdown.aborted) return this.rollback('the runner is shutting down before the agent started');
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
        recordAgentPid(this.scratch!, pid).catch((error: unknown) => log.warn('could not record the agent pid', { ...this.fields, error: String(error) }));
      },
    });
    await this.server.close();
    log.log('agent exited', {
      ...this.fields,
      exitCode: result.exitCode,
      signal: result.signal,
      timedOut: result.timedOut,
      aborted: result.aborted,
      tokenExpired: result.tokenExpired,
      durationMs: result.durationMs,
    });
    return this.afterAgent(result, workspace, workDir, baseSha, reporter, precheck);
  }

  private async afterAgent(
    result: AgentRunResult,
    workspace: JobWorkspace,
    workDir: string,
    baseSha: string | null,
    reporter: CommandJobReporter,
    precheck: PrecheckResult | null,
  ): Promise<JobRunOutcome> {
    if (this.leaseLost) return this.lost();
    if (result.tokenExpired) {
      const reason = `agent token expired (exit code ${result.exitCode ?? result.signal})`;
      this.deps.onTokenExpired(reason);
      return this.rollback(reason, result.exitCode ?? undefined);
    }
    if (result.aborted) return this.rollback('the runner shut down while the agent ran; the agent was stopped');
    if (result.timedOut) {
      const message = `the agent was killed at its timeout of ${workspace.timeoutMs} ms`;
      if (reporter.lastTestResult === null) {
        await this.session.logTestResult({ status: 'FAILED', summary: `No test result: ${message} before reporting one.` });
      }
      return this.finish(this.facts(workspace, { kind: 'EXCEPTION', message }));
    }
    if (result.exitCode !== 0) {
      const tail = (result.stderrTail || result.stdoutTail).trim().slice(-500);
      return this.rollback(`agent exited with code ${result.exitCode ?? result.signal} without finishing the job${tail ? `: ${tail}` : ''}`, result.exitCode ?? undefined);
    }

    const failure = agentFailure(reporter);
    if (!workspace.writesCode || !this.lease || baseSha === null) return this.finish(this.facts(workspace, failure));

    const report = await verifyWorktree({
      worktreeDir: workDir,
      baseSha,
      target: `origin/${workspace.targetBranch}`,
      partialCompletion: reporter.lastStatusUpdate?.status === 'PARTIAL' || precheck?.kind === 'partial',
      expectedChanges: workspace.expectedChanges.length > 0 ? workspace.expectedChanges : undefined,
    });
    this.deps.log.log('verified', {
      ...this.fields,
      result: report.result,
      headSha: report.headSha,
      newCommits: report.newCommits.length,
      workAlreadyOnTarget: report.workAlreadyOnTarget,
      uncommittedPaths: report.uncommittedPaths.length,
    });
    // A DONE needs the agent's story log (start, test result, commits); without it the finish is
    // refused, so pushing would only publish work of an attempt that cannot succeed.
    const log = reporter.storyLog;
    const storyLogComplete = (log.implementation > 0 || precheck?.kind === 'partial') && log.testResults && log.commits > 0;
    let pushFailure: VerificationFacts['failure'] = null;
    if (failure === null && storyLogComplete && (report.result === 'ALIGNED' || report.result === 'PARTIAL') && workspace.branch && !report.branchMerged) {
      try {
        const push = await pushBranch(workDir, workspace.branch, report.headSha);
        this.deps.log.log('branch pushed', { ...this.fields, branch: push.branch, headSha: push.headSha, pushed: push.pushed });
        await this.session.reportPush(push);
      } catch (error) {
        if (!isGantryError(error) || error.code === ErrorCode.STALE_FENCE) throw error;
        pushFailure = { kind: 'PUSH', message: bounded(error.message) };
      }
    }
    return this.finish(finishFacts(report, { failure: failure ?? pushFailure, cancelled: false }));
  }

  private facts(workspace: JobWorkspace, failure: VerificationFacts['failure']): VerificationFacts {
    return {
      verifyResult: workspace.writesCode ? 'EMPTY' : 'NOT_APPLICABLE',
      newCommit: false,
      netDiff: NO_DIFF,
      workAlreadyOnTarget: false,
      diffIdenticalToMergedBranch: false,
      failure,
      cancelled: false,
    };
  }

  /** SPEC §1 "before writing": the plan is on the target already — say where, and finish without the agent. */
  private async finishAlreadyDone(workspace: JobWorkspace, precheck: Extract<PrecheckResult, { kind: 'already_done' }>): Promise<JobRunOutcome> {
    const target = `origin/${workspace.targetBranch}`;
    await this.session.logImplementation({
      summary: `The whole plan is already on ${target}, completed by commit ${precheck.commit}: ${precheck.present.map((c) => c.path).join(', ')}. Nothing to do; the agent is not started.`,
      branch: workspace.branch ?? undefined,
      alreadyPresent: alreadyPresent(precheck) ?? undefined,
      ...(this.job.taskId ? { taskId: this.job.taskId } : {}),
    });
    await this.session.logTestResult({ status: 'PASSED', summary: `Nothing was changed: the planned work is on ${target} at ${precheck.commit}.` });
    return this.finish({
      verifyResult: 'EMPTY',
      newCommit: false,
      netDiff: NO_DIFF,
      workAlreadyOnTarget: true,
      diffIdenticalToMergedBranch: false,
      failure: null,
      cancelled: false,
    });
  }

  private async finish(facts: VerificationFacts): Promise<JobRunOutcome> {
    try {
      const reply = await this.session.finish(facts);
      this.deps.log.log('job finished', { ...this.fields, jobStatus: reply.jobStatus, taskStatus: reply.taskStatus, error: reply.error });
      return { kind: 'finished', reply, agentStarted: this.agentStarted };
    } catch (error) {
      // The story log is the agent's duty; a finish refused for it goes back with the job service's own words.
      if (isGantryError(error) && error.code === ErrorCode.PRECONDITION_FAILED) return this.rollback(`the finish was refused: ${error.message}`);
      throw error;
    }
  }

  private async afterError(error: unknown): Promise<JobRunOutcome> {
    if (isGantryError(error) && (error.code === ErrorCode.STALE_FENCE || error.code === ErrorCode.INVALID_TRANSITION)) {
      this.leaseLost ??= error.message;
      return this.lost();
    }
    if (this.leaseLost) return this.lost();
    const message = error instanceof Error ? error.message : String(error);
    this.deps.log.error('job run failed', { ...this.fields, error: message, code: isGantryError(error) ? error.code : undefined });
    try {
      return await this.rollback(`the runner could not run the job: ${message}`);
    } catch (rollbackError) {
      const reason = rollbackError instanceof Error ? rollbackError.message : String(rollbackError);
      this.deps.log.error('rollback failed; the job lease will expire', { ...this.fields, error: reason });
      return { kind: 'lease_lost', reason: `rollback failed: ${reason}`, agentStarted: this.agentStarted };
    }
  }

  private async rollback(reason: string, exitCode?: number): Promise<JobRunOutcome> {
    clearInterval(this.renewTimer);
    try {
      const reply = await this.session.rollback(reason, exitCode);
      this.deps.log.warn('claim rolled back', { ...this.fields, reason, status: reply.status, nextAttempt: reply.attempt });
    } catch (error) {
      if (isGantryError(error) && (error.code === ErrorCode.STALE_FENCE || error.code === ErrorCode.INVALID_TRANSITION)) {
        this.leaseLost ??= error.message;
        return this.lost();
      }
      throw error;
    }
    await this.releaseWorktree();
    return { kind: 'rolled_back', reason, agentStarted: this.agentStarted };
  }

  /** Only on a rollback: the job is not terminal, so the worktree service would otherwise wait for the lease to expire. */
  private async releaseWorktree(): Promise<void> {
    if (!this.lease) return;
    try {
      await this.worktrees.release(this.lease);
    } catch (error) {
      this.deps.log.warn('worktree release after rollback failed; its lease will expire', { ...this.fields, error: String(error) });
    }
  }

  private lost(): JobRunOutcome {
    this.deps.log.warn('job lease lost; reporting nothing more', { ...this.fields, reason: this.leaseLost });
    return { kind: 'lease_lost', reason: this.leaseLost ?? 'lease lost', agentStarted: this.agentStarted };
  }

  private startRenewing(): void {
    const { config, log } = this.deps;
    this.renewTimer = setInterval(() => {
      const renewal = ++this.renewals;
      this.session.renew(config.jobLeaseMs).catch((error: unknown) => {
        if (isGantryError(error) && (error.code === ErrorCode.STALE_FENCE || error.code === ErrorCode.INVALID_TRANSITION || error.code === ErrorCode.NOT_FOUND)) {
          this.leaseLost ??= error.message;
          clearInterval(this.renewTimer);
          this.stopAgent.abort();
          log.warn('job lease renewal refused; stopping the agent', { ...this.fields, error: error.message });
        } else {
          log.warn('job lease renewal failed; retrying at the next tick', { ...this.fields, error: String(error) });
        }
      });
      if (this.lease) {
        this.worktrees.renew(this.lease, config.worktreeLeaseMs, renewal).catch((error: unknown) => {
          log.warn('worktree lease renewal failed', { ...this.fields, error: String(error) });
        });
      }
    }, config.leaseRenewMs);
  }

  /** A lease path outside the configured worktree root is not used. */
  private confined(path: string): string {
    const root = this.deps.config.worktreeRoot;
    const absolute = resolve(path);
    if (root === null) return absolute;
    const rel = relative(resolve(root), absolute);
    if (rel === '' || rel.startsWith('..') || rel.startsWith(sep)) {
      throw new GantryError(ErrorCode.PRECONDITION_FAILED, `the worktree service leased ${absolute}, which is outside GANTRY_WORKTREE_ROOT ${root}`);
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

/** What the agent itself reported as failing: its test result, else its own FAILED status. */
function agentFailure(reporter: CommandJobReporter): VerificationFacts['failure'] {
  if (reporter.lastTestResult?.status === 'FAILED') return { kind: 'TEST', message: bounded(reporter.lastTestResult.summary) };
  const update = reporter.lastStatusUpdate;
  if (update?.status === 'FAILED') return { kind: 'EXCEPTION', message: bounded(update.error ?? update.summary) };
  return null;
}

function bounded(text: string): string {
  const trimmed = text.trim() || 'no details';
  return trimmed.length > 4000 ? `${trimmed.slice(0, 3997)}...` : trimmed;
}
