import { z } from 'zod';
import { CommandMetaSchema } from '../envelope.js';
import { defineCommand } from '../registry.js';
import { GitRefSchema, GitShaSchema, IdempotencyKeySchema, SprintRunIdSchema, TimestampSchema } from '../jobs/values.js';
import { MergeMethodSchema, PrStrategySchema, RepositorySchema } from '../jobs/products.js';
import { BranchNameSchema } from '../worktrees/git-names.js';
import { PullRequestEffectFailureCodeSchema, PullRequestFailureCodeSchema, PullRequestIdSchema, PullRequestPhaseSchema } from './values.js';

/** A pull request as a command names it: its branch held to the rule every git-bound name is (branchNameProblem). */
const prRef = { repository: RepositorySchema, branch: BranchNameSchema };

/**
 * A sprint run is DONE: its pull request (the sprint branch's) is made ready for review — never
 * merged by Gantry (docs/pr-service.md). Sent by the job service's sprint-run effect; accepted before
 * the branch was ever pushed too (the PR then opens and is made ready at once).
 */
export const markPrReadyForReview = defineCommand({
  context: 'prs',
  name: 'mark_pr_ready_for_review',
  request: CommandMetaSchema.extend({ ...prRef, sprintRunId: SprintRunIdSchema, idempotencyKey: IdempotencyKeySchema }),
  reply: z.object({ pullRequestId: PullRequestIdSchema, phase: PullRequestPhaseSchema, prUrl: z.string().nullable() }),
  examples: {
    valid: [{ repository: 'acme/shop', branch: 'sprint/SP-7', sprintRunId: 'sprintrun-5a6b7c8d-9e0f-4a1b-8c2d-3e4f5a6b7c8d', idempotencyKey: 'product-42/pr-ready:sprintrun-5a6b' }],
    invalid: [
      // the branch alone is ambiguous: the same branch name exists in many repositories
      { branch: 'sprint/SP-7', sprintRunId: 'sprintrun-5a6b7c8d-9e0f-4a1b-8c2d-3e4f5a6b7c8d', idempotencyKey: 'p/ready:1' },
      // a sprint run id is sprintrun-<uuid>
      { repository: 'acme/shop', branch: 'sprint/SP-7', sprintRunId: 'SP-7', idempotencyKey: 'p/ready:1' },
    ],
  },
});

export const PullRequestViewSchema = z.object({
  pullRequestId: PullRequestIdSchema,
  repository: RepositorySchema,
  branch: GitRefSchema,
  phase: PullRequestPhaseSchema,
  /** Null until the branch is first pushed. */
  strategy: PrStrategySchema.nullable(),
  /** The base GitHub showed the PR on when it was opened or adopted (a person may have pointed it elsewhere); before that, the product's. */
  baseBranch: GitRefSchema.nullable(),
  mergeMethod: MergeMethodSchema.nullable(),
  requiredChecks: z.array(z.string()),
  headSha: GitShaSchema.nullable(),
  prNumber: z.number().int().positive().nullable(),
  prUrl: z.string().nullable(),
  draft: z.boolean().nullable(),
  scope: z.object({
    done: z.boolean(),
    /** The first tasks, as many as fit MAX_PR_LIST_BYTES as JSON (docs/pr-service.md, "How large its events and answers may be"), and how many more there are. */
    tasks: z.array(z.object({ taskId: z.string(), done: z.boolean() })),
    tasksLeftOut: z.number().int().nonnegative(),
    sprintRunId: SprintRunIdSchema.nullable(),
  }),
  /** The verdict on the current head's checks, when one was seen: the checks it names as its event keeps them, and how many more there were. */
  checks: z.object({ headSha: GitShaSchema, verdict: z.enum(['GREEN', 'RED']), names: z.array(z.string()), namesLeftOut: z.number().int().nonnegative() }).nullable(),
  mergeDecision: z.object({ headSha: GitShaSchema, via: z.enum(['AUTO_MERGE', 'DIRECT']), requestedAt: TimestampSchema }).nullable(),
  /** The first files in conflict on the current head (docs/pr-service.md, "How large its events and answers may be"), and how many more there are. */
  conflict: z.object({ headSha: GitShaSchema, conflictingFiles: z.array(z.string()), conflictingFilesLeftOut: z.number().int().nonnegative() }).nullable(),
  merged: z.object({ headSha: GitShaSchema, mergeCommitSha: GitShaSchema.nullable(), mergedAt: TimestampSchema }).nullable(),
  /** `retryAt`: GitHub's rate limit was used up; the PR is worked on again at its reset. */
  lastFailure: z.object({ effect: z.string(), code: PullRequestEffectFailureCodeSchema, message: z.string(), at: TimestampSchema, retryAt: TimestampSchema.optional() }).nullable(),
  updatedAt: TimestampSchema.nullable(),
});
export type PullRequestView = z.infer<typeof PullRequestViewSchema>;

export const getPullRequest = defineCommand({
  context: 'prs',
  name: 'get_pull_request',
  request: CommandMetaSchema.extend(prRef),
  reply: PullRequestViewSchema,
  examples: {
    valid: [{ repository: 'acme/shop', branch: 'story/ST-1208' }],
    // owner/name, not a URL
    invalid: [{ repository: 'https://github.com/acme/shop', branch: 'story/ST-1208' }],
  },
});

export const pullRequestCommandContracts = [markPrReadyForReview, getPullRequest] as const;
