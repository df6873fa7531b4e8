import type { MergeMethod } from '@gantry/contracts';
import type { ReportedCheck } from '../domain/index.js';

/** A pull request as GitHub's REST API shows it (`GET /repos/{o}/{r}/pulls/{n}`), reduced to what the machine reads. */
export interface PullRequestOnGitHub {
  number: number;
  url: string;
  nodeId: string;
  state: 'open' | 'closed';
  merged: boolean;
  mergeCommitSha: string | null;
  draft: boolean;
  headSha: string;
  headBranch: string;
  baseBranch: string;
  mergeable: boolean | null;
  mergeableState: string;
  autoMergeEnabled: boolean;
  /** GitHub's `updated_at` of the PR (null: not given). */
  updatedAt: string | null;
}

export type AutoMergeOutcome =
  | { outcome: 'ENABLED' }
  /** GitHub will not enable it: CLEAN / UNSTABLE (it would merge at once), NOT_ALLOWED (the repository's setting). */
  | { outcome: 'REFUSED'; reason: 'CLEAN' | 'UNSTABLE' | 'NOT_ALLOWED'; message: string }
  /** The PR's head is not the expected head any more. */
  | { outcome: 'HEAD_MOVED'; message: string }
  /** The repository does not allow the merge method asked for ("Merge method squash is not allowed on this repository"): its settings, for a person to change. */
  | { outcome: 'METHOD_NOT_ALLOWED'; message: string }
  /**
   * GitHub's "Auto merge is already enabled": it is on, whoever enabled it — the answer to this call sent
   * again after the first one's answer was lost (Octokit's retry of a closed connection or a 5xx).
   */
  | { outcome: 'ALREADY_ENABLED'; message: string }
  /** The PR is a draft (GitHub's "Pull request is in draft status"): a person converted it since it was read (PR-17). */
  | { outcome: 'DRAFT'; message: string }
  /**
   * The PR conflicts with its base (GitHub's "Pull request is in dirty status"): auto-merge's answer where a
   * direct merge gets 405 "not mergeable" — a refused merge of the head (PR-14), not a failure to send again.
   */
  | { outcome: 'CONFLICT'; message: string };

/**
 * DISABLED, or GitHub's "Can't disable auto-merge for this pull request.": the PR has no auto-merge to
 * disable (disabled already — the answer to this call sent again after the first one's answer was
 * lost — or merged or closed since).
 */
export type DisableAutoMergeOutcome = { outcome: 'DISABLED' } | { outcome: 'NOT_ENABLED'; message: string };

export type MergeOutcome =
  | { outcome: 'MERGED'; mergeCommitSha: string }
  /**
   * A branch moved under the merge: the head (409 "Head branch was modified", the head is not `sha`) or the base (405
   * "Base branch was modified", someone pushed to it while GitHub merged) — no refusal of the head: read again.
   */
  | { outcome: 'BRANCH_MOVED'; message: string }
  /** 405 "Squash merges are not allowed on this repository." (and merge commits, rebase merges): the repository's settings. */
  | { outcome: 'METHOD_NOT_ALLOWED'; message: string };

/**
 * GitHub's 422 "Draft pull requests are not supported in this repository." (a private repository on a
 * plan without drafts): not a failure to retry but a fact about the repository (docs/pr-service.md, PR-2).
 */
export class DraftsNotSupported extends Error {
  constructor(readonly githubMessage: string) {
    super(githubMessage);
    this.name = 'DraftsNotSupported';
  }
}

/**
 * What the pr-service asks of GitHub. Failures are GantryErrors with the codes of
 * docs/pr-service.md (GH_AUTH_ERROR, GH_RATE_LIMITED, MERGE_CONFLICT, CHECKS_FAILED, AUTO_MERGE_NOT_ALLOWED, UNKNOWN).
 */
export interface GitHubPullRequests {
  /** The open PR whose head is `branch`, if there is one, whatever its base (the one on `baseBranch` first, when there are several). */
  findOpen(repository: string, branch: string, baseBranch: string): Promise<PullRequestOnGitHub | null>;
  /** Opens a PR; one that already exists for the branch (422) is returned instead, `adopted`; a draft the repository does not allow throws DraftsNotSupported. */
  open(request: { repository: string; branch: string; baseBranch: string; title: string; body: string; draft: boolean }): Promise<{ pr: PullRequestOnGitHub; adopted: boolean }>;
  read(repository: string, prNumber: number): Promise<PullRequestOnGitHub>;
  /** Check runs and commit statuses of a commit, the latest of each name. */
  checks(repository: string, sha: string): Promise<ReportedCheck[]>;
  /** Returns whether it was already ready. */
  markReadyForReview(nodeId: string): Promise<{ alreadyReady: boolean }>;
  enableAutoMerge(nodeId: string, expectedHeadSha: string, mergeMethod: MergeMethod): Promise<AutoMergeOutcome>;
  disableAutoMerge(nodeId: string): Promise<DisableAutoMergeOutcome>;
  /** The merge methods the repository's settings allow (GraphQL's `mergeCommitAllowed`, `squashMergeAllowed`, `rebaseMergeAllowed`). */
  allowedMergeMethods(repository: string): Promise<MergeMethod[]>;
  /** Merges exactly `sha`: a head or base that moved is BRANCH_MOVED (409, or 405 "Base branch was modified"), a PR GitHub will not merge is a typed failure (405). */
  merge(repository: string, prNumber: number, sha: string, mergeMethod: MergeMethod): Promise<MergeOutcome>;
}
