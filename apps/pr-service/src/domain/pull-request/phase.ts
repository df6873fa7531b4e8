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
export const forHead = <T extends { headSha: string }>(state: PullRequestState, fact: T | null): T | null =>
  fact !== null && state.headSha !== null && fact.headSha === state.headSha ? fact : null;

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
