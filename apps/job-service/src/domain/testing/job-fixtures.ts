import type { JobClaimedData, JobEnqueuedData, VerificationFacts } from '@gantry/contracts';
import type { JobCommand } from '../job/commands.js';
import type { JobEvent } from '../job/events.js';

/** One job's story, built from small pieces, for the decider specifications. */
export const JOB = 'job-7b1d3c9e-2f4a-4c1b-9e7d-0a1b2c3d4e5f';
export const RUNNER = 'runner-a';
export const OTHER_RUNNER = 'runner-b';
export const BASE = '3f2c9a1b7d4e5f60718293a4b5c6d7e8f9012345';
export const OTHER_BASE = '1111111111111111111111111111111111111111';
export const HEAD = '9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a291807';
export const HASH = 'a'.repeat(64);
export const LEASE_MS = 180_000;

const T0 = Date.parse('2026-11-30T06:00:00.000Z');
/** The instant `s` seconds after the story begins. */
export const at = (s: number) => new Date(T0 + s * 1000).toISOString();

/** The job's product as an enqueue resolves it. */
export const PRODUCT = { repository: 'acme/shop', cloneUrl: 'https://github.com/acme/shop.git', targetBranch: 'main' } as const;

export function enqueued(over: Partial<JobEnqueuedData> = {}): JobEvent {
  return {
    type: 'JobEnqueued',
    data: {
      jobId: JOB,
      kind: 'TASK_IMPLEMENTATION',
      productId: 'product-42',
      storyId: 'ST-1208',
      sprintId: null,
      sprintRunId: null,
      taskId: 'T-533',
      prompt: 'Implement T-533',
      payload: { plan: 'add the migration' },
      configOverrides: { product: null, sprint: null, job: null },
      agentProfile: null,
      reason: null,
      excludeFromCoalescing: false,
      idempotencyKey: 'product-42/enqueue:T-533',
      requestHash: HASH,
      baseRef: 'feat/story-1208',
      maxAttempts: 3,
      enqueuedAt: at(0),
      repository: PRODUCT.repository,
      repositoryUrl: PRODUCT.cloneUrl,
      branch: 'feat/story-1208',
      targetBranch: PRODUCT.targetBranch,
      storyTaskIds: null,
      ...over,
    },
  };
}

export function claimed(token: number, attempt: number, atS: number, over: Partial<JobClaimedData> = {}): JobEvent {
  return {
    type: 'JobClaimed',
    data: {
      jobId: JOB,
      runnerId: RUNNER,
      leaseToken: token,
      attempt,
      leaseExpiresAt: at(atS + LEASE_MS / 1000),
      agentConfig: {
        model: 'claude-sonnet-4-6',
        thinkingBudget: 6000,
        permissionMode: 'bypassPermissions',
        allowedTools: [
          'Read', 'Glob', 'Grep', 'Edit', 'Write', 'Bash',
          'mcp__gantry__log_implementation', 'mcp__gantry__log_commit', 'mcp__gantry__log_test_result',
          'mcp__gantry__update_job_status', 'mcp__gantry__ask_question',
        ],
        maxTurns: 200,
      },
      effort: 'medium',
      agentProfileId: null,
      baseRef: 'feat/story-1208',
      baseSha: BASE,
      claimedAt: at(atS),
      ...over,
    },
  };
}

const lease = (token: number, runnerId = RUNNER) => ({ jobId: JOB, runnerId, leaseToken: token });

export const started = (token: number, atS: number): JobEvent => ({
  type: 'JobStarted',
  data: { ...lease(token), baseSha: BASE, branch: 'feat/story-1208', adoptedPushOf: null, startedAt: at(atS) },
});
export const implementationLogged = (token: number, atS: number): JobEvent => ({
  type: 'ImplementationLogged',
  data: { ...lease(token), taskId: 'T-533', branch: 'feat/story-1208', plan: 'add the migration', summary: 'Start T-533', alreadyPresent: null, loggedAt: at(atS) },
});
export const commitLogged = (token: number, atS: number): JobEvent => ({
  type: 'CommitLogged',
  data: { ...lease(token), commitSha: HEAD, message: 'feat: migration', summary: '1 file', loggedAt: at(atS) },
});
export const testResultLogged = (token: number, atS: number): JobEvent => ({
  type: 'TestResultLogged',
  data: { ...lease(token), status: 'PASSED', summary: 'all green', loggedAt: at(atS) },
});
export const pushReported = (token: number, atS: number, pushed: boolean, facts: VerificationFacts | null = null): JobEvent => ({
  type: 'JobPushReported',
  data: { ...lease(token), branch: 'feat/story-1208', headSha: HEAD, pushedAt: pushed ? at(atS) : null, facts, reportedAt: at(atS) },
});
export const leaseExpired = (token: number, attempt: number, atS: number): JobEvent => ({
  type: 'JobLeaseExpired',
  data: { ...lease(token), attempt, outcome: 'REQUEUED', nextAttempt: attempt + 1, error: null, leaseExpiresAt: at(atS), expiredAt: at(atS) },
});

export const doneFacts: VerificationFacts = {
  verifyResult: 'ALIGNED',
  newCommit: true,
  netDiff: { filesChanged: 1, insertions: 20, deletions: 0 },
  workAlreadyOnTarget: false,
  diffIdenticalToMergedBranch: false,
  failure: null,
  cancelled: false,
};

/** Every command that acts under a claim, with the given token, at the given second. */
export function fencedCommands(token: number, atS: number, runnerId = RUNNER): JobCommand[] {
  const d = { ...lease(token, runnerId), now: at(atS) };
  return [
    { type: 'RenewJobLease', data: { ...d, leaseDurationMs: LEASE_MS } },
    { type: 'StartJob', data: { ...d, baseSha: null, branch: null, adoptPushOf: null } },
    { type: 'LogImplementation', data: { ...d, taskId: null, branch: null, plan: null, summary: 'Start', alreadyPresent: null } },
    { type: 'LogCommit', data: { ...d, commitSha: HEAD, message: 'm', summary: 's' } },
    { type: 'LogTestResult', data: { ...d, status: 'PASSED', summary: 's' } },
    { type: 'ReportPush', data: { ...d, branch: 'feat/story-1208', headSha: HEAD, pushed: true, facts: null } },
    { type: 'FinishJob', data: { ...d, facts: doneFacts } },
    { type: 'RollbackClaim', data: { ...d, reason: 'agent exited 1', exitCode: 1, cause: 'JOB' } },
  ];
}

/** The EnqueueJob command that records exactly `event` (a JobEnqueued). */
export function enqueueCommandFor(event: JobEvent, product: { repository: string; cloneUrl: string; targetBranch: string } | null = PRODUCT): JobCommand {
  if (event.type !== 'JobEnqueued') throw new Error('not a JobEnqueued event');
  const { enqueuedAt, repository: _r, repositoryUrl: _u, branch, targetBranch: _t, storyTaskIds, ...rest } = event.data;
  return { type: 'EnqueueJob', data: { ...rest, branch: branch ?? null, storyTaskIds: storyTaskIds ?? null, product, now: enqueuedAt } };
}
