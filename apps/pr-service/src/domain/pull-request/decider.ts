import { checkNameKept, firstWithin, MAX_PR_DETAILS_URL_CHARS, MAX_PR_LIST_BYTES, messageKept } from '@gantry/contracts';
import { checksVerdict } from './checks.js';
import type { GitHubObservation, PullRequestCommand } from './commands.js';
import type { PullRequestEvent } from './events.js';
import { CONFLICT_LOOKUPS, forHead, scopeDone } from './phase.js';
import { strategies } from './strategies.js';
import { baseBranchOf, evolvePullRequest, initialPullRequestState, isSettled, sprintRunsDoneOf, type PullRequestState } from './state.js';

/**
 * The pull request of one (repository, branch) as a decider (docs/pr-service.md). A command records
 * a fact; the decider turns it into the events that change something (a fact already known emits
 * nothing), and then decides whether the PR is now due to be merged (PR-3, PR-4, PR-5).
 */
export function decidePullRequest(command: PullRequestCommand, state: PullRequestState): PullRequestEvent[] {
  const facts = factEvents(command, state);
  const after = facts.reduce(evolvePullRequest, state);
  // GitHub's mergeable_state counts only for the head it was shown with: a read of a head the branch had before (PR-15)
  // says nothing about the current one, so a merge GitHub refused for the current head is not decided again from it.
  const o = command.type === 'RecordObservation' ? command.data.observation : null;
  const observed = o && o.headSha === after.headSha ? o.mergeableState : null;
  return [...facts, ...mergeIfDue(after, command.data.now, observed)];
}

const idOf = (c: PullRequestCommand) => ({ pullRequestId: c.data.pullRequestId, repository: c.data.repository, branch: c.data.branch });

function factEvents(command: PullRequestCommand, state: PullRequestState): PullRequestEvent[] {
  const id = idOf(command);
  const now = command.data.now;
  switch (command.type) {
    case 'RecordTaskQueued': {
      const d = command.data;
      const known = (taskId: string) => state.scope.items.find((i) => i.id === taskId);
      const changes = known(d.taskId)?.done !== false || d.storyTaskIds.some((t) => !known(t));
      if (!changes) return [];
      return [{ type: 'PullRequestScopeTaskQueued', data: { ...id, jobId: d.jobId, taskId: d.taskId, storyId: d.storyId, storyTaskIds: d.storyTaskIds, queuedAt: now } }];
    }
    case 'RecordTaskDone': {
      const d = command.data;
      if (state.scope.items.find((i) => i.id === d.taskId)?.done) return [];
      return [{ type: 'PullRequestScopeTaskDone', data: { ...id, jobId: d.jobId, taskId: d.taskId, doneAt: now } }];
    }
    case 'RecordTaskReopened': {
      const d = command.data;
      if (!state.scope.items.find((i) => i.id === d.taskId)?.done) return [];
      return [{ type: 'PullRequestScopeTaskReopened', data: { ...id, jobId: d.jobId, taskId: d.taskId, reason: messageKept(d.reason), reopenedAt: now } }];
    }
    case 'RecordSprintRunDone':
      if (sprintRunsDoneOf(state.scope).includes(command.data.sprintRunId)) return [];
      return [{ type: 'PullRequestSprintRunDone', data: { ...id, sprintRunId: command.data.sprintRunId, doneAt: now } }];
    case 'RecordBranchPushed': {
      const d = command.data;
      // PR-15: the jobs of a branch push one after the other, so a report behind the latest one recorded in the job
      // service's log is of an older push, handed back and delivered again after the later one: it moves nothing. A log
      // whose positions started again (the job service's database reset) is told by time: a report lower in the log yet
      // taken after the latest one recorded is of a later push — a late report was taken before it.
      const restarted = state.pushReportedAt != null && d.pushedAt > state.pushReportedAt;
      const behind = d.position !== null && state.pushPosition != null && d.position < state.pushPosition && !restarted;
      const pushPosition = d.position !== null ? { pushPosition: d.position, pushReportedAt: d.pushedAt } : {};
      // PR-2: the first push starts the flow (and opens the PR); so does a push after the PR was merged or closed —
      // of a head the branch never had: one it had is a late report (PR-15), and no new work to open a PR for.
      if (!state.flow || (isSettled(state) && d.headSha !== settledHead(state) && !(state.knownHeads ?? []).includes(d.headSha) && !behind)) {
        const sprintRun = d.sprintRunId ? { sprintRunId: d.sprintRunId } : {};
        return [{ type: 'PullRequestFlowStarted', data: { ...id, ...d.flow, headSha: d.headSha, jobId: d.jobId, ...pushPosition, ...sprintRun, startedAt: now } }];
      }
      if (isSettled(state) || d.headSha === state.headSha || !state.headSha) return [];
      // PR-15: a head the branch already had is a late report; so is a push reported before GitHub showed a later head.
      if (state.knownHeads.includes(d.headSha) || behind) return [];
      if (state.headSource === 'GITHUB' && state.headSince !== null && d.pushedAt < state.headSince) return [];
      return [{ type: 'PullRequestHeadMoved', data: { ...id, headSha: d.headSha, previousHeadSha: state.headSha, source: 'PUSH', ...pushPosition, movedAt: now } }];
    }
    case 'RecordOpened': {
      const d = command.data;
      if (!state.flow || isSettled(state) || state.pr?.number === d.prNumber) return [];
      return [
        {
          type: 'PullRequestOpened',
          data: {
            ...id,
            prNumber: d.prNumber,
            prUrl: d.prUrl,
            nodeId: d.nodeId,
            draft: d.draft,
            headSha: d.headSha,
            adopted: d.adopted,
            ...(d.baseBranch !== undefined ? { baseBranch: d.baseBranch } : {}),
            openedAt: now,
          },
        },
      ];
    }
    case 'RecordDraftsNotSupported':
      // Known for the stream, across cycles: a later PR of the branch opens ready straight away.
      if (state.draftsSupported === false) return [];
      return [{ type: 'PullRequestDraftsNotSupported', data: { ...id, message: messageKept(command.data.message), refusedAt: now } }];
    case 'RecordObservation':
      return observationEvents(command.data.observation, state, id, now);
    case 'RecordReadyForReview': {
      const d = command.data;
      if (state.readyForReview || !state.pr || isSettled(state)) return [];
      return [{ type: 'PullRequestReadyForReview', data: { ...id, prNumber: state.pr.number, prUrl: state.pr.url, headSha: d.headSha, alreadyReady: d.alreadyReady, markedAt: now } }];
    }
    case 'RecordAutoMergeEnabled':
      if (state.autoMergeEnabledFor === command.data.headSha || isSettled(state)) return [];
      return [{ type: 'PullRequestAutoMergeEnabled', data: { ...id, headSha: command.data.headSha, enabledAt: now } }];
    case 'RecordAutoMergeRefused': {
      const d = command.data;
      if (isSettled(state)) return [];
      return [{ type: 'PullRequestAutoMergeRefused', data: { ...id, headSha: d.headSha, reason: d.reason, message: messageKept(d.message), refusedAt: now } }];
    }
    case 'RecordAutoMergeDisabled':
      if (state.autoMergeEnabledFor !== command.data.headSha) return [];
      return [{ type: 'PullRequestAutoMergeDisabled', data: { ...id, headSha: command.data.headSha, disabledAt: now } }];
    case 'RecordMerged':
      if (isSettled(state) || !state.pr) return [];
      return [merged(state, id, command.data.headSha, command.data.mergeCommitSha, now)];
    case 'RecordConflictFilesUnknown': {
      // PR-10: counted per head in the log, so the bound on look-ups holds whatever process makes them. The last one
      // leaves the conflict visible as the PR's last failure, in the same append (a crash cannot keep one without the other).
      const d = command.data;
      if (!state.pr || isSettled(state) || d.headSha !== state.headSha || forHead(state, state.conflict)) return [];
      const before = forHead(state, state.conflictLookups)?.failures ?? 0;
      if (before >= CONFLICT_LOOKUPS) return [];
      const lookups = before + 1;
      const message = messageKept(d.message);
      const failed: PullRequestEvent = { type: 'PullRequestConflictFilesUnknown', data: { ...id, headSha: d.headSha, lookups, message, failedAt: now } };
      if (lookups < CONFLICT_LOOKUPS) return [failed];
      const visible = `GitHub reports ${state.repository}#${state.pr.number} conflicting on ${d.headSha}, and git could not work out the files in conflict (${CONFLICT_LOOKUPS} tries, not tried again for this head): ${d.message}`;
      return [failed, { type: 'PullRequestEffectFailed', data: { ...id, effect: 'READ_PULL_REQUEST', code: 'MERGE_CONFLICT', message: messageKept(visible), failedAt: now } }];
    }
    case 'RecordMergeFailed': {
      const d = command.data;
      if (isSettled(state)) return [];
      const method = d.refusedMergeMethod ? { refusedMergeMethod: d.refusedMergeMethod } : {};
      return [{ type: 'PullRequestMergeFailed', data: { ...id, headSha: d.headSha, code: d.code, message: messageKept(d.message), mergeableState: d.mergeableState, ...method, failedAt: now } }];
    }
    case 'RecordMergeMethodAllowed': {
      // PR-14: a merge refused for the repository's merge method waits for nothing GitHub shows on the PR; the
      // repository's settings are read instead, and allowed now, the merge of the head is decided again.
      const d = command.data;
      if (isSettled(state) || forHead(state, state.mergeFailure)?.refusedMergeMethod !== d.mergeMethod || state.mergeFailure?.headSha !== d.headSha) return [];
      return [{ type: 'PullRequestMergeMethodAllowed', data: { ...id, headSha: d.headSha, mergeMethod: d.mergeMethod, allowedAt: now } }];
    }
    case 'RecordEffectFailed': {
      const d = command.data;
      const last = state.lastFailure;
      const message = messageKept(d.message);
      // The same failure again (a credential still refused) is in the log once, not at every retry.
      if (isSettled(state) || (last && last.effect === d.effect && last.code === d.code && last.message === message)) return [];
      return [{ type: 'PullRequestEffectFailed', data: { ...id, effect: d.effect, code: d.code, message, failedAt: now, ...(d.retryAt ? { retryAt: d.retryAt } : {}) } }];
    }
    default:
      return assertNever(command);
  }
}

function settledHead(state: PullRequestState): string | null {
  return state.outcome?.kind === 'MERGED' ? state.outcome.headSha : state.headSha;
}

function merged(state: PullRequestState, id: ReturnType<typeof idOf>, headSha: string, mergeCommitSha: string | null, now: string): PullRequestEvent {
  return { type: 'PullRequestMerged', data: { ...id, prNumber: state.pr!.number, prUrl: state.pr!.url, headSha, mergeCommitSha, mergedAt: now } };
}

/**
 * What a read of GitHub changes (PR-12: order means nothing, so every decision rests on a read).
 * A read older than the head we know of says nothing about that head (a later push moved it).
 */
function observationEvents(o: GitHubObservation, state: PullRequestState, id: ReturnType<typeof idOf>, now: string): PullRequestEvent[] {
  if (!state.flow || !state.pr || o.prNumber !== state.pr.number) return [];
  // Someone reopened the PR this service saw closed without merge: it is carried on from what GitHub shows now.
  if (state.outcome?.kind === 'CLOSED' && o.state === 'open' && !o.merged) {
    const reopened: PullRequestEvent = { type: 'PullRequestReopened', data: { ...id, prNumber: o.prNumber, headSha: o.headSha, reopenedAt: now } };
    return [reopened, ...observationEvents(o, evolvePullRequest(state, reopened), id, now)];
  }
  if (isSettled(state)) return [];
  if (o.merged) return [merged(state, id, o.headSha, o.mergeCommitSha, now)];
  if (o.state === 'closed') return [{ type: 'PullRequestClosed', data: { ...id, prNumber: o.prNumber, closedAt: now } }];
  if (state.headSince !== null && o.observedAt < state.headSince) return [];
  // PR-15: GitHub notices pushes a little later than the pusher does: a read showing a head the branch had before the
  // current one, while GitHub has not shown the current one yet, is GitHub not having caught up, and says nothing about
  // the current head. Once GitHub has shown it, GitHub does not go back by itself: the branch was force-pushed back, and
  // the PR follows it (its checks count, auto-merge enabled for the later head is disabled; it is not merged: mergeIfDue).
  if (o.headSha !== state.headSha && state.knownHeads.includes(o.headSha) && !shownByGitHub(state)) return [];
  // …but one read is no proof: GitHub answers from replicas, and one behind another may show the earlier head for a
  // moment. Followed, the PR would disable the later head's auto-merge and report the earlier head's red checks, so
  // the earlier head is followed once GitHub has shown it for HEAD_BACK_CONFIRM_MS (reads in between showing it too).
  // PR-18: so is the base the PR was on before the recorded change — unless GitHub's updated_at proves the read later.
  if (readHeldBack(state, o)) return [];

  const events: PullRequestEvent[] = [];
  // PR-18: a person pointed the PR at another base. Compared with the recorded base, so the read that sees it first — a
  // webhook's or the resync's — records it, and every later read showing the same base records nothing.
  const base = baseBranchOf(state);
  if (base !== null && o.baseBranch !== base) {
    events.push({
      type: 'PullRequestBaseChanged',
      data: { ...id, prNumber: o.prNumber, headSha: o.headSha, baseBranch: o.baseBranch, previousBaseBranch: base, shownUpdatedAt: o.updatedAt ?? null, changedAt: now },
    });
  }
  if (o.headSha !== state.headSha && state.headSha !== null) {
    events.push({ type: 'PullRequestHeadMoved', data: { ...id, headSha: o.headSha, previousHeadSha: state.headSha, source: 'GITHUB', movedAt: now } });
  }
  const current = events.reduce(evolvePullRequest, state);
  const rules = strategies[state.flow.strategy];

  // Someone made the draft ready on GitHub, or it was opened ready (a repository without drafts): for a
  // SPRINT PR whose run is DONE that is the same success (PR-8), and nothing is left to ask of GitHub.
  if (rules.whenScopeDone === 'MARK_READY_FOR_REVIEW' && !o.draft && !state.readyForReview && scopeDone(current)) {
    events.push({ type: 'PullRequestReadyForReview', data: { ...id, prNumber: o.prNumber, prUrl: o.prUrl, headSha: o.headSha, alreadyReady: true, markedAt: now } });
  }

  const seen = forHead(current, current.checks);
  const verdict = checksVerdict(state.flow.requiredChecks, o.checks);
  if (verdict.verdict === 'GREEN' && seen?.verdict !== 'GREEN') {
    const checks = firstWithin(verdict.passed.map(checkNameKept), MAX_PR_LIST_BYTES);
    events.push({ type: 'PullRequestChecksPassed', data: { ...id, headSha: o.headSha, checks, checksLeftOut: verdict.passed.length - checks.length, passedAt: now } });
  }
  if (verdict.verdict === 'RED' && seen?.verdict !== 'RED') {
    const failedChecks = firstWithin(
      verdict.failed.map((c) => ({ name: checkNameKept(c.name), conclusion: c.conclusion || 'failure', detailsUrl: detailsUrlKept(c.detailsUrl) })),
      MAX_PR_LIST_BYTES,
    );
    events.push({
      type: 'PullRequestChecksFailed',
      data: {
        ...id,
        baseBranch: o.baseBranch,
        prNumber: o.prNumber,
        prUrl: o.prUrl,
        headSha: o.headSha,
        failedChecks,
        failedChecksLeftOut: verdict.failed.length - failedChecks.length,
        detectedAt: now,
      },
    });
  }
  // PR-4: a check counts by its latest run. A head seen green whose check is re-run (or run again) is not green
  // while that run is pending: the green is withdrawn, and the merge is decided again once a read shows it green.
  if ((verdict.verdict === 'PENDING' || verdict.verdict === 'NONE') && seen?.verdict === 'GREEN') {
    events.push({ type: 'PullRequestChecksPending', data: { ...id, headSha: o.headSha, pendingAt: now } });
  }
  // PR-16: auto-merge Gantry enabled for this head is off, and Gantry did not turn it off (it does so only
  // for an older head, or when the head's checks are red): someone disabled it on GitHub. Seen on again
  // while the merge is held: someone turned it on again, and the PR is carried on from there.
  const red = verdict.verdict === 'RED' || forHead(current, current.checks)?.verdict === 'RED';
  const enabledByGantry = current.autoMergeEnabledFor === o.headSha && forHead(current, current.mergeDecision)?.via === 'AUTO_MERGE';
  if (!o.autoMergeEnabled && o.state === 'open' && enabledByGantry && !red) {
    events.push({ type: 'PullRequestAutoMergeDisabledOnGitHub', data: { ...id, prNumber: o.prNumber, headSha: o.headSha, disabledAt: now } });
  }
  if (o.autoMergeEnabled && current.mergeHeldSince && current.autoMergeEnabledFor !== o.headSha) {
    events.push({ type: 'PullRequestAutoMergeEnabled', data: { ...id, headSha: o.headSha, enabledAt: now } });
  }
  // PR-17: a person converted the PR to a draft (or marked it ready again). Recorded after PR-16's look at
  // auto-merge: converting a PR with auto-merge on turns auto-merge off too, and that stays PR-16's hold.
  if (rules.whenScopeDone === 'MERGE_WHEN_GREEN' && o.draft !== current.pr!.draft) {
    events.push({ type: 'PullRequestDraftChanged', data: { ...id, prNumber: o.prNumber, headSha: o.headSha, draft: o.draft, changedAt: now } });
  }
  // PR-10: GitHub shows the head a conflict was recorded for mergeable again (the base changed again): the conflict
  // is over — else the PR would stay paused, and never merged, on a head GitHub would merge. Null is no verdict (PR-11).
  // So is a conflict whose files git could not name (look-ups counted for the head): cleared, its count starts again,
  // and the head conflicting again later is looked up again — else it would stay unnamed for good.
  if (o.mergeable === true && (forHead(current, current.conflict) || forHead(current, current.conflictLookups))) {
    events.push({ type: 'PullRequestMergeConflictCleared', data: { ...id, prNumber: o.prNumber, headSha: o.headSha, clearedAt: now } });
  }
  // PR-10: a conflict is recorded once per head, with its files; mergeable null is no verdict (PR-11).
  if (o.mergeable === false && o.mergeableState === 'dirty' && !forHead(current, current.conflict) && o.conflictingFiles && o.conflictingFiles.length > 0) {
    // The first files, as many as one message keeps; the rest are counted (the PR on GitHub shows them all).
    const conflictingFiles = firstWithin(o.conflictingFiles, MAX_PR_LIST_BYTES);
    events.push({
      type: 'PullRequestMergeConflict',
      data: {
        ...id,
        baseBranch: o.baseBranch,
        prNumber: o.prNumber,
        prUrl: o.prUrl,
        headSha: o.headSha,
        conflictingFiles,
        conflictingFilesLeftOut: o.conflictingFiles.length - conflictingFiles.length,
        detectedAt: now,
      },
    });
  }
  return events;
}

/** PR-15: how long GitHub must have shown a head the branch had before (once it showed the current one) for the PR to follow it back. */
export const HEAD_BACK_CONFIRM_MS = 2000;
/**
 * PR-15: the longest two reads showing such a head may be apart and still count as "every read in between showing it":
 * the PR is read again when the 2 s are up, so a longer gap means no read at all in it (the service down, its runs held
 * up): GitHub may have shown anything meanwhile, and the 2 s start again.
 */
export const SHOWN_BACK_READ_GAP_MS = 10_000;

type ReadOfReplica = Pick<GitHubObservation, 'headSha' | 'baseBranch' | 'updatedAt' | 'observedAt' | 'shownSince'>;

/**
 * PR-15, PR-18: a read that may come from a replica of GitHub behind another, and says nothing (yet). A read older
 * than the recorded change of the base (GitHub's `updated_at`) was answered by a replica behind that change: it says
 * nothing at all. A read showing an earlier head, or the base before the recorded change — and not proven later than
 * that change by its `updated_at` — is followed once GitHub has shown it for HEAD_BACK_CONFIRM_MS, every read in between
 * showing it too (`shownSince`).
 */
export function readHeldBack(state: PullRequestState, o: ReadOfReplica): boolean {
  if (olderThanBaseChange(state, o)) return true;
  if (!headWentBack(state, o) && !baseWentBack(state, o)) return false;
  return o.shownSince === undefined || Date.parse(o.observedAt) - Date.parse(o.shownSince) < HEAD_BACK_CONFIRM_MS;
}

/** PR-18: GitHub's `updated_at` only grows, so a read showing an earlier one than the read that showed the base change is older than that change. */
export function olderThanBaseChange(state: PullRequestState, o: Pick<GitHubObservation, 'updatedAt'>): boolean {
  const changed = state.pr?.baseChange?.shownUpdatedAt;
  return !!changed && !!o.updatedAt && Date.parse(o.updatedAt) < Date.parse(changed);
}

/**
 * PR-18: a read showing the base the PR was on before the recorded change, its `updated_at` not later than that
 * change's (the same second, or unknown): a replica behind the change, or a person moving the base back — told apart
 * by time (HEAD_BACK_CONFIRM_MS). Later than the change, it is a person moving it back, followed at once.
 */
export function baseWentBack(state: PullRequestState, o: Pick<GitHubObservation, 'baseBranch' | 'updatedAt'>): boolean {
  const change = state.pr?.baseChange;
  if (!change || o.baseBranch === baseBranchOf(state) || o.baseBranch !== change.previousBaseBranch) return false;
  return !(change.shownUpdatedAt && o.updatedAt && Date.parse(o.updatedAt) > Date.parse(change.shownUpdatedAt));
}

/** PR-15: a read showing a head the branch had before the current one, after GitHub showed the current one: the branch force-pushed back (once confirmed). */
export function headWentBack(state: PullRequestState, o: Pick<GitHubObservation, 'headSha'>): boolean {
  return o.headSha !== state.headSha && (state.knownHeads ?? []).includes(o.headSha) && shownByGitHub(state);
}

/**
 * Whether GitHub has shown the current head: it moved there from a read, or a read recorded something of it (its
 * checks' verdict, a conflict, a failed look-up of a conflict's files), or GitHub enabled auto-merge expecting it.
 */
function shownByGitHub(state: PullRequestState): boolean {
  if (state.headSha === null) return false;
  return (
    state.headSource === 'GITHUB' ||
    forHead(state, state.checks) !== null ||
    forHead(state, state.conflict) !== null ||
    forHead(state, state.conflictLookups) !== null ||
    state.autoMergeEnabledFor === state.headSha
  );
}

/** A check's details URL as its event keeps it: a URL no longer than MAX_PR_DETAILS_URL_CHARS, else none — a cut URL is no URL, and the event's contract takes only URLs. */
function detailsUrlKept(url: string | null): string | null {
  return url !== null && url.length <= MAX_PR_DETAILS_URL_CHARS && URL.canParse(url) ? url : null;
}

/**
 * PR-3 / PR-4 / PR-5 / PR-6 / PR-14 / PR-17: a STORY PR that is no draft is merged once its scope is done and the current
 * head's checks were seen green — never on a head with a conflict, never twice for one head, and
 * after a refused merge only once GitHub's view of the PR has changed. Auto-merge first, unless the
 * repository disallows it or GitHub said this head would merge at once (then directly).
 */
function mergeIfDue(state: PullRequestState, now: string, observedMergeableState: string | null): PullRequestEvent[] {
  const { flow, pr, headSha } = state;
  if (!flow || !pr || !headSha || pr.draft || isSettled(state) || state.mergeHeldSince) return [];
  if (strategies[flow.strategy].whenScopeDone !== 'MERGE_WHEN_GREEN' || !scopeDone(state)) return [];
  // PR-15: a head the branch was force-pushed back to predates the last push of the scope's work: never merged by Gantry.
  const heads = state.knownHeads ?? [];
  if (heads.length > 0 && heads[heads.length - 1] !== headSha) return [];
  if (forHead(state, state.checks)?.verdict !== 'GREEN' || forHead(state, state.conflict) || forHead(state, state.mergeDecision)) return [];
  const failure = forHead(state, state.mergeFailure);
  if (failure && (observedMergeableState === null || observedMergeableState === failure.mergeableState)) return [];
  const via = state.autoMergeAllowed && state.autoMergeRefusedFor !== headSha ? 'AUTO_MERGE' : 'DIRECT';
  return [
    {
      type: 'PullRequestMergeRequested',
      data: { pullRequestId: state.pullRequestId, repository: state.repository, branch: state.branch, headSha, via, mergeMethod: flow.mergeMethod, requestedAt: now },
    },
  ];
}

export const pullRequestDecider = { initialState: initialPullRequestState, decide: decidePullRequest, evolve: evolvePullRequest };

function assertNever(value: never): never {
  throw new Error(`unhandled pull request command ${JSON.stringify(value)}`);
}
