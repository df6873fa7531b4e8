import type {
  AgentConfig,
  AgentConfigOverride,
  AgentProfile,
  EffortLevel,
  JobKind,
  JobPayload,
  JobStatus,
  PlanCheck,
  TaskStatus,
  TerminalJobStatus,
  TestResultStatus,
  VerificationFacts,
  VerifyResult,
} from '@gantry/contracts';
import type { JobEvent } from './events.js';

/** The grant a runner holds while the job is CLAIMED or RUNNING. */
export interface ActiveLease {
  token: number;
  runnerId: string;
  expiresAt: string;
  claimedAt: string;
  /** How long the last grant (the claim or its latest renewal) ran: a lease resumed at a job service's start runs as long again. */
  durationMs: number;
}

/** How the last grant ended; decides whether a command under it is stale or merely late. */
export type LeaseEnd = 'FINISHED' | 'EXPIRED' | 'ROLLED_BACK' | 'CANCELLED';

/** A head a claim verified and pushed, with what a later attempt needs to finish it (docs/jobs.md). */
export interface VerifiedPushRecord {
  leaseToken: number;
  attempt: number;
  branch: string;
  baseSha: string | null;
  headSha: string;
  pushedAt: string | null;
  facts: VerificationFacts;
  storyLog: StoryLog;
}

/**
 * The last claim that started and logged commits, then ended without a finish and without a push
 * report: its work may be on the origin all the same (its runner died between the push and the
 * report). A later claim that finds the origin's branch at one of those commits takes it over.
 */
export interface UnfinishedRunRecord {
  leaseToken: number;
  branch: string;
  baseSha: string;
  storyLog: StoryLog;
}

export interface StoryLog {
  implementationEntries: number;
  commits: string[];
  testResults: TestResultStatus[];
}

export interface Job {
  status: JobStatus;
  jobId: string;
  kind: JobKind;
  productId: string;
  storyId: string | null;
  sprintId: string | null;
  sprintRunId: string | null;
  taskId: string | null;
  prompts: string[];
  /** Every payload the job received, the first request's and each coalesced one's. */
  payloads: JobPayload[];
  configOverrides: { product: AgentConfigOverride | null; sprint: AgentConfigOverride | null; job: AgentConfigOverride | null };
  agentProfile: AgentProfile | null;
  reason: string | null;
  excludeFromCoalescing: boolean;
  /** The enqueue key and each coalesced request's key, with their request hashes. */
  idempotencyKeys: { key: string; requestHash: string; at: string }[];
  baseRef: string | null;
  /** Resolved against the product at enqueue; null for jobs enqueued before products existed. */
  repository: string | null;
  repositoryUrl: string | null;
  targetBranch: string | null;
  /** The branch the work is pushed to, as enqueued (`branch` below is what the runner reported). */
  workBranch: string | null;
  /** The story's tasks, when the enqueue named them. */
  storyTaskIds: string[] | null;
  maxAttempts: number;
  /** The current attempt: 1 until the first requeue. */
  attempt: number;
  enqueuedAt: string;
  /** The highest fencing token ever granted; 0 before the first claim. */
  lastLeaseToken: number;
  lease: ActiveLease | null;
  lastLeaseEnd: LeaseEnd | null;
  agentConfig: AgentConfig | null;
  effort: EffortLevel | null;
  claimedAt: string | null;
  baseSha: string | null;
  branch: string | null;
  startedAt: string | null;
  /** The story log of the current attempt (a requeued attempt logs afresh). */
  storyLog: StoryLog;
  /** The current attempt's pushed head (or the one it adopted); an earlier attempt's never lingers here. */
  headSha: string | null;
  pushedAt: string | null;
  /** The last verified push of any claim, until the job ends: a later claim finishes it instead of redoing it. */
  verifiedPush: VerifiedPushRecord | null;
  /** Absent in the state of jobs folded before it existed: read as `?? null`. */
  unfinishedRun?: UnfinishedRunRecord | null;
  /** Requeues in a row that spent no attempt (the runner's or a dependency's fault): the pause before the next offer grows with them. */
  freeRequeues: number;
  /** While queued after such a requeue: the end of its pause, before which the job is neither offered nor claimed. Absent in older states: read as `?? null`. */
  offerNotBefore?: string | null;
  /** What the finishing attempt's verify found. */
  verification: { result: VerifyResult; headSha: string | null; planCheck: PlanCheck | null } | null;
  /** The claim a cancel revoked; `stoppedAt` once its runner confirmed its agent had stopped. */
  cancelledRun: { runnerId: string; leaseToken: number; stoppedAt: string | null } | null;
  taskStatus: TaskStatus | null;
  error: string | null;
  finishedAt: string | null;
}

export type JobState = { status: 'ABSENT' } | Job;

export const initialJobState: JobState = { status: 'ABSENT' };

export function jobExists(state: JobState): state is Job {
  return state.status !== 'ABSENT';
}

/** When a queued job's pause after a hand-back that kept its attempt ends; null when it may be claimed at once, or is not queued. */
export function pauseEndOf(job: Job): string | null {
  return job.status === 'QUEUED' ? (job.offerNotBefore ?? null) : null;
}


/** Kinds whose finish moves a task: the ones that write code for it. */
export function movesTask(job: Pick<Job, 'kind' | 'taskId'>): boolean {
  return job.taskId !== null && (job.kind === 'TASK_IMPLEMENTATION' || job.kind === 'SPRINT_IMPLEMENTATION');
}

const emptyStoryLog = (): Job['storyLog'] => ({ implementationEntries: 0, commits: [], testResults: [] });

export function evolveJob(state: JobState, event: JobEvent): JobState {
  if (event.type === 'JobEnqueued') {
    const d = event.data;
    return {
      status: 'QUEUED',
      jobId: d.jobId,
      kind: d.kind,
      productId: d.productId,
      storyId: d.storyId,
      sprintId: d.sprintId,
      sprintRunId: d.sprintRunId,
      taskId: d.taskId,
      prompts: d.prompt === null ? [] : [d.prompt],
      payloads: d.payload === null ? [] : [d.payload],
      configOverrides: d.configOverrides,
      agentProfile: d.agentProfile,
      reason: d.reason,
      excludeFromCoalescing: d.excludeFromCoalescing,
      idempotencyKeys: [{ key: d.idempotencyKey, requestHash: d.requestHash, at: d.enqueuedAt }],
      baseRef: d.baseRef,
      repository: d.repository ?? null,
      repositoryUrl: d.repositoryUrl ?? null,
      targetBranch: d.targetBranch ?? null,
      workBranch: d.branch ?? null,
      storyTaskIds: d.storyTaskIds ?? null,
      maxAttempts: d.maxAttempts,
      attempt: 1,
      enqueuedAt: d.enqueuedAt,
      lastLeaseToken: 0,
      lease: null,
      lastLeaseEnd: null,
      agentConfig: null,
      effort: null,
      claimedAt: null,
      baseSha: null,
      branch: null,
      startedAt: null,
      storyLog: emptyStoryLog(),
      headSha: null,
      pushedAt: null,
      verifiedPush: null,
      freeRequeues: 0,
      offerNotBefore: null,
      verification: null,
      cancelledRun: null,
      taskStatus: null,
      error: null,
      finishedAt: null,
    };
  }
  if (!jobExists(state)) return state;
  switch (event.type) {
    case 'JobCoalesced': {
      const d = event.data;
      return {
        ...state,
        prompts: d.prompt === null ? state.prompts : [...state.prompts, d.prompt],
        payloads: d.payload === null ? state.payloads : [...state.payloads, d.payload],
        idempotencyKeys: [...state.idempotencyKeys, { key: d.idempotencyKey, requestHash: d.requestHash, at: d.coalescedAt }],
      };
    }
    case 'JobClaimed': {
      const d = event.data;
      return {
        ...state,
        status: 'CLAIMED',
        attempt: d.attempt,
        lastLeaseToken: d.leaseToken,
        lease: { token: d.leaseToken, runnerId: d.runnerId, expiresAt: d.leaseExpiresAt, claimedAt: d.claimedAt, durationMs: msBetween(d.claimedAt, d.leaseExpiresAt) },
        lastLeaseEnd: null,
        agentConfig: d.agentConfig,
        effort: d.effort,
        claimedAt: d.claimedAt,
        baseSha: d.baseSha,
        branch: null,
        startedAt: null,
        storyLog: emptyStoryLog(),
        // a new attempt shows its own push, or the one it adopts at its start
        headSha: null,
        pushedAt: null,
        offerNotBefore: null,
      };
    }
    case 'JobLeaseRenewed':
      return state.lease
        ? { ...state, lease: { ...state.lease, expiresAt: event.data.leaseExpiresAt, durationMs: msBetween(event.data.renewedAt, event.data.leaseExpiresAt) } }
        : state;
    case 'JobStarted': {
      const adoptedRun = event.data.adoptedRunOf ? (state.unfinishedRun ?? null) : null;
      if (adoptedRun) {
        return { ...state, status: 'RUNNING', baseSha: adoptedRun.baseSha, branch: adoptedRun.branch, startedAt: event.data.startedAt, storyLog: adoptedRun.storyLog };
      }
      const adopted = event.data.adoptedPushOf ? state.verifiedPush : null;
      const startedState: Job = {
        ...state,
        status: 'RUNNING',
        baseSha: event.data.baseSha ?? state.baseSha,
        branch: event.data.branch ?? state.branch,
        startedAt: event.data.startedAt,
      };
      return adopted
        ? { ...startedState, headSha: adopted.headSha, pushedAt: adopted.pushedAt, storyLog: adopted.storyLog }
        : startedState;
    }
    case 'ImplementationLogged':
      return {
        ...state,
        branch: state.branch ?? event.data.branch,
        storyLog: { ...state.storyLog, implementationEntries: state.storyLog.implementationEntries + 1 },
      };
    case 'CommitLogged':
      return { ...state, storyLog: { ...state.storyLog, commits: [...state.storyLog.commits, event.data.commitSha] } };
    case 'TestResultLogged':
      return { ...state, storyLog: { ...state.storyLog, testResults: [...state.storyLog.testResults, event.data.status] } };
    case 'JobPushReported': {
      const d = event.data;
      // A later report that pushed nothing does not erase an earlier real push.
      const pushedAt = d.pushedAt ?? state.pushedAt;
      return {
        ...state,
        headSha: d.headSha,
        pushedAt,
        verifiedPush: d.facts
          ? { leaseToken: d.leaseToken, attempt: state.attempt, branch: d.branch, baseSha: state.baseSha, headSha: d.headSha, pushedAt, facts: d.facts, storyLog: state.storyLog }
          : (state.verifiedPush ?? null),
      };
    }
    case 'JobFinished':
      return {
        ...state,
        status: event.data.jobStatus,
        lease: null,
        lastLeaseEnd: 'FINISHED',
        taskStatus: event.data.taskStatus,
        error: event.data.error,
        finishedAt: event.data.finishedAt,
        // Only a finish whose facts name the head verify looked at ran verify (a timeout, say, did not).
        verification: event.data.facts.headSha
          ? { result: event.data.facts.verifyResult, headSha: event.data.facts.headSha, planCheck: event.data.facts.planCheck ?? null }
          : null,
      };
    case 'JobClaimRolledBack':
    case 'JobLeaseExpired': {
      const d = event.data;
      const end: LeaseEnd = event.type === 'JobLeaseExpired' ? 'EXPIRED' : 'ROLLED_BACK';
      const at = event.type === 'JobLeaseExpired' ? event.data.expiredAt : event.data.rolledBackAt;
      const nextAttempt = d.nextAttempt ?? state.attempt + 1;
      return d.outcome === 'REQUEUED'
        ? {
            ...state,
            status: 'QUEUED',
            attempt: nextAttempt,
            lease: null,
            lastLeaseEnd: end,
            startedAt: null,
            unfinishedRun: unfinishedRunOf(state),
            freeRequeues: nextAttempt === d.attempt ? (state.freeRequeues ?? 0) + 1 : 0,
            offerNotBefore: event.type === 'JobClaimRolledBack' ? (event.data.offerNotBefore ?? null) : null,
          }
        : {
            ...state,
            status: 'FAILED',
            lease: null,
            lastLeaseEnd: end,
            error: d.error,
            taskStatus: movesTask(state) ? 'IN_PROGRESS' : null,
            finishedAt: at,
          };
    }
    case 'JobChecksFailed':
      return { ...state, status: 'FAILED', taskStatus: event.data.taskStatus, error: event.data.error };
    case 'JobCancelled':
      return {
        ...state,
        status: 'CANCELLED',
        lease: null,
        lastLeaseEnd: state.lease ? 'CANCELLED' : state.lastLeaseEnd,
        cancelledRun: state.lease ? { runnerId: state.lease.runnerId, leaseToken: state.lease.token, stoppedAt: null } : null,
        taskStatus: event.data.taskStatus,
        error: null,
        finishedAt: event.data.cancelledAt,
      };
    case 'JobRunStopped':
      return state.cancelledRun ? { ...state, cancelledRun: { ...state.cancelledRun, stoppedAt: event.data.stoppedAt } } : state;
    default:
      return assertNever(event);
  }
}

function assertNever(value: never): never {
  throw new Error(`unhandled job event ${JSON.stringify(value)}`);
}

function msBetween(from: string, to: string): number {
  return Math.max(0, Date.parse(to) - Date.parse(from));
}

/** The claim that ends now, if it started, logged commits and reported no push; else the one known before. */
function unfinishedRunOf(state: Job): UnfinishedRunRecord | null {
  if (state.startedAt !== null && state.baseSha !== null && state.branch !== null && state.headSha === null && state.storyLog.commits.length > 0) {
    return { leaseToken: state.lastLeaseToken, branch: state.branch, baseSha: state.baseSha, storyLog: state.storyLog };
  }
  return state.unfinishedRun ?? null;
}
