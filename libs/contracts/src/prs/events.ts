import { z } from 'zod';
import { defineEvent } from '../registry.js';

/**
 * The pull-request events that drive a sprint run (SPEC §2, §4). Only a merge conflict pauses a
 * sprint run; failed checks fail the task or the sprint. The PR is identified by repository and
 * branch, which is how job-service finds the sprint run (its branch).
 */

const PullRequestIdSchema = z
  .string()
  .min(1)
  .max(200)
  .regex(/^pr-[A-Za-z0-9_-]+$/, 'a pull request stream id is pr-<token>');
const RepositorySchema = z.string().regex(/^[A-Za-z0-9_.-]+\/[A-Za-z0-9_.-]+$/, 'a repository is owner/name');
const BranchSchema = z.string().min(1).max(255).regex(/^(?!-)(?!.*\.\.)[^\s~^:?*[\\]+$/, 'a git ref name');
const ShaSchema = z.string().regex(/^[0-9a-f]{40}([0-9a-f]{24})?$/, 'a full git object id');

const pullRequest = {
  pullRequestId: PullRequestIdSchema,
  repository: RepositorySchema,
  branch: BranchSchema,
  baseBranch: BranchSchema,
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
    conflictingFiles: z.array(z.string().min(1)).min(1),
    detectedAt: z.iso.datetime({ offset: true }),
  }),
  examples: {
    valid: [{ ...example, conflictingFiles: ['src/app.ts', 'package.json'], detectedAt: '2026-11-30T07:00:00.000Z' }],
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
    failedChecks: z
      .array(z.object({ name: z.string().min(1), conclusion: z.string().min(1), detailsUrl: z.url().nullable() }))
      .min(1),
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
