// The pure domain of the pr-service: the pull request of one (repository, branch) as a decider,
// its strategies as data, the checks verdict and the effects its state asks for. No NestJS, pg,
// nats, git or octokit here. The rules (PR-n) are defined in docs/pr-service.md.
//
// Where each rule lives:
//   PR-1  one stream per (repository, branch)             @gantry/contracts prs/values.ts   pullRequestIdFor
//   PR-2  the first push opens the PR (SPRINT: a draft)   pull-request/decider.ts + effects.ts (OPEN_PULL_REQUEST)
//   PR-3  STORY: scope = every task of the story          pull-request/phase.ts   scopeDone, strategies.ts
//   PR-4  merge only a head seen green; none ≠ green      pull-request/checks.ts  checksVerdict, decider.ts mergeIfDue (a re-run pending again: PullRequestChecksPending)
//   PR-5  every merge decision records its head           decider.ts mergeIfDue → PullRequestMergeRequested
//   PR-6  auto-merge refused → merge directly             decider.ts mergeIfDue (autoMergeAllowed, autoMergeRefusedFor)
//   PR-7  a new head voids decisions, waits for checks    state.ts newHead, effects.ts DISABLE_AUTO_MERGE
//   PR-8  SPRINT: ready for review when the run is DONE   strategies.ts, effects.ts MARK_READY_FOR_REVIEW
//   PR-9  red checks: CHECKS_FAILED once per head         decider.ts observationEvents
//   PR-10 a conflict: MERGE_CONFLICT once per head        decider.ts observationEvents (cleared when GitHub shows the head mergeable again);
//                                                         files git cannot name: RecordConflictFilesUnknown, phase.ts CONFLICT_LOOKUPS
//   PR-11 mergeable null is no verdict                    decider.ts observationEvents (and the reconciler reads again)
//   PR-14 a refused merge waits for GitHub to change      decider.ts mergeIfDue (a refused merge method: RecordMergeMethodAllowed)
//   PR-15 heads only move forward (GitHub lags a push)    decider.ts observationEvents, RecordBranchPushed (a job-service log started again: pushReportedAt);
//         a force-push back, once GitHub showed the head  shownByGitHub, headWentBack (followed once shown HEAD_BACK_CONFIRM_MS), mergeIfDue (never merged)
//   PR-16 auto-merge turned off on GitHub holds the merge decider.ts observationEvents, mergeIfDue (mergeHeldSince)
//   PR-17 a STORY draft is not merged (a person's "not yet") decider.ts observationEvents, mergeIfDue; state.ts PullRequestDraftChanged
//   PR-18 a base a person changed is followed            decider.ts observationEvents (PullRequestBaseChanged, once); state.ts baseBranchOf
//         not undone by a replica behind the change     decider.ts readHeldBack (olderThanBaseChange by updated_at, baseWentBack)
//   phases                                                pull-request/phase.ts   phaseOf
// Specifications: pull-request/*.spec.ts, given / when / then (DeciderSpecification from @gantry/eventstore/testing).

export type { PullRequestEvent, PullRequestEventType } from './pull-request/events.js';
export type { PullRequestCommand, PullRequestCommandType, GitHubObservation } from './pull-request/commands.js';
export type { PullRequestState, Flow, OpenedPr, Scope } from './pull-request/state.js';
export { initialPullRequestState, evolvePullRequest, pullRequestExists, isSettled, baseBranchOf } from './pull-request/state.js';
export { decidePullRequest, pullRequestDecider, headWentBack, baseWentBack, olderThanBaseChange, readHeldBack, HEAD_BACK_CONFIRM_MS, SHOWN_BACK_READ_GAP_MS } from './pull-request/decider.js';
export type { ReportedCheck, ChecksVerdict } from './pull-request/checks.js';
export { checksVerdict } from './pull-request/checks.js';
export type { StrategyRules } from './pull-request/strategies.js';
export { strategies } from './pull-request/strategies.js';
export { phaseOf, scopeDone, forHead, CONFLICT_LOOKUPS, nextConflictLookupAt } from './pull-request/phase.js';
export type { PullRequestEffect, PullRequestEffectType } from './pull-request/effects.js';
export { pendingEffects } from './pull-request/effects.js';
export { pullRequestView } from './pull-request/view.js';
