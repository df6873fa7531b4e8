import type { MergeMethod, PrStrategy, PullRequestEffectFailureCode, PullRequestFailureCode } from '@gantry/contracts';
import type { PullRequestEvent } from './events.js';

/** What the first push of the branch fixed: the product's rules as they were then. */
export interface Flow {
  productId: string;
  baseBranch: string;
  strategy: PrStrategy;
  mergeMethod: MergeMethod;
  requiredChecks: string[];
  title: string;
  startedAt: string;
  /** The sprint run whose job's push started this cycle (null: not known). */
  sprintRunId?: string | null;
}

export interface OpenedPr {
  number: number;
  url: string;
  nodeId: string;
  draft: boolean;
  /** The base GitHub shows it on: when it was opened or adopted, or since a person changed it (absent: recorded before it was kept, the flow's). */
  baseBranch?: string;
  /**
   * PR-18: the last change of the base recorded — the base before it, and GitHub's `updated_at` of the PR in the read
   * that showed it (null: unknown) — against which a read from a replica of GitHub behind the change is told apart.
   */
  baseChange?: { previousBaseBranch: string; shownUpdatedAt: string | null };
}

/** A scope item is a task of the story (or, for a job without a task, the job itself). */
export interface Scope {
  items: { id: string; done: boolean }[];
  /** The sprint run of this cycle (or, not known, the one DONE), and whether it is DONE. */
  sprintRunId: string | null;
  sprintRunDone: boolean;
  /** Every sprint run of the branch whose DONE was recorded: a cycle started by a later run's push waits for that run's. */
  sprintRunsDone?: string[];
}

export interface PullRequestState {
  pullRequestId: string;
  repository: string;
  branch: string;
  flow: Flow | null;
  /** The head as last learnt (a job's push or GitHub), since when, and from where: older observations do not move it back. */
  headSha: string | null;
  headSince: string | null;
  headSource: 'PUSH' | 'GITHUB' | null;
  /** Every head the branch had, in the order they became the head (PR-15). */
  knownHeads: string[];
  /** The position in the job service's log of the latest push report recorded (PR-15): a report behind it is a late one. */
  pushPosition: number | null;
  /** When the job service took that report (PR-15): a report lower in the log but taken later is from a log started again. */
  pushReportedAt?: string | null;
  pr: OpenedPr | null;
  scope: Scope;
  /** The last verdict seen on a head; it counts only while that head is the current one. */
  /** The names as the verdict's event keeps them, and how many more it counted (docs/pr-service.md, "How large its events and answers may be"). */
  checks: { headSha: string; verdict: 'GREEN' | 'RED'; names: string[]; namesLeftOut: number } | null;
  conflict: { headSha: string; files: string[]; filesLeftOut: number } | null;
  /** PR-10: the look-ups of a conflict's files that failed for a head — how many, and when the last one failed. */
  conflictLookups?: { headSha: string; failures: number; at: string } | null;
  /** PR-5: the head a merge was decided for, and how. */
  mergeDecision: { headSha: string; via: 'AUTO_MERGE' | 'DIRECT'; requestedAt: string } | null;
  /** The head auto-merge was enabled for — or, once another head replaced it, may have been (newHead). */
  autoMergeEnabledFor: string | null;
  /**
   * PR-16: since when someone turned auto-merge off on GitHub (for the head Gantry enabled it for): Gantry
   * merges nothing of the PR until auto-merge is seen on again. For the PR, across heads.
   */
  mergeHeldSince: string | null;
  /** The head GitHub refused auto-merge for because it would merge at once (CLEAN / UNSTABLE): merged directly. */
  autoMergeRefusedFor: string | null;
  /** false once GitHub said the repository does not allow auto-merge. */
  autoMergeAllowed: boolean;
  /** false once GitHub refused a draft: the repository has no drafts, and a SPRINT PR opens ready (PR-2). */
  draftsSupported: boolean;
  /** PR-14: a refused merge of this head, tried again only once GitHub's mergeable_state differs. */
  mergeFailure: { headSha: string; code: PullRequestFailureCode; message: string; mergeableState: string | null; refusedMergeMethod?: MergeMethod } | null;
  readyForReview: boolean;
  outcome: { kind: 'MERGED'; headSha: string; mergeCommitSha: string | null; at: string } | { kind: 'CLOSED'; at: string } | null;
  /** `retryAt`: GitHub's rate limit was used up, and the PR is not worked on before its reset. */
  lastFailure: { effect: string; code: PullRequestEffectFailureCode; message: string; at: string; retryAt?: string } | null;
  updatedAt: string | null;
}

export const initialPullRequestState: PullRequestState = {
  pullRequestId: '',
  repository: '',
  branch: '',
  flow: null,
  headSha: null,
  headSince: null,
  headSource: null,
  knownHeads: [],
  pushPosition: null,
  pushReportedAt: null,
  pr: null,
  scope: { items: [], sprintRunId: null, sprintRunDone: false, sprintRunsDone: [] },
  checks: null,
  conflict: null,
  conflictLookups: null,
  mergeDecision: null,
  autoMergeEnabledFor: null,
  mergeHeldSince: null,
  autoMergeRefusedFor: null,
  autoMergeAllowed: true,
  draftsSupported: true,
  mergeFailure: null,
  readyForReview: false,
  outcome: null,
  lastFailure: null,
  updatedAt: null,
};

/** The base the PR is on: GitHub's as last recorded once it is opened, the product's before (PR-2, PR-18). */
export function baseBranchOf(state: PullRequestState): string | null {
  return state.pr?.baseBranch ?? state.flow?.baseBranch ?? null;
}

/** A conflict git could not name, left as the PR's last failure (PR-10), is over with the conflict; another failure stays. */
function withoutUnnamedConflict(lastFailure: PullRequestState['lastFailure']): PullRequestState['lastFailure'] {
  return lastFailure?.effect === 'READ_PULL_REQUEST' && lastFailure.code === 'MERGE_CONFLICT' ? null : lastFailure;
}

/** Whether anything at all was recorded on this stream. */
export function pullRequestExists(state: PullRequestState): boolean {
  return state.pullRequestId !== '';
}

/** Merged or closed: nothing more is done for this head unless the branch is pushed again. */
export function isSettled(state: PullRequestState): boolean {
  return state.outcome !== null;
}

/** The sprint runs whose DONE was recorded (a state kept from before the list: the run it says is DONE). */
export function sprintRunsDoneOf(scope: Scope): string[] {
  return scope.sprintRunsDone ?? (scope.sprintRunDone && scope.sprintRunId ? [scope.sprintRunId] : []);
}

function withItem(scope: Scope, id: string, done: boolean): Scope {
  const exists = scope.items.some((i) => i.id === id);
  return { ...scope, items: exists ? scope.items.map((i) => (i.id === id ? { id, done } : i)) : [...scope.items, { id, done }] };
}

/**
 * What a new head voids: every verdict and decision about the previous one. An auto-merge asked for
 * the previous head whose answer was never recorded (a crash or a lost reply after GitHub enabled it)
 * may be on at GitHub, which keeps it across a push: it counts as enabled for that head, so it is
 * disabled before anything else (PR-7; the effect reads GitHub first and calls nothing if it is off).
 */
function newHead(state: PullRequestState, headSha: string, at: string, source: 'PUSH' | 'GITHUB'): PullRequestState {
  const knownHeads = (state.knownHeads ?? []).includes(headSha) ? state.knownHeads : [...(state.knownHeads ?? []), headSha];
  const asked = state.mergeDecision?.via === 'AUTO_MERGE' && state.mergeDecision.headSha !== headSha ? state.mergeDecision.headSha : null;
  const autoMergeEnabledFor = state.autoMergeEnabledFor ?? asked;
  return { ...state, headSha, headSince: at, headSource: source, knownHeads, mergeDecision: null, autoMergeRefusedFor: null, mergeFailure: null, autoMergeEnabledFor };
}

export function evolvePullRequest(state: PullRequestState, event: PullRequestEvent): PullRequestState {
  const d = event.data;
  const s: PullRequestState = { ...state, pullRequestId: d.pullRequestId, repository: d.repository, branch: d.branch };
  switch (event.type) {
    case 'PullRequestScopeTaskQueued': {
      let scope = s.scope;
      for (const id of event.data.storyTaskIds) if (!scope.items.some((i) => i.id === id)) scope = withItem(scope, id, false);
      scope = withItem(scope, event.data.taskId, false);
      return { ...s, scope, updatedAt: event.data.queuedAt };
    }
    case 'PullRequestScopeTaskDone':
      return { ...s, scope: withItem(s.scope, event.data.taskId, true), updatedAt: event.data.doneAt };
    case 'PullRequestScopeTaskReopened':
      return { ...s, scope: withItem(s.scope, event.data.taskId, false), updatedAt: event.data.reopenedAt };
    case 'PullRequestSprintRunDone': {
      // PR-8: a sprint run DONE makes the open PR's scope done (a later run may have taken the branch over from a failed
      // one). Once the PR merged or closed, only its own run's DONE counts for it: that of another run was handled before
      // that run's first push, and is kept for the cycle the push starts.
      const sprintRunsDone = [...sprintRunsDoneOf(s.scope), event.data.sprintRunId];
      const ours = !isSettled(s) || !s.flow?.sprintRunId || s.flow.sprintRunId === event.data.sprintRunId;
      const scope = ours ? { ...s.scope, sprintRunId: event.data.sprintRunId, sprintRunDone: true, sprintRunsDone } : { ...s.scope, sprintRunsDone };
      return { ...s, scope, updatedAt: event.data.doneAt };
    }
    case 'PullRequestFlowStarted': {
      const e = event.data;
      // A first push, or a push after the previous PR of the branch was merged or closed: a new cycle.
      // PR-8: a cycle started by a sprint run's push is that run's: its scope is done once that run is DONE, not an earlier run of the branch.
      const scope = e.sprintRunId ? { ...s.scope, sprintRunId: e.sprintRunId, sprintRunDone: sprintRunsDoneOf(s.scope).includes(e.sprintRunId) } : s.scope;
      return {
        ...newHead(s, e.headSha, e.startedAt, 'PUSH'),
        pushPosition: e.pushPosition ?? s.pushPosition ?? null,
        pushReportedAt: e.pushPosition !== undefined ? (e.pushReportedAt ?? null) : (s.pushReportedAt ?? null),
        scope,
        flow: {
          productId: e.productId,
          baseBranch: e.baseBranch,
          strategy: e.strategy,
          mergeMethod: e.mergeMethod,
          requiredChecks: e.requiredChecks,
          title: e.title,
          startedAt: e.startedAt,
          sprintRunId: e.sprintRunId ?? null,
        },
        pr: null,
        checks: null,
        conflict: null,
        autoMergeEnabledFor: null,
        mergeHeldSince: null,
        readyForReview: false,
        outcome: null,
        lastFailure: null,
        updatedAt: e.startedAt,
      };
    }
    case 'PullRequestHeadMoved':
      return {
        ...newHead(s, event.data.headSha, event.data.movedAt, event.data.source),
        pushPosition: event.data.pushPosition ?? s.pushPosition ?? null,
        pushReportedAt: event.data.pushPosition !== undefined ? (event.data.pushReportedAt ?? null) : (s.pushReportedAt ?? null),
        updatedAt: event.data.movedAt,
      };
    case 'PullRequestOpened': {
      const e = event.data;
      const pr: OpenedPr = { number: e.prNumber, url: e.prUrl, nodeId: e.nodeId, draft: e.draft, ...(e.baseBranch !== undefined ? { baseBranch: e.baseBranch } : {}) };
      return { ...s, pr, lastFailure: null, updatedAt: e.openedAt };
    }
    case 'PullRequestDraftsNotSupported':
      return { ...s, draftsSupported: false, updatedAt: event.data.refusedAt };
    case 'PullRequestChecksPassed':
      return { ...s, checks: { headSha: event.data.headSha, verdict: 'GREEN', names: event.data.checks, namesLeftOut: event.data.checksLeftOut ?? 0 }, updatedAt: event.data.passedAt };
    case 'PullRequestChecksFailed': {
      // PR-4 / PR-9: red on a head voids a merge decided for it while it was green (a check re-run, or a
      // new check run, after the green). Auto-merge enabled — or asked, its answer never recorded — for
      // it is disabled: GitHub still merges a PR whose failing check its branch protection does not require.
      const decided = s.mergeDecision?.headSha === event.data.headSha ? s.mergeDecision : null;
      const asked = decided?.via === 'AUTO_MERGE' ? decided.headSha : null;
      return {
        ...s,
        checks: { headSha: event.data.headSha, verdict: 'RED', names: event.data.failedChecks.map((c) => c.name), namesLeftOut: event.data.failedChecksLeftOut ?? 0 },
        mergeDecision: decided ? null : s.mergeDecision,
        autoMergeEnabledFor: s.autoMergeEnabledFor ?? asked,
        updatedAt: event.data.detectedAt,
      };
    }
    case 'PullRequestChecksPending': {
      // PR-4: the head is not green while a check of it runs again. A direct merge decided on the green and not
      // carried out yet is withdrawn; auto-merge asked or enabled for the head stays: GitHub merges it only once
      // the checks its branch protection requires pass, and a re-run that turns red disables it (PR-9).
      const withdrawn = s.mergeDecision?.headSha === event.data.headSha && s.mergeDecision.via === 'DIRECT';
      return {
        ...s,
        checks: s.checks?.headSha === event.data.headSha ? null : s.checks,
        mergeDecision: withdrawn ? null : s.mergeDecision,
        updatedAt: event.data.pendingAt,
      };
    }
    case 'PullRequestMergeConflict':
      return { ...s, conflict: { headSha: event.data.headSha, files: event.data.conflictingFiles, filesLeftOut: event.data.conflictingFilesLeftOut ?? 0 }, updatedAt: event.data.detectedAt };
    case 'PullRequestConflictFilesUnknown':
      return { ...s, conflictLookups: { headSha: event.data.headSha, failures: event.data.lookups, at: event.data.failedAt }, updatedAt: event.data.failedAt };
    case 'PullRequestMergeConflictCleared': {
      const head = event.data.headSha;
      return {
        ...s,
        conflict: s.conflict?.headSha === head ? null : s.conflict,
        conflictLookups: s.conflictLookups?.headSha === head ? null : s.conflictLookups,
        lastFailure: withoutUnnamedConflict(s.lastFailure),
        updatedAt: event.data.clearedAt,
      };
    }
    case 'PullRequestBaseChanged':
      // PR-18: GitHub works out the PR's mergeability against the new base, so what was learnt against the previous one
      // is over: a conflict (its files, the look-ups of them, one left unnamed as the last failure) and a merge GitHub
      // refused for the PR as it was — not one refused for the repository's merge method, a setting of the repository.
      // The head's checks are the head commit's and stay; so do a merge decided and auto-merge, which GitHub keeps
      // across a base change by someone with write access (turned off by another, a read shows it: PR-16).
      return {
        ...s,
        pr: s.pr
          ? { ...s.pr, baseBranch: event.data.baseBranch, baseChange: { previousBaseBranch: event.data.previousBaseBranch, shownUpdatedAt: event.data.shownUpdatedAt ?? null } }
          : s.pr,
        conflict: null,
        conflictLookups: null,
        mergeFailure: s.mergeFailure?.refusedMergeMethod ? s.mergeFailure : null,
        lastFailure: withoutUnnamedConflict(s.lastFailure),
        updatedAt: event.data.changedAt,
      };
    case 'PullRequestMergeRequested': {
      const e = event.data;
      return { ...s, mergeDecision: { headSha: e.headSha, via: e.via, requestedAt: e.requestedAt }, mergeFailure: null, updatedAt: e.requestedAt };
    }
    case 'PullRequestAutoMergeEnabled':
      // On again on GitHub — asked by Gantry, or turned on by someone while the merge was held (PR-16).
      return { ...s, autoMergeEnabledFor: event.data.headSha, mergeHeldSince: null, lastFailure: null, updatedAt: event.data.enabledAt };
    case 'PullRequestAutoMergeRefused': {
      const e = event.data;
      return {
        ...s,
        mergeDecision: null,
        autoMergeAllowed: e.reason === 'NOT_ALLOWED' ? false : s.autoMergeAllowed,
        autoMergeRefusedFor: e.reason === 'NOT_ALLOWED' ? s.autoMergeRefusedFor : e.headSha,
        updatedAt: e.refusedAt,
      };
    }
    case 'PullRequestAutoMergeDisabled':
      return { ...s, autoMergeEnabledFor: null, updatedAt: event.data.disabledAt };
    case 'PullRequestAutoMergeDisabledOnGitHub':
      // PR-16: the merge decided for the head is withdrawn by someone; nothing is merged until auto-merge is on again.
      return { ...s, autoMergeEnabledFor: null, mergeDecision: null, mergeHeldSince: event.data.disabledAt, updatedAt: event.data.disabledAt };
    case 'PullRequestDraftChanged':
      // PR-17: a draft is a person saying "not yet": the merge decided for its head is withdrawn, and decided
      // again (mergeIfDue) once the PR is ready. GitHub turned off any auto-merge when it became a draft.
      return {
        ...s,
        pr: s.pr ? { ...s.pr, draft: event.data.draft } : s.pr,
        mergeDecision: event.data.draft ? null : s.mergeDecision,
        updatedAt: event.data.changedAt,
      };
    case 'PullRequestMergeFailed': {
      const e = event.data;
      return {
        ...s,
        mergeDecision: null,
        mergeFailure: { headSha: e.headSha, code: e.code, message: e.message, mergeableState: e.mergeableState, ...(e.refusedMergeMethod ? { refusedMergeMethod: e.refusedMergeMethod } : {}) },
        updatedAt: e.failedAt,
      };
    }
    case 'PullRequestMergeMethodAllowed':
      // The refusal of the head's merge was the repository's setting, changed since: the merge is decided again (mergeIfDue).
      // The PR's last failure is that refusal (no merge was asked for since), and is over.
      return {
        ...s,
        mergeFailure: s.mergeFailure?.headSha === event.data.headSha ? null : s.mergeFailure,
        lastFailure: s.lastFailure?.effect === 'ENABLE_AUTO_MERGE' || s.lastFailure?.effect === 'MERGE' ? null : s.lastFailure,
        updatedAt: event.data.allowedAt,
      };
    case 'PullRequestMerged': {
      const e = event.data;
      return { ...s, outcome: { kind: 'MERGED', headSha: e.headSha, mergeCommitSha: e.mergeCommitSha, at: e.mergedAt }, updatedAt: e.mergedAt };
    }
    case 'PullRequestClosed':
      return { ...s, outcome: { kind: 'CLOSED', at: event.data.closedAt }, updatedAt: event.data.closedAt };
    case 'PullRequestReopened':
      // Closing a PR clears its auto-merge on GitHub: what was decided or asked before the close is void,
      // and the PR's head (and any push made while it was closed) waits for its own read.
      return {
        ...s,
        outcome: null,
        mergeDecision: null,
        autoMergeEnabledFor: null,
        autoMergeRefusedFor: null,
        mergeFailure: null,
        updatedAt: event.data.reopenedAt,
      };
    case 'PullRequestReadyForReview':
      return { ...s, pr: s.pr ? { ...s.pr, draft: false } : s.pr, readyForReview: true, lastFailure: null, updatedAt: event.data.markedAt };
    case 'PullRequestEffectFailed': {
      const e = event.data;
      return { ...s, lastFailure: { effect: e.effect, code: e.code, message: e.message, at: e.failedAt, ...(e.retryAt ? { retryAt: e.retryAt } : {}) }, updatedAt: e.failedAt };
    }
    default:
      return assertNever(event);
  }
}

function assertNever(value: never): never {
  throw new Error(`unhandled pull request event ${JSON.stringify(value)}`);
}
