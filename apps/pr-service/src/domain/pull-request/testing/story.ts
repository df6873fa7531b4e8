import { pullRequestIdFor, type MergeMethod, type PrStrategy } from '@gantry/contracts';
import type { ReportedCheck } from '../checks.js';
import type { GitHubObservation, PullRequestCommand } from '../commands.js';
import type { PullRequestEvent } from '../events.js';

/** One pull request's story, built from small pieces, for the specifications. */
export const REPO = 'acme/shop';
export const BRANCH = 'story/ST-1';
export const PR_ID = pullRequestIdFor(REPO, BRANCH);
export const URL = 'https://github.com/acme/shop/pull/7';
export const NODE = 'PR_kwDOA7';
export const H1 = '1111111111111111111111111111111111111111';
export const H2 = '2222222222222222222222222222222222222222';
export const H3 = '3333333333333333333333333333333333333333';
export const MERGE_COMMIT = 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa';
export const JOB1 = 'job-00000000-0000-4000-8000-000000000001';
export const JOB2 = 'job-00000000-0000-4000-8000-000000000002';
export const RUN = 'sprintrun-00000000-0000-4000-8000-000000000009';
export const RUN2 = 'sprintrun-00000000-0000-4000-8000-000000000010';

const T0 = Date.parse('2026-11-30T08:00:00.000Z');
/** The instant `s` seconds after the story begins. */
export const at = (s: number) => new Date(T0 + s * 1000).toISOString();

const id = { pullRequestId: PR_ID, repository: REPO, branch: BRANCH };
const cmd = <C extends PullRequestCommand>(type: C['type'], s: number, data: Omit<C['data'], keyof typeof id | 'now'>): PullRequestCommand =>
  ({ type, data: { ...id, ...data, now: at(s) } }) as PullRequestCommand;

export interface FlowOptions {
  strategy?: PrStrategy;
  requiredChecks?: string[];
  mergeMethod?: MergeMethod;
}

const flowOf = (o: FlowOptions) => ({
  productId: 'product-42',
  baseBranch: 'main',
  strategy: o.strategy ?? 'STORY',
  mergeMethod: o.mergeMethod ?? 'SQUASH',
  requiredChecks: o.requiredChecks ?? ['ci/test'],
  title: 'Story ST-1',
});

export const when = {
  queued: (s: number, taskId: string, storyTaskIds = ['T-1', 'T-2'], jobId = JOB1) =>
    cmd('RecordTaskQueued', s, { jobId, taskId, storyId: 'ST-1', storyTaskIds }),
  done: (s: number, taskId: string, jobId = JOB1) => cmd('RecordTaskDone', s, { jobId, taskId }),
  reopened: (s: number, taskId: string) => cmd('RecordTaskReopened', s, { jobId: JOB1, taskId, reason: 'checks failed on its head: ci/test' }),
  sprintDone: (s: number, sprintRunId = RUN) => cmd('RecordSprintRunDone', s, { sprintRunId }),
  /** `position`: the report's position in the job service's log (null: not known). */
  pushed: (s: number, headSha: string, o: FlowOptions = {}, pushedAtS = s, position: number | null = null, sprintRunId: string | null = null) =>
    cmd('RecordBranchPushed', s, { headSha, pushedAt: at(pushedAtS), position, jobId: JOB1, sprintRunId, flow: flowOf(o) }),
  opened: (s: number, headSha = H1, draft = false, adopted = false) =>
    cmd('RecordOpened', s, { prNumber: 7, prUrl: URL, nodeId: NODE, draft, headSha, adopted }),
  observed: (s: number, o: Partial<GitHubObservation> = {}) => cmd('RecordObservation', s, { observation: observation(s, o) }),
  ready: (s: number, alreadyReady = false) => cmd('RecordReadyForReview', s, { headSha: H1, alreadyReady }),
  autoMergeEnabled: (s: number, headSha = H1) => cmd('RecordAutoMergeEnabled', s, { headSha }),
  autoMergeRefused: (s: number, reason: 'CLEAN' | 'UNSTABLE' | 'NOT_ALLOWED', headSha = H1) =>
    cmd('RecordAutoMergeRefused', s, { headSha, reason, message: refusal[reason] }),
  autoMergeDisabled: (s: number, headSha = H1) => cmd('RecordAutoMergeDisabled', s, { headSha }),
  merged: (s: number, headSha = H1) => cmd('RecordMerged', s, { headSha, mergeCommitSha: MERGE_COMMIT }),
  mergeFailed: (s: number, headSha = H1, mergeableState: string | null = 'blocked') =>
    cmd('RecordMergeFailed', s, { headSha, code: 'UNKNOWN', message: 'At least 1 approving review is required', mergeableState }),
  draftsNotSupported: (s: number) => cmd('RecordDraftsNotSupported', s, { message: DRAFTS_REFUSED }),
  methodAllowed: (s: number, mergeMethod: MergeMethod, headSha = H1) => cmd('RecordMergeMethodAllowed', s, { headSha, mergeMethod }),
  conflictFilesUnknown: (s: number, headSha = H1) => cmd('RecordConflictFilesUnknown', s, { headSha, message: GIT_FETCH_FAILED }),
  effectFailed: (s: number, message = 'Bad credentials') => cmd('RecordEffectFailed', s, { effect: 'OPEN_PULL_REQUEST', code: 'GH_AUTH_ERROR', message }),
};

const DRAFTS_REFUSED = 'Draft pull requests are not supported in this repository.';
const GIT_FETCH_FAILED = 'git fetch failed (exit 128): repository not found';

const refusal = {
  CLEAN: 'Pull request Pull request is in clean status',
  UNSTABLE: 'Pull request Pull request is in unstable status',
  NOT_ALLOWED: 'Auto merge is not allowed for this repository',
};

export const check = (name: string, state: ReportedCheck['state'], source: ReportedCheck['source'] = 'check_run'): ReportedCheck => ({
  name,
  source,
  state,
  conclusion: state === 'SUCCESS' ? 'success' : state === 'FAILURE' ? 'failure' : null,
  detailsUrl: null,
});

export function observation(s: number, o: Partial<GitHubObservation> = {}): GitHubObservation {
  return {
    prNumber: 7,
    prUrl: URL,
    nodeId: NODE,
    state: 'open',
    merged: false,
    mergeCommitSha: null,
    draft: false,
    headSha: H1,
    baseBranch: 'main',
    mergeable: true,
    mergeableState: 'blocked',
    autoMergeEnabled: false,
    checks: [],
    conflictingFiles: null,
    observedAt: at(s),
    ...o,
  };
}

/** The events the machine records, for building histories. */
export const event = {
  queued: (s: number, taskId: string, storyTaskIds = ['T-1', 'T-2'], jobId = JOB1): PullRequestEvent => ({
    type: 'PullRequestScopeTaskQueued',
    data: { ...id, jobId, taskId, storyId: 'ST-1', storyTaskIds, queuedAt: at(s) },
  }),
  done: (s: number, taskId: string, jobId = JOB1): PullRequestEvent => ({ type: 'PullRequestScopeTaskDone', data: { ...id, jobId, taskId, doneAt: at(s) } }),
  sprintDone: (s: number, sprintRunId = RUN): PullRequestEvent => ({ type: 'PullRequestSprintRunDone', data: { ...id, sprintRunId, doneAt: at(s) } }),
  /** `pushPosition`: the report's position in the job service's log; `reportedAtS`: when it was reported (default: `s`). */
  started: (s: number, headSha = H1, o: FlowOptions = {}, pushPosition?: number, sprintRunId?: string, reportedAtS = s): PullRequestEvent => ({
    type: 'PullRequestFlowStarted',
    data: {
      ...id, ...flowOf(o), headSha, jobId: JOB1,
      ...(pushPosition !== undefined ? { pushPosition, pushReportedAt: at(reportedAtS) } : {}), ...(sprintRunId !== undefined ? { sprintRunId } : {}), startedAt: at(s),
    },
  }),
  moved: (s: number, headSha: string, previousHeadSha: string, source: 'PUSH' | 'GITHUB', pushPosition?: number, reportedAtS = s): PullRequestEvent => ({
    type: 'PullRequestHeadMoved',
    data: { ...id, headSha, previousHeadSha, source, ...(pushPosition !== undefined ? { pushPosition, pushReportedAt: at(reportedAtS) } : {}), movedAt: at(s) },
  }),
  opened: (s: number, draft = false, headSha = H1, adopted = false): PullRequestEvent => ({
    type: 'PullRequestOpened',
    data: { ...id, prNumber: 7, prUrl: URL, nodeId: NODE, draft, headSha, adopted, openedAt: at(s) },
  }),
  passed: (s: number, headSha = H1, checks = ['ci/test'], checksLeftOut = 0): PullRequestEvent => ({ type: 'PullRequestChecksPassed', data: { ...id, headSha, checks, checksLeftOut, passedAt: at(s) } }),
  failed: (s: number, headSha = H1): PullRequestEvent => ({
    type: 'PullRequestChecksFailed',
    data: {
      ...id, baseBranch: 'main', prNumber: 7, prUrl: URL, headSha,
      failedChecks: [{ name: 'ci/test', conclusion: 'failure', detailsUrl: null }], failedChecksLeftOut: 0, detectedAt: at(s),
    },
  }),
  checksPending: (s: number, headSha = H1): PullRequestEvent => ({ type: 'PullRequestChecksPending', data: { ...id, headSha, pendingAt: at(s) } }),
  conflict: (s: number, headSha = H1, files = ['src/app.ts'], leftOut = 0): PullRequestEvent => ({
    type: 'PullRequestMergeConflict',
    data: { ...id, baseBranch: 'main', prNumber: 7, prUrl: URL, headSha, conflictingFiles: files, conflictingFilesLeftOut: leftOut, detectedAt: at(s) },
  }),
  conflictCleared: (s: number, headSha = H1): PullRequestEvent => ({
    type: 'PullRequestMergeConflictCleared',
    data: { ...id, prNumber: 7, headSha, clearedAt: at(s) },
  }),
  mergeRequested: (s: number, via: 'AUTO_MERGE' | 'DIRECT', headSha = H1): PullRequestEvent => ({
    type: 'PullRequestMergeRequested',
    data: { ...id, headSha, via, mergeMethod: 'SQUASH', requestedAt: at(s) },
  }),
  autoMergeEnabled: (s: number, headSha = H1): PullRequestEvent => ({ type: 'PullRequestAutoMergeEnabled', data: { ...id, headSha, enabledAt: at(s) } }),
  autoMergeRefused: (s: number, reason: 'CLEAN' | 'UNSTABLE' | 'NOT_ALLOWED', headSha = H1): PullRequestEvent => ({
    type: 'PullRequestAutoMergeRefused',
    data: { ...id, headSha, reason, message: refusal[reason], refusedAt: at(s) },
  }),
  autoMergeDisabled: (s: number, headSha = H1): PullRequestEvent => ({ type: 'PullRequestAutoMergeDisabled', data: { ...id, headSha, disabledAt: at(s) } }),
  autoMergeDisabledOnGitHub: (s: number, headSha = H1): PullRequestEvent => ({
    type: 'PullRequestAutoMergeDisabledOnGitHub',
    data: { ...id, prNumber: 7, headSha, disabledAt: at(s) },
  }),
  draftChanged: (s: number, draft: boolean, headSha = H1): PullRequestEvent => ({
    type: 'PullRequestDraftChanged',
    data: { ...id, prNumber: 7, headSha, draft, changedAt: at(s) },
  }),
  /** `shownUpdatedAt`: GitHub's updated_at of the PR in the read that showed the change. */
  baseChanged: (s: number, baseBranch: string, previousBaseBranch = 'main', headSha = H1, shownUpdatedAt: string | null = null): PullRequestEvent => ({
    type: 'PullRequestBaseChanged',
    data: { ...id, prNumber: 7, headSha, baseBranch, previousBaseBranch, shownUpdatedAt, changedAt: at(s) },
  }),
  mergeFailed: (s: number, headSha = H1, mergeableState: string | null = 'blocked'): PullRequestEvent => ({
    type: 'PullRequestMergeFailed',
    data: { ...id, headSha, code: 'UNKNOWN', message: 'At least 1 approving review is required', mergeableState, failedAt: at(s) },
  }),
  merged: (s: number, headSha = H1, mergeCommitSha: string | null = MERGE_COMMIT): PullRequestEvent => ({
    type: 'PullRequestMerged',
    data: { ...id, prNumber: 7, prUrl: URL, headSha, mergeCommitSha, mergedAt: at(s) },
  }),
  closed: (s: number): PullRequestEvent => ({ type: 'PullRequestClosed', data: { ...id, prNumber: 7, closedAt: at(s) } }),
  reopened: (s: number, headSha = H1): PullRequestEvent => ({ type: 'PullRequestReopened', data: { ...id, prNumber: 7, headSha, reopenedAt: at(s) } }),
  ready: (s: number, alreadyReady = false, headSha = H1): PullRequestEvent => ({
    type: 'PullRequestReadyForReview',
    data: { ...id, prNumber: 7, prUrl: URL, headSha, alreadyReady, markedAt: at(s) },
  }),
  draftsNotSupported: (s: number): PullRequestEvent => ({ type: 'PullRequestDraftsNotSupported', data: { ...id, message: DRAFTS_REFUSED, refusedAt: at(s) } }),
  conflictFilesUnknown: (s: number, lookups: number, headSha = H1): PullRequestEvent => ({
    type: 'PullRequestConflictFilesUnknown',
    data: { ...id, headSha, lookups, message: GIT_FETCH_FAILED, failedAt: at(s) },
  }),
  effectFailed: (s: number, message = 'Bad credentials'): PullRequestEvent => ({
    type: 'PullRequestEffectFailed',
    data: { ...id, effect: 'OPEN_PULL_REQUEST', code: 'GH_AUTH_ERROR', message, failedAt: at(s) },
  }),
};
