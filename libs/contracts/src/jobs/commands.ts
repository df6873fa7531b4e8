import { z } from 'zod';
import { CommandMetaSchema } from '../envelope.js';
import { ErrorCode, isGantryError, type GantryError } from '../errors.js';
import { defineCommand } from '../registry.js';
import { AgentConfigOverrideSchema, AgentConfigSchema, AgentProfileSchema, EffortLevelSchema, JobKindSchema, RequestedAllowedToolSchema, RequestedModelSchema } from './agent-config.js';
import { AlreadyPresentSchema, jobExampleIds } from './events.js';
import { CloneUrlSchema, RepositorySchema } from './products.js';
import { BaseRefSchema, BranchNameSchema, LeasedBranchNameSchema } from '../worktrees/git-names.js';
import { jsonBytes, jsonBytesAtMost, MAX_JOB_INPUT_BYTES, MAX_JOB_REQUEST_BYTES, tooLargeMessage } from './sizes.js';
import {
  EnqueueOutcomeSchema,
  GitRefSchema,
  GitShaSchema,
  IdempotencyKeySchema,
  JobIdSchema,
  JobPayloadSchema,
  JobStatusSchema,
  LeaseTokenSchema,
  ExternalRefSchema,
  RollbackCauseSchema,
  RunnerIdSchema,
  SprintRunIdSchema,
  TaskStatusSchema,
  TerminalJobStatusSchema,
  TestResultStatusSchema,
  TimestampSchema,
  VerificationFactsSchema,
  aboutItsJob,
} from './values.js';

/** Fields of every command that acts under a claim: the holder and its fencing token. */
const fenced = {
  jobId: JobIdSchema,
  runnerId: RunnerIdSchema,
  leaseToken: LeaseTokenSchema,
};
const fencedExample = { jobId: jobExampleIds.jobId, runnerId: jobExampleIds.runnerId, leaseToken: 1 };

/** Bounds on a requested lease: long enough to renew every 60 s, short enough to notice a dead runner. */
export const JobLeaseDurationMsSchema = z.number().int().min(10_000).max(2 * 60 * 60 * 1000);

const JobRefReply = z.object({ jobId: JobIdSchema, status: JobStatusSchema });

/**
 * One level of the configuration cascade as a request may give it: its tools become one argument of
 * the agent's command line, which the system bounds (128 KiB on Linux), so they are bounded here.
 */
export const RequestedConfigOverrideSchema = AgentConfigOverrideSchema.extend({
  model: RequestedModelSchema.optional(),
  // The rule every runner holds the command line to (buildAgentCommand): refused here, not at each claim.
  allowedTools: z.array(RequestedAllowedToolSchema).max(100).optional(),
});
/** The agent profile as a request may give it: its model becomes the job's, as one of the cascade's. */
const RequestedAgentProfileSchema = AgentProfileSchema.extend({ model: RequestedModelSchema });

// ---------------------------------------------------------------------------------------------
// enqueue_job

/**
 * How long the run queue answers a repeat of an enqueue's idempotency key with the job it made (its
 * receipt's window; fixed). A caller's last try of an enqueue must reach it within this window of the
 * first (docs/architecture.md, "How late a command comes again").
 */
export const ENQUEUE_IDEMPOTENCY_WINDOW_MS = 24 * 60 * 60 * 1000;

export const EnqueueJobRequestSchema = CommandMetaSchema.extend({
  kind: JobKindSchema,
  productId: ExternalRefSchema,
  storyId: ExternalRefSchema.optional(),
  sprintId: ExternalRefSchema.optional(),
  sprintRunId: SprintRunIdSchema.optional(),
  taskId: ExternalRefSchema.optional(),
  prompt: z.string().min(1).max(100_000).optional(),
  payload: JobPayloadSchema.optional(),
  /** The configuration cascade below the kind defaults: product → sprint → job. */
  configOverrides: z
    .object({
      product: RequestedConfigOverrideSchema.optional(),
      sprint: RequestedConfigOverrideSchema.optional(),
      job: RequestedConfigOverrideSchema.optional(),
    })
    .optional(),
  agentProfile: RequestedAgentProfileSchema.optional(),
  reason: z.string().min(1).max(200).optional(),
  /** Suppresses a repeat of this request for 24 h (the reply then names the existing job). */
  idempotencyKey: IdempotencyKeySchema,
  /** Runs queued by an on_enter action are never coalesced; a discrete field, never encoded in the key. */
  excludeFromCoalescing: z.boolean().default(false),
  /**
   * The branch the work starts from; the runner resolves base_sha from it. Like `branch`, held to the
   * names the worktree service and the runners accept (`baseRefProblem`, `branchNameProblem`): a name
   * they refuse would be queued here and fail every claim of the job. Events and views keep
   * GitRefSchema, so what was queued before still reads back from the log.
   */
  baseRef: BaseRefSchema.optional(),
  /**
   * The branch the work is committed and pushed to (its pull request's head); else the base ref. It is
   * the branch of the job's worktree lease, so it is held to the lease's names too (not a folder of the
   * rescue branches; and, by the job service with its product's repository, not in the rescue folder
   * of one of that repository's worktree keys: rescueFolderProblem).
   */
  branch: LeasedBranchNameSchema.optional(),
  /**
   * Every task of the job's story, this one included: the story's pull request merges only when each
   * of them is done (docs/products.md). Without it the story is this one task.
   */
  storyTaskIds: z.array(ExternalRefSchema).min(1).max(500).optional(),
  maxAttempts: z.number().int().min(1).max(20).optional(),
})
  .refine((r) => r.kind !== 'REVIEW' || r.agentProfile !== undefined, {
    message: 'a REVIEW job takes its model and thinking budget from an agent profile, so agentProfile is required',
    path: ['agentProfile'],
  })
  .refine((r) => r.storyTaskIds === undefined || (r.storyId !== undefined && r.taskId !== undefined && r.storyTaskIds.includes(r.taskId)), {
    message: "storyTaskIds lists a story's tasks: the job names its story and its task, and the task is one of them",
    path: ['storyTaskIds'],
  })
  .refine((r) => r.storyTaskIds === undefined || new Set(r.storyTaskIds).size === r.storyTaskIds.length, {
    message: 'story task ids are distinct',
    path: ['storyTaskIds'],
  })
  .superRefine((r, ctx) => {
    // Each part is written out once, the prompt only when its largest possible size would not fit;
    // the fields not measured here are bounded by their schemas.
    const { prompt, payload, ...rest } = r;
    const payloadBytes = jsonBytes(payload);
    const restBytes = jsonBytes(rest);
    let promptBytes = prompt === undefined ? 0 : jsonBytesAtMost(prompt);
    if (promptBytes + payloadBytes > MAX_JOB_INPUT_BYTES || promptBytes + payloadBytes + restBytes > MAX_JOB_REQUEST_BYTES) promptBytes = jsonBytes(prompt);
    const input = promptBytes + payloadBytes;
    if (input > MAX_JOB_INPUT_BYTES) {
      const path = promptBytes > payloadBytes ? ['prompt'] : ['payload'];
      ctx.addIssue({ code: 'custom', path, message: tooLargeMessage("the job's prompt and payload", input, MAX_JOB_INPUT_BYTES, 'MAX_JOB_INPUT_BYTES') });
      return;
    }
    const bytes = input + restBytes;
    if (bytes > MAX_JOB_REQUEST_BYTES) ctx.addIssue({ code: 'custom', path: [], message: tooLargeMessage('the enqueue request', bytes, MAX_JOB_REQUEST_BYTES, 'MAX_JOB_REQUEST_BYTES') });
  });

export const enqueueJob = defineCommand({
  context: 'jobs',
  name: 'enqueue_job',
  request: EnqueueJobRequestSchema,
  reply: z.object({
    jobId: JobIdSchema,
    /** created: a new job; deduplicated: the key was seen within 24 h; coalesced: appended to a queued job. */
    outcome: EnqueueOutcomeSchema,
    status: JobStatusSchema,
  }),
  examples: {
    valid: [
      {
        kind: 'TASK_IMPLEMENTATION', productId: 'product-42', storyId: 'ST-1208', taskId: 'T-533',
        prompt: 'Implement T-533', payload: { plan: 'add the migration' }, baseRef: 'feat/story-1208',
        idempotencyKey: 'product-42/enqueue:task-T-533-attempt-1',
      },
      {
        kind: 'REVIEW', productId: 'product-42', taskId: 'T-533', reason: 'review_started',
        agentProfile: { id: 'profile-reviewer', model: 'claude-opus-4-7', thinkingBudget: 12000 },
        idempotencyKey: 'product-42/queue_run:0f3c5e7a9b1d', excludeFromCoalescing: true,
      },
      {
        kind: 'TASK_IMPLEMENTATION', productId: 'product-42', storyId: 'ST-1208', taskId: 'T-534', storyTaskIds: ['T-533', 'T-534'],
        baseRef: 'main', branch: 'feat/story-1208', idempotencyKey: 'product-42/enqueue:task-T-534-attempt-1',
      },
    ],
    invalid: [
      // REVIEW without an agent profile has no model to run
      { kind: 'REVIEW', productId: 'product-42', idempotencyKey: 'product-42/queue_run:1' },
      // an e-mail address in the key is personal data
      { kind: 'PLAN_CHAT', productId: 'product-42', idempotencyKey: 'alice@example.com:chat' },
      // the key must be scoped: <scope>:<key>
      { kind: 'PLAN_CHAT', productId: 'product-42', idempotencyKey: 'just-a-key' },
      // the story's tasks must include the job's own task
      { kind: 'TASK_IMPLEMENTATION', productId: 'product-42', storyId: 'ST-1', taskId: 'T-9', storyTaskIds: ['T-1', 'T-2'], idempotencyKey: 'p/enqueue:1' },
      // 50,000 control characters are 300,002 bytes as JSON: over MAX_JOB_INPUT_BYTES
      { kind: 'PLAN_CHAT', productId: 'product-42', prompt: '\u0001'.repeat(50_000), idempotencyKey: 'p/enqueue:1' },
      // 500 story tasks of 200 control characters each: the request is over MAX_JOB_REQUEST_BYTES
      {
        kind: 'TASK_IMPLEMENTATION', productId: 'product-42', storyId: 'ST-1', taskId: 'T-0',
        storyTaskIds: Array.from({ length: 500 }, (_, i) => `T-${i}`.padEnd(200, '\u0001')).map((id, i) => (i === 0 ? 'T-0' : id)),
        idempotencyKey: 'p/enqueue:1',
      },
      // a job's tools are one argument of the agent's command line: at most 100
      { kind: 'PLAN_CHAT', productId: 'product-42', configOverrides: { job: { allowedTools: Array.from({ length: 101 }, (_, i) => `Tool${i}`) } }, idempotencyKey: 'p/enqueue:1' },
      // a model name is at most 200 characters, the agent profile's too
      { kind: 'REVIEW', productId: 'product-42', agentProfile: { id: 'profile-reviewer', model: 'm'.repeat(201), thinkingBudget: 0 }, idempotencyKey: 'p/enqueue:1' },
      // git takes no branch whose name ends with ".lock": every claim of the job would fail at its worktree
      { kind: 'TASK_IMPLEMENTATION', productId: 'product-42', branch: 'story/ST-1.lock', idempotencyKey: 'p/enqueue:1' },
      // nor a branch that is the folder of the worktrees' rescue branches: every release of a dirty worktree would fail
      { kind: 'TASK_IMPLEMENTATION', productId: 'product-42', branch: 'gantry/rescue', idempotencyKey: 'p/enqueue:1' },
      // nor a base ref "HEAD"
      { kind: 'TASK_IMPLEMENTATION', productId: 'product-42', baseRef: 'HEAD', idempotencyKey: 'p/enqueue:1' },
      // the command line's list would read two tools where one was configured
      { kind: 'PLAN_CHAT', productId: 'product-42', configOverrides: { product: { allowedTools: ['Read,Write'] } }, idempotencyKey: 'p/enqueue:1' },
      // a model name that the agent CLI would read as an option
      { kind: 'PLAN_CHAT', productId: 'product-42', configOverrides: { job: { model: '--dangerously-skip-permissions' } }, idempotencyKey: 'p/enqueue:1' },
    ],
  },
});

// ---------------------------------------------------------------------------------------------
// claim_job

/**
 * A head an earlier attempt verified and pushed but could not finish (e.g. the job service did not
 * answer its finish): the claim that gets it finishes the job with these facts instead of running the
 * agent again (docs/jobs.md, "A verified push is finished, not redone").
 */
export const VerifiedPushSchema = z.object({
  /** The lease token of the claim that pushed. */
  leaseToken: LeaseTokenSchema,
  attempt: z.number().int().positive(),
  branch: GitRefSchema,
  baseSha: GitShaSchema.nullable(),
  headSha: GitShaSchema,
  pushedAt: TimestampSchema.nullable(),
  facts: VerificationFactsSchema,
});
export type VerifiedPush = z.infer<typeof VerifiedPushSchema>;

/**
 * The last earlier claim that started and logged commits but neither finished nor reported a push
 * (its runner died, say, between its push and its report, and was not started again under its id).
 * When the origin's branch is at one of the commits it logged, its work was pushed: the claim that gets
 * it verifies that work against the earlier base and finishes it instead of running the agent again on
 * top of it (docs/jobs.md, "A verified push is finished, not redone").
 */
export const UnfinishedRunSchema = z.object({
  /** The lease token of the earlier claim. */
  leaseToken: LeaseTokenSchema,
  branch: GitRefSchema,
  baseSha: GitShaSchema,
  /** The commits its agent logged (log_commit), in order. */
  commits: z.array(GitShaSchema),
  /** The last test result its agent logged; null when it logged none. */
  lastTestResult: TestResultStatusSchema.nullable(),
});
export type UnfinishedRun = z.infer<typeof UnfinishedRunSchema>;

export const ClaimedJobSchema = z.object({
  jobId: JobIdSchema,
  kind: JobKindSchema,
  productId: ExternalRefSchema,
  storyId: ExternalRefSchema.nullable(),
  sprintId: ExternalRefSchema.nullable(),
  sprintRunId: SprintRunIdSchema.nullable(),
  taskId: ExternalRefSchema.nullable(),
  prompts: z.array(z.string()),
  payloads: z.array(JobPayloadSchema),
  leaseToken: LeaseTokenSchema,
  leaseExpiresAt: TimestampSchema,
  attempt: z.number().int().positive(),
  agentConfig: AgentConfigSchema,
  /** --effort for the CLI; null means no flag. maxTurns is in agentConfig for the record and is never passed on. */
  effort: EffortLevelSchema.nullable(),
  baseRef: GitRefSchema.nullable(),
  baseSha: GitShaSchema.nullable(),
  /** The product's repository (`owner/name`) and where to clone it; null only for jobs enqueued before products existed. */
  repository: RepositorySchema.nullable(),
  repositoryUrl: CloneUrlSchema.nullable(),
  /** The branch the work is committed and pushed to. */
  branch: GitRefSchema.nullable(),
  /** Where the work must end up (the product's target branch): the pre-check and verify compare with it. */
  targetBranch: GitRefSchema.nullable(),
  /** An earlier attempt's verified push, to be finished by this claim; null when there is none. */
  verifiedPush: VerifiedPushSchema.nullable().default(null),
  /** An earlier claim's unfinished run, whose work may be on the origin already; null when there is none. */
  unfinishedRun: UnfinishedRunSchema.nullable().default(null),
});
export type ClaimedJob = z.infer<typeof ClaimedJobSchema>;

export const claimJob = defineCommand({
  context: 'jobs',
  name: 'claim_job',
  // The runner's next commands are about the job it got.
  affinity: { request: (request) => request.jobId, reply: (reply) => (reply.claimed ? reply.job.jobId : undefined) },
  request: CommandMetaSchema.extend({
    runnerId: RunnerIdSchema,
    /** The kinds this runner can run. */
    kinds: z.array(JobKindSchema).min(1),
    /** The offered job; without it the oldest queued job of the kinds is claimed. */
    jobId: JobIdSchema.optional(),
    /** The base commit, when the runner resolved the offer's base ref before claiming. */
    baseSha: GitShaSchema.optional(),
    leaseDurationMs: JobLeaseDurationMsSchema.optional(),
    /** A retry after a lost reply returns the same lease, not a second claim. */
    idempotencyKey: IdempotencyKeySchema,
  }),
  reply: z.discriminatedUnion('claimed', [
    z.object({
      claimed: z.literal(true),
      job: ClaimedJobSchema,
      /**
       * What is left of the claim's lease by the job service's clock as it answers — reckoned at every
       * answer, so also for a claim asked again under its key, whose lease may have been granted, or
       * resumed at a start, long before. A runner counts it from when it sent the try that got the
       * answer, never reading `leaseExpiresAt` against its own clock (docs/jobs.md, "A runner's clock").
       * Absent from a job service that does not say.
       */
      leaseExpiresInMs: z.number().int().nonnegative().optional(),
    }),
    z.object({ claimed: z.literal(false) }),
  ]),
  examples: {
    valid: [
      {
        runnerId: jobExampleIds.runnerId, kinds: ['TASK_IMPLEMENTATION', 'SPRINT_IMPLEMENTATION'], jobId: jobExampleIds.jobId,
        idempotencyKey: 'runner-host1-01/claim:job-7b1d3c9e-offer-1',
      },
      { runnerId: jobExampleIds.runnerId, kinds: ['REVIEW'], leaseDurationMs: 180_000, idempotencyKey: 'runner-host1-01/claim:poll-88' },
    ],
    invalid: [
      // a runner that can run no kind cannot claim anything
      { runnerId: jobExampleIds.runnerId, kinds: [], idempotencyKey: 'r/claim:1' },
      // a runner id is one subject token: no dots
      { runnerId: 'runner.host1', kinds: ['REVIEW'], idempotencyKey: 'r/claim:1' },
      // a lease of one second cannot be renewed in time
      { runnerId: jobExampleIds.runnerId, kinds: ['REVIEW'], leaseDurationMs: 1000, idempotencyKey: 'r/claim:1' },
    ],
  },
});

/**
 * The moment from which a job may be claimed, when a `claim_job` was refused because the job is still
 * in its pause after a hand-back (`PRECONDITION_FAILED` with `details.offerNotBefore`, docs/jobs.md
 * "Attempts"); null for every other answer. Such a refusal holds only until then.
 */
export function claimableFrom(error: unknown): string | null {
  if (!isGantryError(error) || error.code !== ErrorCode.PRECONDITION_FAILED) return null;
  const notBefore = error.details?.offerNotBefore;
  return typeof notBefore === 'string' ? notBefore : null;
}

/**
 * How long from its answer a claim refused for the job's pause is refused for (`details.retryAfterMs`,
 * reckoned by the job service from its own clock: the pause's end less the claim's moment), so that a
 * claimer whose clock is off from the job service's waits for what is left of the pause. Null for every
 * other answer, and from a job service that does not say (then only `offerNotBefore` is known).
 */
export function claimableAfterMs(error: unknown): number | null {
  if (claimableFrom(error) === null) return null;
  const after = (error as GantryError).details?.retryAfterMs;
  return typeof after === 'number' && Number.isFinite(after) ? after : null;
}

// ---------------------------------------------------------------------------------------------
// renew_job_lease

export const renewJobLease = defineCommand({
  context: 'jobs',
  name: 'renew_job_lease',
  affinity: aboutItsJob,
  request: CommandMetaSchema.extend({ ...fenced, leaseDurationMs: JobLeaseDurationMsSchema.optional() }),
  reply: z.object({ jobId: JobIdSchema, leaseToken: LeaseTokenSchema, leaseExpiresAt: TimestampSchema }),
  examples: {
    valid: [{ ...fencedExample }, { ...fencedExample, leaseDurationMs: 180_000 }],
    // the fencing token is a whole number
    invalid: [{ ...fencedExample, leaseToken: '1' }, { jobId: jobExampleIds.jobId, runnerId: jobExampleIds.runnerId }],
  },
});

// ---------------------------------------------------------------------------------------------
// start_job

export const startJob = defineCommand({
  context: 'jobs',
  name: 'start_job',
  affinity: aboutItsJob,
  request: CommandMetaSchema.extend({
    ...fenced,
    /** base_sha as resolved in the worktree; must equal the claim's if the claim recorded one. */
    baseSha: GitShaSchema.optional(),
    branch: BranchNameSchema.optional(),
    /** Take over the verified push of the claim with this lease token (the claim reply's verifiedPush) and only finish it. */
    adoptPushOf: LeaseTokenSchema.optional(),
    /**
     * Take over the work of the earlier claim with this lease token (the claim reply's unfinishedRun),
     * found pushed on the origin: its base, branch and story log become this attempt's.
     */
    adoptRunOf: LeaseTokenSchema.optional(),
    idempotencyKey: IdempotencyKeySchema,
  }),
  reply: JobRefReply,
  examples: {
    valid: [
      { ...fencedExample, baseSha: jobExampleIds.baseSha, branch: 'feat/story-1208', idempotencyKey: 'product-42/start:job-7b1d3c9e-1' },
      { ...fencedExample, leaseToken: 3, adoptPushOf: 2, idempotencyKey: 'product-42/start:job-7b1d3c9e-3' },
      { ...fencedExample, leaseToken: 3, adoptRunOf: 2, idempotencyKey: 'product-42/start:job-7b1d3c9e-3' },
    ],
    // a start under a claim carries its token
    invalid: [{ jobId: jobExampleIds.jobId, runnerId: jobExampleIds.runnerId, idempotencyKey: 'p/start:1' }],
  },
});

// ---------------------------------------------------------------------------------------------
// the story log: log_implementation, log_commit, log_test_result

export const logImplementation = defineCommand({
  context: 'jobs',
  name: 'log_implementation',
  affinity: aboutItsJob,
  request: CommandMetaSchema.extend({
    ...fenced,
    taskId: ExternalRefSchema.optional(),
    branch: BranchNameSchema.optional(),
    plan: z.string().max(20_000).optional(),
    summary: z.string().min(1).max(20_000),
    /** The idempotency pre-check found the work (partly) on the target already. */
    alreadyPresent: AlreadyPresentSchema.optional(),
    idempotencyKey: IdempotencyKeySchema,
  }),
  reply: JobRefReply,
  examples: {
    valid: [
      {
        ...fencedExample, taskId: 'T-533', branch: 'feat/story-1208', plan: 'add the migration',
        summary: 'Start implementation of T-533 on feat/story-1208.', idempotencyKey: 'product-42/log:job-7b1d3c9e-impl-1',
      },
    ],
    // a story-log entry says something
    invalid: [{ ...fencedExample, summary: '', idempotencyKey: 'p/log:1' }],
  },
});

export const logCommit = defineCommand({
  context: 'jobs',
  name: 'log_commit',
  affinity: aboutItsJob,
  request: CommandMetaSchema.extend({
    ...fenced,
    commitSha: GitShaSchema,
    message: z.string().min(1).max(10_000),
    summary: z.string().min(1).max(20_000),
    idempotencyKey: IdempotencyKeySchema,
  }),
  reply: JobRefReply,
  examples: {
    valid: [{ ...fencedExample, commitSha: jobExampleIds.headSha, message: 'feat: add migration', summary: '1 file added', idempotencyKey: 'p/log:commit-9e8d7c6b' }],
    // the hash is the full object id
    invalid: [{ ...fencedExample, commitSha: 'HEAD', message: 'x', summary: 'x', idempotencyKey: 'p/log:1' }],
  },
});

export const logTestResult = defineCommand({
  context: 'jobs',
  name: 'log_test_result',
  affinity: aboutItsJob,
  request: CommandMetaSchema.extend({
    ...fenced,
    status: TestResultStatusSchema,
    summary: z.string().min(1).max(20_000),
    idempotencyKey: IdempotencyKeySchema,
  }),
  reply: JobRefReply,
  examples: {
    valid: [{ ...fencedExample, status: 'FAILED', summary: '2 tests failing in cart.spec.ts', idempotencyKey: 'p/log:test-1' }],
    // PASSED or FAILED, nothing in between
    invalid: [{ ...fencedExample, status: 'SKIPPED', summary: 'x', idempotencyKey: 'p/log:1' }],
  },
});

// ---------------------------------------------------------------------------------------------
// report_push

export const reportPush = defineCommand({
  context: 'jobs',
  name: 'report_push',
  affinity: aboutItsJob,
  request: CommandMetaSchema.extend({
    ...fenced,
    branch: BranchNameSchema,
    headSha: GitShaSchema,
    /** false when the remote already had headSha: then pushed_at stays empty. */
    pushed: z.boolean(),
    /** The verification facts the runner will finish with; they let a later attempt finish this push if this one cannot. */
    facts: VerificationFactsSchema.optional(),
    idempotencyKey: IdempotencyKeySchema,
  }),
  reply: z.object({ jobId: JobIdSchema, headSha: GitShaSchema, pushedAt: TimestampSchema.nullable() }),
  examples: {
    valid: [
      { ...fencedExample, branch: 'feat/story-1208', headSha: jobExampleIds.headSha, pushed: true, idempotencyKey: 'p/push:9e8d7c6b' },
      { ...fencedExample, branch: 'feat/story-1208', headSha: jobExampleIds.headSha, pushed: false, idempotencyKey: 'p/push:9e8d7c6b-2' },
    ],
    // whether something was really pushed is a fact the runner must state
    invalid: [{ ...fencedExample, branch: 'feat/story-1208', headSha: jobExampleIds.headSha, idempotencyKey: 'p/push:1' }],
  },
});

// ---------------------------------------------------------------------------------------------
// finish_job

export const finishJob = defineCommand({
  context: 'jobs',
  name: 'finish_job',
  affinity: aboutItsJob,
  request: CommandMetaSchema.extend({ ...fenced, facts: VerificationFactsSchema, idempotencyKey: IdempotencyKeySchema }),
  reply: z.object({
    jobId: JobIdSchema,
    jobStatus: TerminalJobStatusSchema,
    taskStatus: TaskStatusSchema.nullable(),
    error: z.string().nullable(),
  }),
  examples: {
    valid: [
      {
        ...fencedExample, idempotencyKey: 'p/finish:job-7b1d3c9e-1',
        facts: {
          verifyResult: 'EMPTY', newCommit: false, netDiff: { filesChanged: 0, insertions: 0, deletions: 0 },
          workAlreadyOnTarget: true, diffIdenticalToMergedBranch: false, failure: null, cancelled: false,
        },
      },
      {
        ...fencedExample, idempotencyKey: 'p/finish:job-7b1d3c9e-2',
        facts: {
          verifyResult: 'ALIGNED', newCommit: true, netDiff: { filesChanged: 1, insertions: 0, deletions: 12 },
          workAlreadyOnTarget: false, diffIdenticalToMergedBranch: false,
          failure: { kind: 'TEST', message: 'cart.spec.ts: expected 3, got 2' }, cancelled: false,
        },
      },
    ],
    invalid: [
      // the runner reports facts, not a status
      { ...fencedExample, idempotencyKey: 'p/finish:1', status: 'DONE' },
      // a failure without its concrete text
      {
        ...fencedExample, idempotencyKey: 'p/finish:1',
        facts: {
          verifyResult: 'ALIGNED', newCommit: true, netDiff: { filesChanged: 1, insertions: 1, deletions: 0 },
          workAlreadyOnTarget: false, diffIdenticalToMergedBranch: false, failure: { kind: 'COMPILE', message: '' }, cancelled: false,
        },
      },
    ],
  },
});

// ---------------------------------------------------------------------------------------------
// rollback_claim

export const rollbackClaim = defineCommand({
  context: 'jobs',
  name: 'rollback_claim',
  affinity: aboutItsJob,
  request: CommandMetaSchema.extend({
    ...fenced,
    reason: z.string().min(1).max(2000),
    exitCode: z.number().int().optional(),
    /** Whose fault; only JOB spends the attempt (docs/jobs.md, "Attempts"). */
    cause: RollbackCauseSchema.default('JOB'),
    idempotencyKey: IdempotencyKeySchema,
  }),
  reply: JobRefReply.extend({ attempt: z.number().int().positive() }),
  examples: {
    valid: [
      { ...fencedExample, reason: 'agent exited with code 1 without finishing the job', exitCode: 1, idempotencyKey: 'p/rollback:job-7b1d3c9e-1' },
      { ...fencedExample, reason: 'the worktree service did not answer', cause: 'DEPENDENCY', idempotencyKey: 'p/rollback:job-7b1d3c9e-2' },
    ],
    // a rollback says why
    invalid: [{ ...fencedExample, idempotencyKey: 'p/rollback:1' }],
  },
});

// ---------------------------------------------------------------------------------------------
// cancel_job (a user's act: not fenced)

export const cancelJob = defineCommand({
  context: 'jobs',
  name: 'cancel_job',
  request: CommandMetaSchema.extend({
    jobId: JobIdSchema,
    reason: z.string().min(1).max(2000).optional(),
    idempotencyKey: IdempotencyKeySchema,
  }),
  reply: JobRefReply,
  examples: {
    valid: [{ jobId: jobExampleIds.jobId, reason: 'not needed any more', idempotencyKey: 'product-42/cancel:job-7b1d3c9e' }],
    // a job id is job-<uuid>
    invalid: [{ jobId: '7b1d3c9e-2f4a-4c1b-9e7d-0a1b2c3d4e5f', idempotencyKey: 'p/cancel:1' }],
  },
});

export const jobCommandContracts = [
  enqueueJob,
  claimJob,
  renewJobLease,
  startJob,
  logImplementation,
  logCommit,
  logTestResult,
  reportPush,
  finishJob,
  rollbackClaim,
  cancelJob,
] as const;

