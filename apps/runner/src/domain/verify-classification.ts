/**
 * How the work a job left on its branch relates to the job's own `base_sha` (docs/jobs.md, "Verification").
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
 * When the job's plan names expected changes, the net diff is also held against them (docs/jobs.md,
 * "Verification"): a branch that made none of them but changed other things is DIVERGENT; one that
 * leaves some of them missing is PARTIAL; ALIGNED needs all of them. Without expected changes the
 * rule above stands alone, and the facts say so (`NO_EXPECTED_CHANGES`).
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
  /** The plan's expected changes against the branch; null when the plan names none. */
  plan: PlanFacts | null;
}

export interface PlanFacts {
  expected: number;
  /** Expected changes in place at HEAD: made by the branch, or already there at base. */
  present: number;
  /** Of those, the ones the branch itself made (their paths are in the net diff). */
  madeByBranch: number;
}

export type PlanCheck = 'ALL_PRESENT' | 'SOME_PRESENT' | 'NONE_PRESENT' | 'NO_EXPECTED_CHANGES';

export function classifyVerification(facts: VerificationFacts): VerifyResult {
  if (!facts.netDiff) return 'EMPTY';
  if (!facts.descendsFromBase || facts.newCommitCount === 0) return 'DIVERGENT';
  if (facts.plan !== null) {
    if (facts.plan.madeByBranch === 0) return 'DIVERGENT';
    if (facts.plan.present < facts.plan.expected) return 'PARTIAL';
  }
  return facts.partialCompletion ? 'PARTIAL' : 'ALIGNED';
}

export function planCheckOf(plan: PlanFacts | null): PlanCheck {
  if (plan === null) return 'NO_EXPECTED_CHANGES';
  if (plan.present === plan.expected) return 'ALL_PRESENT';
  return plan.present > 0 ? 'SOME_PRESENT' : 'NONE_PRESENT';
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
