import type { PullRequestPhase } from '@gantry/contracts';
import { strategies } from './strategies.js';
import type { PullRequestState } from './state.js';

/** PR-3 / PR-8: whether the PR's scope is done, as its strategy defines the scope. */
export function scopeDone(state: PullRequestState): boolean {
  if (!state.flow) return false;
  switch (strategies[state.flow.strategy].scope) {
    case 'TASKS':
      return state.scope.items.length > 0 && state.scope.items.every((i) => i.done);
    case 'SPRINT_RUN':
      return state.scope.sprintRunDone;
  }
}

/** A verdict, conflict or decision counts only for the head it was made on. */
export const forHead = <T extends { headSha: string }>(state: PullRequestState, fact: T | null | undefined): T | null =>
  fact != null && state.headSha !== null && fact.headSha === state.headSha ? fact : null;

/**
 * PR-10: how often git is asked for the files of one head's conflict before the service stops asking. The look-ups
 * are spaced 1, 2, 4 and 8 s apart (`nextConflictLookupAt`); after the last, the conflict is the PR's last failure.
 */
export const CONFLICT_LOOKUPS = 5;

/** PR-10: when git may be asked again for the files of the conflict on `headSha` (null: not again for that head). */
export function nextConflictLookupAt(state: PullRequestState, headSha: string): number | null {
  const tried = state.conflictLookups?.headSha === headSha ? state.conflictLookups : null;
  if (!tried) return 0;
  if (tried.failures >= CONFLICT_LOOKUPS) return null;
  return Date.parse(tried.at) + 1000 * 2 ** (tried.failures - 1);
}

/**
 * The machine's phase, derived from what the log holds (docs/pr-service.md): deriving it rather than
 * storing it means no event can leave the phase disagreeing with the facts.
 */
export function phaseOf(state: PullRequestState): PullRequestPhase {
  if (state.outcome?.kind === 'MERGED') return 'merged';
  if (state.outcome?.kind === 'CLOSED') return 'closed';
  if (!state.flow || !state.headSha) return 'none';
  if (!state.pr) return 'branch_pushed';
  if (forHead(state, state.conflict)) return 'merge_conflict_paused';
  if (forHead(state, state.checks)?.verdict === 'RED') return 'checks_failed';
  const rules = strategies[state.flow.strategy];
  if (!scopeDone(state)) return state.scope.items.length === 0 && !state.scope.sprintRunDone && !state.pr.draft ? 'pr_opened' : rules.waitingPhase;
  switch (rules.whenScopeDone) {
    case 'MARK_READY_FOR_REVIEW':
      return state.readyForReview ? 'ready_for_review' : 'draft_opened';
    case 'MERGE_WHEN_GREEN':
      if (state.mergeHeldSince) return 'merge_held';
      if (state.pr.draft) return 'held_as_draft';
      return forHead(state, state.mergeDecision) ? 'auto_merge_enabled' : 'waiting_for_checks';
  }
}
