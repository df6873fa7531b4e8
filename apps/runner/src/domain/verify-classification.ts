/**
 * How the work a job left on its branch relates to the job's own `base_sha` (SPEC §1).
 *
 * - EMPTY: no net diff vs base (`git diff <base_sha>...HEAD` is empty). Commits that cancel out
 *   (a change and its revert) are EMPTY too: nothing would reach the target. A delete-only change
 *   is a diff, so it is never EMPTY.
 * - DIVERGENT: a net diff is present, but HEAD does not descend from `base_sha` (the branch was
 *   reset, rebased or swapped for another one), or it carries no commit of its own since base. The
 *   diff is then not this job's work and needs a person — unless it is already on the target.
 * - PARTIAL: a net diff made of new commits on top of `base_sha`, and the delivered work is knowingly
 *   a part of the plan: the agent reported PARTIAL through `update_job_status`, or the pre-check
 *   found part of the plan already on the target so the agent did only the rest.
 * - ALIGNED: a net diff made of new commits on top of `base_sha`, nothing reported partial.
 *
 * A conflict with the target branch is deliberately not DIVERGENT: it is the pull request's
 * MERGE_CONFLICT (which pauses a sprint), found and reported by the PR flow, not a verify failure.
 */
export type VerifyResult = 'ALIGNED' | 'PARTIAL' | 'EMPTY' | 'DIVERGENT';

export interface VerificationFacts {
  /** `git rev-list <base_sha>..HEAD`, the commits the branch gained since base. */
  newCommitCount: number;
  /** `git diff <base_sha>...HEAD` is not empty. */
  netDiff: boolean;
  /** `git merge-base --is-ancestor <base_sha> HEAD`. */
  descendsFromBase: boolean;
  /** The agent's last `update_job_status` was PARTIAL, or the pre-check found the plan partly done. */
  partialCompletion: boolean;
}

export function classifyVerification(facts: VerificationFacts): VerifyResult {
  if (!facts.netDiff) return 'EMPTY';
  if (!facts.descendsFromBase || facts.newCommitCount === 0) return 'DIVERGENT';
  return facts.partialCompletion ? 'PARTIAL' : 'ALIGNED';
}

/**
 * The "work already on the target branch / branch already merged" column of the finishing table,
 * from facts gathered by the verifier:
 * - the branch's own commits are contained in the target (merged, fast-forwarded);
 * - or its net change vs base is already in the target (cherry-picked, squash-merged: merging the
 *   branch into the target would change nothing);
 * - or, when the branch produced nothing, the task's plan is fully present on the target.
 */
export interface TargetFacts {
  branchMerged: boolean;
  netChangeOnTarget: boolean;
  planOnTarget: boolean;
}

export function workAlreadyOnTarget(facts: TargetFacts): boolean {
  return facts.branchMerged || facts.netChangeOnTarget || facts.planOnTarget;
}
