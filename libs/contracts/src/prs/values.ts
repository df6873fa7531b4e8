import { z } from 'zod';
import { canonicalHash } from '../hashing.js';

/** A pull request's stream id: one per (repository, branch), `pr-<hash of both>`. */
export const PullRequestIdSchema = z
  .string()
  .min(1)
  .max(200)
  .regex(/^pr-[A-Za-z0-9_-]+$/, 'a pull request stream id is pr-<token>');

/** The stream of the pull request of `branch` in `repository` (the same branch name in two repositories is two streams). */
export function pullRequestIdFor(repository: string, branch: string): string {
  return `pr-${canonicalHash({ repository, branch }).slice(0, 40)}`;
}

/**
 * How an effect on GitHub failed (docs/pr-service.md): red checks, a conflict, refused credentials,
 * a repository that does not allow auto-merge, or anything else.
 */
export const PullRequestFailureCodeSchema = z.enum(['CHECKS_FAILED', 'MERGE_CONFLICT', 'GH_AUTH_ERROR', 'AUTO_MERGE_NOT_ALLOWED', 'UNKNOWN']);
export type PullRequestFailureCode = z.infer<typeof PullRequestFailureCodeSchema>;

/**
 * How an effect on GitHub, or a read of it, failed: a failure of a merge's (above), or GitHub's primary rate limit used
 * up — no effect's failure, and no merge's: nothing is asked of GitHub until its reset.
 */
export const PullRequestEffectFailureCodeSchema = z.enum([...PullRequestFailureCodeSchema.options, 'GH_RATE_LIMITED']);
export type PullRequestEffectFailureCode = z.infer<typeof PullRequestEffectFailureCodeSchema>;

/** The machine's phases (docs/pr-service.md). */
export const PullRequestPhaseSchema = z.enum([
  'none',
  'branch_pushed',
  'pr_opened',
  'draft_opened',
  'waiting_for_scope_done',
  'waiting_for_checks',
  'auto_merge_enabled',
  'merge_held',
  'held_as_draft',
  'ready_for_review',
  'checks_failed',
  'merge_conflict_paused',
  'merged',
  'closed',
]);
export type PullRequestPhase = z.infer<typeof PullRequestPhaseSchema>;
