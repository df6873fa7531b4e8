import { z } from 'zod';

const UUID = '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}';

/** A job id is `job-<uuid>`: it is the job's stream id and one subject token. */
export const JobIdSchema = z.string().regex(new RegExp(`^job-${UUID}$`), 'a job id is job-<lower-case uuid>');
export type JobId = z.infer<typeof JobIdSchema>;

/** A sprint run id is `sprintrun-<uuid>`: its stream id and one subject token. */
export const SprintRunIdSchema = z
  .string()
  .regex(new RegExp(`^sprintrun-${UUID}$`), 'a sprint run id is sprintrun-<lower-case uuid>');
export type SprintRunId = z.infer<typeof SprintRunIdSchema>;

export function jobIdFor(uuid: string): JobId {
  return JobIdSchema.parse(`job-${uuid}`);
}

export function sprintRunIdFor(uuid: string): SprintRunId {
  return SprintRunIdSchema.parse(`sprintrun-${uuid}`);
}

/** An id of something another context owns (product, story, sprint, task, question): no whitespace, no dots. */
export const ExternalRefSchema = z
  .string()
  .min(1)
  .max(200)
  .regex(/^[^\s.*>]+$/, 'a reference is one token without whitespace, dots, * or >');

/** A runner identity; used in subjects and durable names, so one token. */
export const RunnerIdSchema = z
  .string()
  .min(1)
  .max(128)
  .regex(/^[A-Za-z0-9][A-Za-z0-9_-]*$/, 'a runner id is letters, digits, _ and -');

/** The fencing token of a claim: 1 for the first grant, one higher at every later grant. */
export const LeaseTokenSchema = z.number().int().positive();

/**
 * An idempotency key names one intended action and is kept across retries (docs/architecture.md, "Idempotency receipts"). It is scoped:
 * `<scope>:<rest>`, the scope naming the tenant/product and the action (see `deriveIdempotencyKey`).
 * It must never carry personal data; `@` and whitespace are refused as a guard against e-mail addresses
 * and free text.
 */
export const IdempotencyKeySchema = z
  .string()
  .min(3)
  .max(200)
  .regex(/^[A-Za-z0-9][A-Za-z0-9._/-]*:[A-Za-z0-9._:/-]+$/, 'an idempotency key is <scope>:<key> without @ or whitespace');

export const TimestampSchema = z.iso.datetime({ offset: true });

export const GitShaSchema = z.string().regex(/^[0-9a-f]{40}([0-9a-f]{24})?$/, 'a full git object id (40 or 64 hex)');

/**
 * A branch or ref name as events and views hold it: what a command took, now or before its door held
 * the name to git's rules. A command takes a name by BranchNameSchema / BaseRefSchema (branchNameProblem,
 * docs/git.md "Branch names"); this schema takes all of those (a blank beyond ASCII, U+00A0, among them)
 * and what older logs hold (a `.lock`, a control character, a NUL stored as U+FFFD), so reading a stored
 * event never fails on its name. Never the schema of a request.
 */
const STORED_REF = /^(?!-)(?!.*\.\.)[^\t\n\v\f\r ~^:?*[\\]+$/;
export const GitRefSchema = z
  .string()
  .min(1)
  .max(255)
  // A refinement, not a JSON Schema pattern: it widened the pattern events were published with (`\s`
  // became the ASCII blanks), and the snapshot's check reads a changed pattern as incompatible and a
  // refinement not at all (libs/contracts/README.md). git-bound-names.spec.ts pins what it still reads.
  .refine((name) => STORED_REF.test(name), 'a git ref name');

export const JobStatusSchema = z.enum(['QUEUED', 'CLAIMED', 'RUNNING', 'DONE', 'FAILED', 'SKIPPED', 'CANCELLED']);
export type JobStatus = z.infer<typeof JobStatusSchema>;

export const TerminalJobStatusSchema = z.enum(['DONE', 'FAILED', 'SKIPPED', 'CANCELLED']);
export type TerminalJobStatus = z.infer<typeof TerminalJobStatusSchema>;
/** The statuses a job ends in; nothing but red checks on a DONE job's head changes it afterwards. */
export const TERMINAL_JOB_STATUSES = TerminalJobStatusSchema.options;
export function isTerminalJobStatus(status: string): status is TerminalJobStatus {
  return (TERMINAL_JOB_STATUSES as readonly string[]).includes(status);
}

export const TaskStatusSchema = z.enum(['TO_DO', 'IN_PROGRESS', 'DONE']);
export type TaskStatus = z.infer<typeof TaskStatusSchema>;

/** What the verify step reported; NOT_APPLICABLE for kinds that write no code (ideas, plans, reviews). */
export const VerifyResultSchema = z.enum(['ALIGNED', 'PARTIAL', 'EMPTY', 'DIVERGENT', 'NOT_APPLICABLE']);
export type VerifyResult = z.infer<typeof VerifyResultSchema>;

export const FailureKindSchema = z.enum(['COMPILE', 'TEST', 'PUSH', 'EXCEPTION']);
export type FailureKind = z.infer<typeof FailureKindSchema>;

/** `git diff --shortstat <base_sha>...HEAD`: a delete-only change has deletions and no insertions, and is a diff. */
export const NetDiffSchema = z.object({
  filesChanged: z.number().int().min(0),
  insertions: z.number().int().min(0),
  deletions: z.number().int().min(0),
});
export type NetDiff = z.infer<typeof NetDiffSchema>;

/**
 * How the net diff compares with the changes the job's plan expects (`expectedChanges` in its payload):
 * ALL_PRESENT, SOME_PRESENT, NONE_PRESENT (the branch changed other things only), or
 * NO_EXPECTED_CHANGES — the plan names none, so the verify result rests on the agent's own report
 * and the commits alone (see docs/jobs.md, "Verification").
 */
export const PlanCheckSchema = z.enum(['ALL_PRESENT', 'SOME_PRESENT', 'NONE_PRESENT', 'NO_EXPECTED_CHANGES']);
export type PlanCheck = z.infer<typeof PlanCheckSchema>;

/**
 * The facts a runner reports at finish (docs/jobs.md, "The finishing rule"); job-service decides the status from them.
 * Every field is a fact the runner observed, never a status it wishes for.
 */
export const VerificationFactsSchema = z.object({
  verifyResult: VerifyResultSchema,
  /** A commit on the feature branch that is not in base_sha. */
  newCommit: z.boolean(),
  /** The net diff against the job's own base_sha. */
  netDiff: NetDiffSchema,
  /** The planned work is already on the target branch, or the branch was already merged. */
  workAlreadyOnTarget: z.boolean(),
  /** The net diff equals the diff of a branch already merged into the target. */
  diffIdenticalToMergedBranch: z.boolean(),
  /** A compile / test / push failure or an exception, with its concrete text. */
  failure: z.object({ kind: FailureKindSchema, message: z.string().min(1).max(4000) }).nullable(),
  /** The run stopped because a user cancelled it. */
  cancelled: z.boolean(),
  /** The commit verify looked at (kept in the job's record whatever the outcome, e.g. a DIVERGENT head). */
  headSha: GitShaSchema.nullable().optional(),
  /** How the net diff compares with the plan's expected changes. */
  planCheck: PlanCheckSchema.optional(),
});
export type VerificationFacts = z.infer<typeof VerificationFactsSchema>;

export const TestResultStatusSchema = z.enum(['PASSED', 'FAILED']);
export type TestResultStatus = z.infer<typeof TestResultStatusSchema>;

/**
 * Why a claim was rolled back (docs/jobs.md, "Attempts"): JOB — the run failed for a reason of the
 * job's own (the agent crashed, its story log was refused): the attempt is spent. RUNNER — the runner
 * could not run it (its agent token expired, it is shutting down, it restarted). DEPENDENCY — a service
 * the run needs did not answer (the worktree service, the job service). RUNNER and DEPENDENCY
 * rollbacks spend no attempt, and the job is offered again after a growing pause.
 */
export const RollbackCauseSchema = z.enum(['JOB', 'RUNNER', 'DEPENDENCY']);
export type RollbackCause = z.infer<typeof RollbackCauseSchema>;

/** How an enqueue request was answered by the run queue. */
export const EnqueueOutcomeSchema = z.enum(['created', 'deduplicated', 'coalesced']);
export type EnqueueOutcome = z.infer<typeof EnqueueOutcomeSchema>;

/** What happened to a claim that ended without a finish (lease expiry or rollback). */
export const ClaimEndOutcomeSchema = z.enum(['REQUEUED', 'FAILED']);
export type ClaimEndOutcome = z.infer<typeof ClaimEndOutcomeSchema>;

export const SprintRunStatusSchema = z.enum(['QUEUED', 'RUNNING', 'PAUSED', 'DONE', 'FAILED', 'CANCELLED']);
export type SprintRunStatus = z.infer<typeof SprintRunStatusSchema>;

/** Payloads are opaque JSON objects the agent reads; a coalesced job keeps every one. */
export const JobPayloadSchema = z.record(z.string(), z.unknown());
export type JobPayload = z.infer<typeof JobPayloadSchema>;

/** The affinity of a command under a claim: the job it acts on (see CommandContract.affinity). */
export const aboutItsJob = { request: (request: { jobId: string }): string => request.jobId };
