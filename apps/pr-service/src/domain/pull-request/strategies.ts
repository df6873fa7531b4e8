import type { PrStrategy, PullRequestPhase } from '@gantry/contracts';

/**
 * What a PR strategy means, as data (docs/pr-service.md, PR-3 and PR-8): how the PR opens, what its
 * scope is, what happens once the scope is done, and what the PR waits in meanwhile. The machine
 * reads these; it never asks which strategy it runs.
 */
export interface StrategyRules {
  /** PR-2: a SPRINT PR opens as a draft. */
  opensAsDraft: boolean;
  /** TASKS: every task of the story is done. SPRINT_RUN: the sprint run is DONE. */
  scope: 'TASKS' | 'SPRINT_RUN';
  /** MERGE_WHEN_GREEN: merge once the head's checks are green. MARK_READY_FOR_REVIEW: make it ready, never merge. */
  whenScopeDone: 'MERGE_WHEN_GREEN' | 'MARK_READY_FOR_REVIEW';
  /** The phase of an open PR whose scope is not done. */
  waitingPhase: PullRequestPhase;
}

export const strategies: Record<PrStrategy, StrategyRules> = {
  STORY: { opensAsDraft: false, scope: 'TASKS', whenScopeDone: 'MERGE_WHEN_GREEN', waitingPhase: 'waiting_for_scope_done' },
  SPRINT: { opensAsDraft: true, scope: 'SPRINT_RUN', whenScopeDone: 'MARK_READY_FOR_REVIEW', waitingPhase: 'draft_opened' },
};
