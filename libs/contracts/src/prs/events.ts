import { z } from 'zod';
import { defineEvent, eventTypesOf, type EventsOf } from '../registry.js';
import { ExternalRefSchema, GitRefSchema, GitShaSchema, JobIdSchema, SprintRunIdSchema, TimestampSchema } from '../jobs/values.js';
import { MergeMethodSchema, PrStrategySchema, RepositorySchema, RequiredChecksSchema } from '../jobs/products.js';
import { PullRequestEffectFailureCodeSchema, PullRequestFailureCodeSchema, PullRequestIdSchema } from './values.js';
import { MAX_PR_MESSAGE_CHARS } from './sizes.js';

/**
 * The pull-request events that drive a sprint run or a task (docs/pr-service.md). Only a merge
 * conflict pauses a sprint run; failed checks fail the task or the sprint. The PR is identified by
 * repository and branch, which is how job-service finds the sprint run or the job of that head.
 */

const LooseRepositorySchema = z.string().regex(/^[A-Za-z0-9_.-]+\/[A-Za-z0-9_.-]+$/, 'a repository is owner/name');
const ShaSchema = z.string().regex(/^[0-9a-f]{40}([0-9a-f]{24})?$/, 'a full git object id');

const pullRequest = {
  pullRequestId: PullRequestIdSchema,
  repository: LooseRepositorySchema,
  branch: GitRefSchema,
  baseBranch: GitRefSchema,
  prNumber: z.number().int().positive(),
  prUrl: z.url(),
  /** The head the outcome was observed on; merge actions are guarded by it. */
  headSha: ShaSchema,
};

const example = {
  pullRequestId: 'pr-acme_shop-sprint_SP-7',
  repository: 'acme/shop',
  branch: 'sprint/SP-7',
  baseBranch: 'main',
  prNumber: 102,
  prUrl: 'https://github.com/acme/shop/pull/102',
  headSha: '9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a291807',
};

export const PullRequestMergeConflict = defineEvent({
  context: 'prs',
  type: 'PullRequestMergeConflict',
  schemaVersion: 1,
  data: z.object({
    ...pullRequest,
    /** The first files in conflict, as many as fit MAX_PR_LIST_BYTES as JSON (at least one): git may name more than one message carries. */
    conflictingFiles: z.array(z.string().min(1)).min(1),
    /** How many more files are in conflict than `conflictingFiles` names (0 in events from before the bound). */
    conflictingFilesLeftOut: z.number().int().nonnegative().default(0),
    detectedAt: z.iso.datetime({ offset: true }),
  }),
  examples: {
    valid: [
      { ...example, conflictingFiles: ['src/app.ts', 'package.json'], detectedAt: '2026-11-30T07:00:00.000Z' },
      { ...example, conflictingFiles: ['gen/a.ts'], conflictingFilesLeftOut: 29_999, detectedAt: '2026-11-30T07:00:00.000Z' },
    ],
    invalid: [
      // a conflict names the files in conflict
      { ...example, conflictingFiles: [], detectedAt: '2026-11-30T07:00:00.000Z' },
      // the url is a URL
      { ...example, prUrl: '#102', conflictingFiles: ['a'], detectedAt: '2026-11-30T07:00:00.000Z' },
    ],
  },
});

export const PullRequestChecksFailed = defineEvent({
  context: 'prs',
  type: 'PullRequestChecksFailed',
  schemaVersion: 1,
  data: z.object({
    ...pullRequest,
    /**
     * The first failed checks, as many as fit MAX_PR_LIST_BYTES as JSON (at least one); a name is cut to
     * MAX_PR_CHECK_NAME_CHARS, and a details URL longer than MAX_PR_DETAILS_URL_CHARS (or no URL) is null.
     */
    failedChecks: z
      .array(z.object({ name: z.string().min(1), conclusion: z.string().min(1), detailsUrl: z.url().nullable() }))
      .min(1),
    /** How many more checks failed than `failedChecks` names (0 in events from before the bound). */
    failedChecksLeftOut: z.number().int().nonnegative().default(0),
    detectedAt: z.iso.datetime({ offset: true }),
  }),
  examples: {
    valid: [
      {
        ...example,
        failedChecks: [{ name: 'ci/test', conclusion: 'failure', detailsUrl: 'https://github.com/acme/shop/actions/runs/1' }],
        detectedAt: '2026-11-30T07:00:00.000Z',
      },
    ],
    invalid: [
      // "checks failed" with no failed check
      { ...example, failedChecks: [], detectedAt: '2026-11-30T07:00:00.000Z' },
      // a head sha is the full object id
      { ...example, headSha: '9e8d7c6', failedChecks: [{ name: 'ci', conclusion: 'failure', detailsUrl: null }], detectedAt: '2026-11-30T07:00:00.000Z' },
    ],
  },
});

export type PullRequestMergeConflictData = z.output<typeof PullRequestMergeConflict.data>;
export type PullRequestChecksFailedData = z.output<typeof PullRequestChecksFailed.data>;

export const prSprintDrivingEventContracts = [PullRequestMergeConflict, PullRequestChecksFailed] as const;

// ---------------------------------------------------------------------------------------------
// The pull request's own log (docs/pr-service.md): one stream per (repository, branch).

const ofPr = { pullRequestId: PullRequestIdSchema, repository: RepositorySchema, branch: GitRefSchema };
const prExample = { pullRequestId: example.pullRequestId, repository: 'acme/shop', branch: 'story/ST-1208' };
const sha = example.headSha;
const otherSha = '3f2c9a1b7d4e5f60718293a4b5c6d7e8f9012345';
const at = '2026-11-30T07:00:00.000Z';
const jobId = 'job-7b1d3c9e-2f4a-4c1b-9e7d-0a1b2c3d4e5f';

export const PullRequestScopeTaskQueued = defineEvent({
  context: 'prs',
  type: 'PullRequestScopeTaskQueued',
  schemaVersion: 1,
  data: z.object({
    ...ofPr,
    jobId: JobIdSchema,
    taskId: ExternalRefSchema,
    storyId: ExternalRefSchema.nullable(),
    /** The story's tasks as the job names them (at least its own task): each must be done before the story's PR merges. */
    storyTaskIds: z.array(ExternalRefSchema).min(1),
    queuedAt: TimestampSchema,
  }),
  examples: {
    valid: [{ ...prExample, jobId, taskId: 'T-2', storyId: 'ST-1208', storyTaskIds: ['T-1', 'T-2'], queuedAt: at }],
    // a story with no tasks has nothing to wait for
    invalid: [{ ...prExample, jobId, taskId: 'T-2', storyId: 'ST-1208', storyTaskIds: [], queuedAt: at }],
  },
});

export const PullRequestScopeTaskDone = defineEvent({
  context: 'prs',
  type: 'PullRequestScopeTaskDone',
  schemaVersion: 1,
  data: z.object({ ...ofPr, jobId: JobIdSchema, taskId: ExternalRefSchema, doneAt: TimestampSchema }),
  examples: {
    valid: [{ ...prExample, jobId, taskId: 'T-2', doneAt: at }],
    // which task?
    invalid: [{ ...prExample, jobId, doneAt: at }],
  },
});

export const PullRequestScopeTaskReopened = defineEvent({
  context: 'prs',
  type: 'PullRequestScopeTaskReopened',
  schemaVersion: 1,
  data: z.object({ ...ofPr, jobId: JobIdSchema, taskId: ExternalRefSchema, reason: z.string().min(1).max(MAX_PR_MESSAGE_CHARS), reopenedAt: TimestampSchema }),
  examples: {
    valid: [{ ...prExample, jobId, taskId: 'T-2', reason: 'checks failed on its head: ci/test', reopenedAt: at }],
    // a reopened task says why
    invalid: [{ ...prExample, jobId, taskId: 'T-2', reason: '', reopenedAt: at }],
  },
});

export const PullRequestSprintRunDone = defineEvent({
  context: 'prs',
  type: 'PullRequestSprintRunDone',
  schemaVersion: 1,
  data: z.object({ ...ofPr, sprintRunId: SprintRunIdSchema, doneAt: TimestampSchema }),
  examples: {
    valid: [{ ...prExample, branch: 'sprint/SP-7', sprintRunId: 'sprintrun-5a6b7c8d-9e0f-4a1b-8c2d-3e4f5a6b7c8d', doneAt: at }],
    // a sprint run id is sprintrun-<uuid>
    invalid: [{ ...prExample, sprintRunId: 'SP-7', doneAt: at }],
  },
});

export const PullRequestFlowStarted = defineEvent({
  context: 'prs',
  type: 'PullRequestFlowStarted',
  schemaVersion: 1,
  data: z.object({
    ...ofPr,
    productId: ExternalRefSchema,
    baseBranch: GitRefSchema,
    strategy: PrStrategySchema,
    mergeMethod: MergeMethodSchema,
    requiredChecks: RequiredChecksSchema,
    title: z.string().min(1).max(256),
    /** The first head pushed, and the job that pushed it (null when GitHub told us first). */
    headSha: GitShaSchema,
    jobId: JobIdSchema.nullable(),
    /** The push report's position in the job service's log: a report behind it is older (absent in events from before it was kept). */
    pushPosition: z.number().int().positive().optional(),
    /** When the job service took that report (with `pushPosition`): a report lower in the log but taken later comes from a log started again. */
    pushReportedAt: TimestampSchema.optional(),
    /** The sprint run whose job pushed it: the run whose DONE makes this cycle's PR ready (absent: not a sprint run's job, or from before it was kept). */
    sprintRunId: SprintRunIdSchema.optional(),
    startedAt: TimestampSchema,
  }),
  examples: {
    valid: [
      {
        ...prExample, productId: 'product-42', baseBranch: 'main', strategy: 'STORY', mergeMethod: 'SQUASH', requiredChecks: ['ci/test'],
        title: 'Story ST-1208', headSha: sha, jobId, startedAt: at,
      },
    ],
    // a strategy the machine does not know
    invalid: [
      {
        ...prExample, productId: 'product-42', baseBranch: 'main', strategy: 'TRUNK', mergeMethod: 'SQUASH', requiredChecks: [],
        title: 'x', headSha: sha, jobId: null, startedAt: at,
      },
    ],
  },
});

export const PullRequestHeadMoved = defineEvent({
  context: 'prs',
  type: 'PullRequestHeadMoved',
  schemaVersion: 1,
  data: z.object({
    ...ofPr,
    headSha: GitShaSchema,
    previousHeadSha: GitShaSchema,
    /** PUSH: a job reported the push; GITHUB: read from GitHub (someone else pushed, or a merge found the head moved). */
    source: z.enum(['PUSH', 'GITHUB']),
    /** PUSH: the report's position in the job service's log (absent in events from before it was kept). */
    pushPosition: z.number().int().positive().optional(),
    /** PUSH: when the job service took the report (with `pushPosition`). */
    pushReportedAt: TimestampSchema.optional(),
    movedAt: TimestampSchema,
  }),
  examples: {
    valid: [{ ...prExample, headSha: otherSha, previousHeadSha: sha, source: 'GITHUB', movedAt: at }],
    // a head is a full object id
    invalid: [{ ...prExample, headSha: 'abc123', previousHeadSha: sha, source: 'PUSH', movedAt: at }],
  },
});

export const PullRequestOpened = defineEvent({
  context: 'prs',
  type: 'PullRequestOpened',
  schemaVersion: 1,
  data: z.object({
    ...ofPr,
    prNumber: z.number().int().positive(),
    prUrl: z.url(),
    /** GitHub's global node id, for the GraphQL mutations. */
    nodeId: z.string().min(1).max(200),
    draft: z.boolean(),
    headSha: GitShaSchema,
    /** true: GitHub already had an open PR for the branch (a 422 "already exists", or found before creating) and it was taken over. */
    adopted: z.boolean(),
    /**
     * The base GitHub shows the PR on: an adopted PR may have been pointed at another base than the product's
     * (absent in events from before it was kept: those PRs are on the product's base, the flow's).
     */
    baseBranch: GitRefSchema.optional(),
    openedAt: TimestampSchema,
  }),
  examples: {
    valid: [
      { ...prExample, prNumber: 102, prUrl: example.prUrl, nodeId: 'PR_kwDOA1', draft: false, headSha: sha, adopted: false, openedAt: at },
      { ...prExample, prNumber: 102, prUrl: example.prUrl, nodeId: 'PR_kwDOA1', draft: false, headSha: sha, adopted: true, baseBranch: 'develop', openedAt: at },
    ],
    // a PR number is positive
    invalid: [{ ...prExample, prNumber: 0, prUrl: example.prUrl, nodeId: 'PR_kwDOA1', draft: false, headSha: sha, adopted: false, openedAt: at }],
  },
});

/** GitHub refused to open the PR as a draft: the repository has no drafts (a private repository on a plan without them). */
export const PullRequestDraftsNotSupported = defineEvent({
  context: 'prs',
  type: 'PullRequestDraftsNotSupported',
  schemaVersion: 1,
  data: z.object({
    ...ofPr,
    /** GitHub's words, or how the service knew (another PR of the repository was refused). */
    message: z.string().min(1).max(MAX_PR_MESSAGE_CHARS),
    refusedAt: TimestampSchema,
  }),
  examples: {
    valid: [{ ...prExample, message: 'Draft pull requests are not supported in this repository.', refusedAt: at }],
    // GitHub's words are kept
    invalid: [{ ...prExample, message: '', refusedAt: at }],
  },
});

export const PullRequestChecksPassed = defineEvent({
  context: 'prs',
  type: 'PullRequestChecksPassed',
  schemaVersion: 1,
  data: z.object({
    ...ofPr,
    headSha: GitShaSchema,
    /**
     * The checks seen green on this head (never empty: no checks reported is not green): the first, as
     * many as fit MAX_PR_LIST_BYTES as JSON, each name cut to MAX_PR_CHECK_NAME_CHARS.
     */
    checks: z.array(z.string().min(1)).min(1),
    /** How many more checks were green than `checks` names (0 in events from before the bound). */
    checksLeftOut: z.number().int().nonnegative().default(0),
    passedAt: TimestampSchema,
  }),
  examples: {
    valid: [{ ...prExample, headSha: sha, checks: ['ci/test'], passedAt: at }],
    // no checks reported is not green
    invalid: [{ ...prExample, headSha: sha, checks: [], passedAt: at }],
  },
});

/**
 * A head seen green shows a check pending again (a check re-run, or a new run of it): a check counts by its
 * latest run, so the head is not green any more — until a read shows it green (or red) again (PR-4).
 */
export const PullRequestChecksPending = defineEvent({
  context: 'prs',
  type: 'PullRequestChecksPending',
  schemaVersion: 1,
  data: z.object({ ...ofPr, headSha: GitShaSchema, pendingAt: TimestampSchema }),
  examples: {
    valid: [{ ...prExample, headSha: sha, pendingAt: at }],
    // pending on which head?
    invalid: [{ ...prExample, pendingAt: at }],
  },
});

export const PullRequestMergeRequested = defineEvent({
  context: 'prs',
  type: 'PullRequestMergeRequested',
  schemaVersion: 1,
  data: z.object({
    ...ofPr,
    /** The head this decision was made for: auto-merge expects it, a direct merge sends it as `sha`. */
    headSha: GitShaSchema,
    via: z.enum(['AUTO_MERGE', 'DIRECT']),
    mergeMethod: MergeMethodSchema,
    requestedAt: TimestampSchema,
  }),
  examples: {
    valid: [{ ...prExample, headSha: sha, via: 'AUTO_MERGE', mergeMethod: 'SQUASH', requestedAt: at }],
    // every merge decision names its head
    invalid: [{ ...prExample, via: 'DIRECT', mergeMethod: 'SQUASH', requestedAt: at }],
  },
});

export const PullRequestAutoMergeEnabled = defineEvent({
  context: 'prs',
  type: 'PullRequestAutoMergeEnabled',
  schemaVersion: 1,
  data: z.object({ ...ofPr, headSha: GitShaSchema, enabledAt: TimestampSchema }),
  examples: {
    valid: [{ ...prExample, headSha: sha, enabledAt: at }],
    // enabled for which head?
    invalid: [{ ...prExample, enabledAt: at }],
  },
});

export const PullRequestAutoMergeRefused = defineEvent({
  context: 'prs',
  type: 'PullRequestAutoMergeRefused',
  schemaVersion: 1,
  data: z.object({
    ...ofPr,
    headSha: GitShaSchema,
    /** CLEAN / UNSTABLE: GitHub would merge at once, so it is merged directly; NOT_ALLOWED: the repository disallows auto-merge. */
    reason: z.enum(['CLEAN', 'UNSTABLE', 'NOT_ALLOWED']),
    message: z.string().min(1).max(MAX_PR_MESSAGE_CHARS),
    refusedAt: TimestampSchema,
  }),
  examples: {
    valid: [{ ...prExample, headSha: sha, reason: 'CLEAN', message: 'Pull request Pull request is in clean status', refusedAt: at }],
    // a refusal GitHub does not give
    invalid: [{ ...prExample, headSha: sha, reason: 'BUSY', message: 'x', refusedAt: at }],
  },
});

export const PullRequestAutoMergeDisabled = defineEvent({
  context: 'prs',
  type: 'PullRequestAutoMergeDisabled',
  schemaVersion: 1,
  data: z.object({ ...ofPr, headSha: GitShaSchema, disabledAt: TimestampSchema }),
  examples: {
    valid: [{ ...prExample, headSha: sha, disabledAt: at }],
    // disabled when?
    invalid: [{ ...prExample, headSha: sha }],
  },
});

/**
 * Auto-merge, enabled for the current head, was seen off on GitHub without Gantry turning it off:
 * someone disabled it (GitHub's `auto_merge_disabled`). Gantry merges nothing of the PR — no auto-merge
 * again, no direct merge — until auto-merge is seen on again on GitHub (docs/pr-service.md, PR-16).
 */
export const PullRequestAutoMergeDisabledOnGitHub = defineEvent({
  context: 'prs',
  type: 'PullRequestAutoMergeDisabledOnGitHub',
  schemaVersion: 1,
  data: z.object({ ...ofPr, prNumber: z.number().int().positive(), headSha: GitShaSchema, disabledAt: TimestampSchema }),
  examples: {
    valid: [{ ...prExample, prNumber: 102, headSha: sha, disabledAt: at }],
    // for which head?
    invalid: [{ ...prExample, prNumber: 102, disabledAt: at }],
  },
});

/**
 * A person converted the STORY PR to a draft on GitHub (`draft: true`), or marked it ready for review
 * again (`draft: false`), as a read showed it. Gantry merges no draft: the merge decided for its head
 * is withdrawn, and it is decided again once the PR is ready (docs/pr-service.md, PR-17).
 */
export const PullRequestDraftChanged = defineEvent({
  context: 'prs',
  type: 'PullRequestDraftChanged',
  schemaVersion: 1,
  data: z.object({ ...ofPr, prNumber: z.number().int().positive(), headSha: GitShaSchema, draft: z.boolean(), changedAt: TimestampSchema }),
  examples: {
    valid: [
      { ...prExample, prNumber: 102, headSha: sha, draft: true, changedAt: at },
      { ...prExample, prNumber: 102, headSha: sha, draft: false, changedAt: at },
    ],
    // a draft, or ready?
    invalid: [{ ...prExample, prNumber: 102, headSha: sha, changedAt: at }],
  },
});

/**
 * A person pointed the open PR at another base on GitHub (`pull_request.edited` with `changes.base`; a read shows the new
 * `base.ref`): reads, conflicts and merges follow it, and what was learnt against the previous base — a conflict, a
 * merge GitHub refused — is over (docs/pr-service.md, PR-18). Recorded once per change, by whichever read sees it first.
 */
export const PullRequestBaseChanged = defineEvent({
  context: 'prs',
  type: 'PullRequestBaseChanged',
  schemaVersion: 1,
  data: z.object({
    ...ofPr,
    prNumber: z.number().int().positive(),
    /** The head GitHub showed with the new base. */
    headSha: GitShaSchema,
    baseBranch: GitRefSchema,
    previousBaseBranch: GitRefSchema,
    /**
     * GitHub's `updated_at` of the PR in the read that showed the change (null: the read had none; absent: recorded
     * before it was kept). A read older than it was answered by a replica behind the change, and cannot undo it.
     */
    shownUpdatedAt: TimestampSchema.nullable().optional(),
    changedAt: TimestampSchema,
  }),
  examples: {
    valid: [
      { ...prExample, prNumber: 102, headSha: sha, baseBranch: 'release/2.4', previousBaseBranch: 'main', changedAt: at },
      { ...prExample, prNumber: 102, headSha: sha, baseBranch: 'release/2.4', previousBaseBranch: 'main', shownUpdatedAt: at, changedAt: at },
    ],
    // which base it was on before?
    invalid: [{ ...prExample, prNumber: 102, headSha: sha, baseBranch: 'release/2.4', changedAt: at }],
  },
});

/**
 * GitHub shows the PR mergeable again on the head a conflict was recorded for — or whose conflict's files git could
 * not name (look-ups counted for it) — (the base changed again: a change reverted, the conflict resolved on the base):
 * the conflict is over, the look-ups for the head start again, and the PR is carried on.
 */
export const PullRequestMergeConflictCleared = defineEvent({
  context: 'prs',
  type: 'PullRequestMergeConflictCleared',
  schemaVersion: 1,
  data: z.object({ ...ofPr, prNumber: z.number().int().positive(), headSha: GitShaSchema, clearedAt: TimestampSchema }),
  examples: {
    valid: [{ ...prExample, prNumber: 102, headSha: sha, clearedAt: at }],
    // cleared on which head?
    invalid: [{ ...prExample, prNumber: 102, clearedAt: at }],
  },
});

/**
 * GitHub shows the head conflicting and git could not work out the files in conflict (its fetch failed, or the branches
 * merged cleanly): one failed look-up, counted per head, so the bound on look-ups holds across restarts (PR-10).
 */
export const PullRequestConflictFilesUnknown = defineEvent({
  context: 'prs',
  type: 'PullRequestConflictFilesUnknown',
  schemaVersion: 1,
  data: z.object({
    ...ofPr,
    headSha: GitShaSchema,
    /** How many look-ups for this head have failed, this one included. */
    lookups: z.number().int().positive(),
    /** git's answer (or why its answer named no file). */
    message: z.string().min(1).max(MAX_PR_MESSAGE_CHARS),
    failedAt: TimestampSchema,
  }),
  examples: {
    valid: [{ ...prExample, headSha: sha, lookups: 1, message: 'git fetch failed (exit 128): repository not found', failedAt: at }],
    // the look-ups are counted from one
    invalid: [{ ...prExample, headSha: sha, lookups: 0, message: 'x', failedAt: at }],
  },
});

export const PullRequestMergeFailed = defineEvent({
  context: 'prs',
  type: 'PullRequestMergeFailed',
  schemaVersion: 1,
  data: z.object({
    ...ofPr,
    headSha: GitShaSchema,
    code: PullRequestFailureCodeSchema,
    message: z.string().min(1).max(MAX_PR_MESSAGE_CHARS),
    /** GitHub's mergeable_state when it refused; the same head is tried again only once this changes. */
    mergeableState: z.string().min(1).max(50).nullable(),
    /** The merge method the repository's settings refused (absent: another refusal): tried again once the repository allows it. */
    refusedMergeMethod: MergeMethodSchema.optional(),
    failedAt: TimestampSchema,
  }),
  examples: {
    valid: [
      { ...prExample, headSha: sha, code: 'UNKNOWN', message: 'At least 1 approving review is required', mergeableState: 'blocked', failedAt: at },
      { ...prExample, headSha: sha, code: 'UNKNOWN', message: 'Squash merges are not allowed on this repository.', mergeableState: 'clean', refusedMergeMethod: 'SQUASH', failedAt: at },
    ],
    // a failure code of the five
    invalid: [{ ...prExample, headSha: sha, code: 'TEAPOT', message: 'x', mergeableState: null, failedAt: at }],
  },
});

/** The repository allows the merge method it refused for the head's merge (a person changed its settings): the merge is decided again. */
export const PullRequestMergeMethodAllowed = defineEvent({
  context: 'prs',
  type: 'PullRequestMergeMethodAllowed',
  schemaVersion: 1,
  data: z.object({ ...ofPr, headSha: GitShaSchema, mergeMethod: MergeMethodSchema, allowedAt: TimestampSchema }),
  examples: {
    valid: [{ ...prExample, headSha: sha, mergeMethod: 'SQUASH', allowedAt: at }],
    // a merge method GitHub has
    invalid: [{ ...prExample, headSha: sha, mergeMethod: 'OCTOPUS', allowedAt: at }],
  },
});

export const PullRequestMerged = defineEvent({
  context: 'prs',
  type: 'PullRequestMerged',
  schemaVersion: 1,
  data: z.object({ ...ofPr, prNumber: z.number().int().positive(), prUrl: z.url(), headSha: GitShaSchema, mergeCommitSha: GitShaSchema.nullable(), mergedAt: TimestampSchema }),
  examples: {
    valid: [{ ...prExample, prNumber: 102, prUrl: example.prUrl, headSha: sha, mergeCommitSha: otherSha, mergedAt: at }],
    // the merged head is a full object id
    invalid: [{ ...prExample, prNumber: 102, prUrl: example.prUrl, headSha: 'HEAD', mergeCommitSha: null, mergedAt: at }],
  },
});

export const PullRequestClosed = defineEvent({
  context: 'prs',
  type: 'PullRequestClosed',
  schemaVersion: 1,
  data: z.object({ ...ofPr, prNumber: z.number().int().positive(), closedAt: TimestampSchema }),
  examples: {
    valid: [{ ...prExample, prNumber: 102, closedAt: at }],
    // which PR?
    invalid: [{ ...prExample, closedAt: at }],
  },
});

/** GitHub shows a PR this service recorded closed (not merged) open again: someone reopened it; it is carried on. */
export const PullRequestReopened = defineEvent({
  context: 'prs',
  type: 'PullRequestReopened',
  schemaVersion: 1,
  data: z.object({ ...ofPr, prNumber: z.number().int().positive(), headSha: GitShaSchema, reopenedAt: TimestampSchema }),
  examples: {
    valid: [{ ...prExample, prNumber: 102, headSha: sha, reopenedAt: at }],
    // on which head?
    invalid: [{ ...prExample, prNumber: 102, reopenedAt: at }],
  },
});

export const PullRequestReadyForReview = defineEvent({
  context: 'prs',
  type: 'PullRequestReadyForReview',
  schemaVersion: 1,
  data: z.object({
    ...ofPr,
    prNumber: z.number().int().positive(),
    prUrl: z.url(),
    headSha: GitShaSchema,
    /** GitHub said the PR was not a draft any more (someone, or an earlier attempt, marked it): a success too. */
    alreadyReady: z.boolean(),
    markedAt: TimestampSchema,
  }),
  examples: {
    valid: [{ ...prExample, prNumber: 102, prUrl: example.prUrl, headSha: sha, alreadyReady: false, markedAt: at }],
    // marked when?
    invalid: [{ ...prExample, prNumber: 102, prUrl: example.prUrl, headSha: sha, alreadyReady: false }],
  },
});

export const PullRequestEffectFailed = defineEvent({
  context: 'prs',
  type: 'PullRequestEffectFailed',
  schemaVersion: 1,
  data: z.object({
    ...ofPr,
    effect: z.enum(['OPEN_PULL_REQUEST', 'READ_PULL_REQUEST', 'MARK_READY_FOR_REVIEW', 'ENABLE_AUTO_MERGE', 'DISABLE_AUTO_MERGE', 'MERGE']),
    /** GH_RATE_LIMITED with `retryAt`; events recorded before that code say UNKNOWN with `retryAt`. */
    code: PullRequestEffectFailureCodeSchema,
    message: z.string().min(1).max(MAX_PR_MESSAGE_CHARS),
    failedAt: TimestampSchema,
    /** GitHub's rate limit was used up: the PR is not worked on again before this (its reset). Absent for any other failure. */
    retryAt: TimestampSchema.optional(),
  }),
  examples: {
    valid: [
      { ...prExample, effect: 'OPEN_PULL_REQUEST', code: 'GH_AUTH_ERROR', message: 'Bad credentials', failedAt: at },
      { ...prExample, effect: 'READ_PULL_REQUEST', code: 'GH_RATE_LIMITED', message: 'API rate limit exceeded for user ID 1.', failedAt: at, retryAt: at },
      { ...prExample, effect: 'READ_PULL_REQUEST', code: 'UNKNOWN', message: 'API rate limit exceeded for user ID 1.', failedAt: at, retryAt: at },
    ],
    // an effect the machine does not ask for
    invalid: [{ ...prExample, effect: 'DELETE_REPOSITORY', code: 'UNKNOWN', message: 'x', failedAt: at }],
  },
});

export type PullRequestScopeTaskQueuedData = z.output<typeof PullRequestScopeTaskQueued.data>;
export type PullRequestScopeTaskDoneData = z.output<typeof PullRequestScopeTaskDone.data>;
export type PullRequestScopeTaskReopenedData = z.output<typeof PullRequestScopeTaskReopened.data>;
export type PullRequestSprintRunDoneData = z.output<typeof PullRequestSprintRunDone.data>;
export type PullRequestFlowStartedData = z.output<typeof PullRequestFlowStarted.data>;
export type PullRequestHeadMovedData = z.output<typeof PullRequestHeadMoved.data>;
export type PullRequestOpenedData = z.output<typeof PullRequestOpened.data>;
export type PullRequestDraftsNotSupportedData = z.output<typeof PullRequestDraftsNotSupported.data>;
export type PullRequestChecksPassedData = z.output<typeof PullRequestChecksPassed.data>;
export type PullRequestChecksPendingData = z.output<typeof PullRequestChecksPending.data>;
export type PullRequestMergeRequestedData = z.output<typeof PullRequestMergeRequested.data>;
export type PullRequestAutoMergeEnabledData = z.output<typeof PullRequestAutoMergeEnabled.data>;
export type PullRequestAutoMergeRefusedData = z.output<typeof PullRequestAutoMergeRefused.data>;
export type PullRequestAutoMergeDisabledData = z.output<typeof PullRequestAutoMergeDisabled.data>;
export type PullRequestDraftChangedData = z.output<typeof PullRequestDraftChanged.data>;
export type PullRequestBaseChangedData = z.output<typeof PullRequestBaseChanged.data>;
export type PullRequestMergeConflictClearedData = z.output<typeof PullRequestMergeConflictCleared.data>;
export type PullRequestConflictFilesUnknownData = z.output<typeof PullRequestConflictFilesUnknown.data>;
export type PullRequestMergeFailedData = z.output<typeof PullRequestMergeFailed.data>;
export type PullRequestAutoMergeDisabledOnGitHubData = z.output<typeof PullRequestAutoMergeDisabledOnGitHub.data>;
export type PullRequestMergeMethodAllowedData = z.output<typeof PullRequestMergeMethodAllowed.data>;
export type PullRequestMergedData = z.output<typeof PullRequestMerged.data>;
export type PullRequestClosedData = z.output<typeof PullRequestClosed.data>;
export type PullRequestReopenedData = z.output<typeof PullRequestReopened.data>;
export type PullRequestReadyForReviewData = z.output<typeof PullRequestReadyForReview.data>;
export type PullRequestEffectFailedData = z.output<typeof PullRequestEffectFailed.data>;

/** Every event of a pull request's stream, the two the job service consumes among them. */
export const pullRequestEventContracts = [
  PullRequestScopeTaskQueued,
  PullRequestScopeTaskDone,
  PullRequestScopeTaskReopened,
  PullRequestSprintRunDone,
  PullRequestFlowStarted,
  PullRequestHeadMoved,
  PullRequestOpened,
  PullRequestDraftsNotSupported,
  PullRequestChecksPassed,
  PullRequestChecksFailed,
  PullRequestChecksPending,
  PullRequestMergeConflict,
  PullRequestMergeConflictCleared,
  PullRequestConflictFilesUnknown,
  PullRequestMergeRequested,
  PullRequestAutoMergeEnabled,
  PullRequestAutoMergeRefused,
  PullRequestAutoMergeDisabled,
  PullRequestAutoMergeDisabledOnGitHub,
  PullRequestDraftChanged,
  PullRequestBaseChanged,
  PullRequestMergeFailed,
  PullRequestMergeMethodAllowed,
  PullRequestMerged,
  PullRequestClosed,
  PullRequestReopened,
  PullRequestReadyForReview,
  PullRequestEffectFailed,
] as const;

/** A pull request's events (one stream per repository and branch), as its decider emits them. */
export type PullRequestEvent = EventsOf<typeof pullRequestEventContracts>;
export type PullRequestEventType = PullRequestEvent['type'];
export const pullRequestEventTypes = eventTypesOf(pullRequestEventContracts);
