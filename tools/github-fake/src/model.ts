/*
 * What the fake remembers: repositories, pull requests, check runs, commit statuses. Plain data,
 * saved as one JSON file, so a restarted fake still has its pull requests.
 */

/**
 * A time as GitHub shows it: UTC, ISO 8601 to the second ("2011-01-26T19:01:12Z"), never with a fraction — so two
 * changes of a pull request in one second have the same `updated_at`.
 */
export function gitHubTime(ms: number): string {
  return new Date(Math.floor(ms / 1000) * 1000).toISOString().replace('.000Z', 'Z');
}

export type MergeMethod = 'merge' | 'squash' | 'rebase';

export interface RepositorySettings {
  allowAutoMerge: boolean;
  allowMergeCommit: boolean;
  allowSquashMerge: boolean;
  allowRebaseMerge: boolean;
  deleteBranchOnMerge: boolean;
  /** false: a draft cannot be opened (GitHub: a private repository on a plan without drafts). */
  allowDraftPullRequests: boolean;
}

/** The subset of classic branch protection the fake models, on the default branch. */
export interface BranchProtection {
  /** Names of check runs or commit-status contexts that must pass before a merge. */
  requiredChecks: string[];
  /** "Require branches to be up to date before merging". */
  strict: boolean;
}

export interface RepositoryRecord {
  id: number;
  owner: string;
  name: string;
  gitDir: string;
  defaultBranch: string;
  createdAt: string;
  pushedAt: string;
  settings: RepositorySettings;
  protection: BranchProtection;
  /** The branches as last seen: a difference is a push. */
  branches: Record<string, string>;
}

export interface Mergeability {
  baseSha: string;
  headSha: string;
  computed: boolean;
  conflicts: string[];
  /** Whether the head lacks commits of the base (GitHub's "behind"). */
  behind: boolean;
  /** GitHub's test merge commit (refs/pull/N/merge) when the merge is clean. */
  testMergeSha: string | null;
}

export interface AutoMergeRecord {
  enabledBy: string;
  mergeMethod: MergeMethod;
  commitTitle: string;
  commitMessage: string;
  enabledAt: string;
  authorEmail: string | null;
}

export interface PullRecord {
  id: number;
  number: number;
  repository: string;
  title: string;
  body: string | null;
  state: 'open' | 'closed';
  draft: boolean;
  headRef: string;
  headSha: string;
  /** False once the head branch was deleted; the PR keeps its last head. */
  headExists: boolean;
  baseRef: string;
  baseSha: string;
  user: string;
  createdAt: string;
  updatedAt: string;
  /**
   * Counts the PR's changes (each sets `updatedAt`). GitHub's `updated_at` is to the second, so two changes in one second
   * show the same one: a version of the PR is told by this, not by its time. (Absent in a state.json from before it.)
   */
  revision?: number;
  closedAt: string | null;
  mergedAt: string | null;
  mergedBy: string | null;
  mergeCommitSha: string | null;
  maintainerCanModify: boolean;
  autoMerge: AutoMergeRecord | null;
  mergeability: Mergeability;
}

export type CheckStatus = 'queued' | 'in_progress' | 'completed' | 'waiting' | 'requested' | 'pending';
export type CheckConclusion = 'success' | 'failure' | 'neutral' | 'cancelled' | 'skipped' | 'timed_out' | 'action_required' | 'stale';

export interface CheckRunRecord {
  id: number;
  repository: string;
  headSha: string;
  name: string;
  status: CheckStatus;
  conclusion: CheckConclusion | null;
  startedAt: string;
  completedAt: string | null;
  detailsUrl: string | null;
  externalId: string | null;
  output: { title: string | null; summary: string | null; text: string | null };
  suiteId: number;
}

export interface CheckSuiteRecord {
  id: number;
  repository: string;
  headSha: string;
  headBranch: string | null;
  createdAt: string;
  updatedAt: string;
  /** The conclusion the last `check_suite.completed` webhook reported, to send it once per completion. */
  reportedConclusion: string | null;
}

export type CommitState = 'error' | 'failure' | 'pending' | 'success';

export interface StatusRecord {
  id: number;
  repository: string;
  sha: string;
  state: CommitState;
  context: string;
  description: string | null;
  targetUrl: string | null;
  createdAt: string;
  updatedAt: string;
  creator: string;
}

export interface FakeState {
  nextId: number;
  repositories: Record<string, RepositoryRecord>;
  pulls: PullRecord[];
  checkRuns: CheckRunRecord[];
  checkSuites: CheckSuiteRecord[];
  statuses: StatusRecord[];
}

export function emptyState(): FakeState {
  return { nextId: 1000, repositories: {}, pulls: [], checkRuns: [], checkSuites: [], statuses: [] };
}

export const DEFAULT_SETTINGS: RepositorySettings = {
  // GitHub's defaults for a new repository: every merge method allowed, auto-merge off.
  allowAutoMerge: false,
  allowMergeCommit: true,
  allowSquashMerge: true,
  allowRebaseMerge: true,
  deleteBranchOnMerge: false,
  allowDraftPullRequests: true,
};

/** One check, as branch protection sees it: a check run or a commit status. */
export type CheckVerdict = 'passing' | 'failing' | 'pending';

/**
 * Passing, failing or pending for the latest check run of a name and the latest status of a context.
 * GitHub counts neutral and skipped check runs as passing for required checks.
 */
export function checkRunVerdict(run: CheckRunRecord): CheckVerdict {
  if (run.status !== 'completed') return 'pending';
  return run.conclusion === 'success' || run.conclusion === 'neutral' || run.conclusion === 'skipped' ? 'passing' : 'failing';
}

export function statusVerdict(status: StatusRecord): CheckVerdict {
  if (status.state === 'success') return 'passing';
  if (status.state === 'pending') return 'pending';
  return 'failing';
}

export interface ChecksSummary {
  /** name → verdict, from the latest check run per name and the latest status per context. */
  verdicts: Map<string, CheckVerdict>;
}

export function summarizeChecks(state: FakeState, repository: string, sha: string): ChecksSummary {
  const verdicts = new Map<string, CheckVerdict>();
  const merge = (name: string, verdict: CheckVerdict) => {
    const previous = verdicts.get(name);
    // A name reported both as a check run and as a status passes only when both pass.
    if (!previous || verdict === 'failing' || (verdict === 'pending' && previous === 'passing')) verdicts.set(name, verdict);
  };
  for (const run of latestCheckRuns(state, repository, sha)) merge(run.name, checkRunVerdict(run));
  for (const status of latestStatuses(state, repository, sha)) merge(status.context, statusVerdict(status));
  return { verdicts };
}

/** The most recent check run of each name for a commit (GitHub's `filter=latest`), newest first. */
export function latestCheckRuns(state: FakeState, repository: string, sha: string): CheckRunRecord[] {
  const byName = new Map<string, CheckRunRecord>();
  for (const run of state.checkRuns) {
    if (run.repository !== repository || run.headSha !== sha) continue;
    const seen = byName.get(run.name);
    if (!seen || run.id > seen.id) byName.set(run.name, run);
  }
  return [...byName.values()].sort((a, b) => b.id - a.id);
}

/** The most recent status of each context for a commit, newest first. */
export function latestStatuses(state: FakeState, repository: string, sha: string): StatusRecord[] {
  const byContext = new Map<string, StatusRecord>();
  for (const status of state.statuses) {
    if (status.repository !== repository || status.sha !== sha) continue;
    const seen = byContext.get(status.context);
    if (!seen || status.id > seen.id) byContext.set(status.context, status);
  }
  return [...byContext.values()].sort((a, b) => b.id - a.id);
}

/** GitHub's combined status: statuses only; failure beats pending beats success; none is pending. */
export function combinedState(statuses: StatusRecord[]): 'failure' | 'pending' | 'success' {
  if (statuses.some((s) => s.state === 'failure' || s.state === 'error')) return 'failure';
  if (statuses.length === 0 || statuses.some((s) => s.state === 'pending')) return 'pending';
  return 'success';
}

export type MergeableState = 'unknown' | 'dirty' | 'draft' | 'blocked' | 'behind' | 'unstable' | 'clean';

/**
 * GitHub's `mergeable_state` (REST; GraphQL's `mergeStateStatus` is the same in capitals):
 * unknown while mergeability is computed; dirty on a conflict; draft; blocked while a required check
 * has not passed; behind when protection requires an up-to-date branch; unstable when the merge is
 * allowed but some other check is not green; clean otherwise (also with no checks at all).
 */
export function mergeableState(state: FakeState, repository: RepositoryRecord, pull: PullRecord): MergeableState {
  if (pull.state !== 'open' || !pull.mergeability.computed) return 'unknown';
  if (pull.mergeability.conflicts.length > 0) return 'dirty';
  if (pull.draft) return 'draft';
  const { verdicts } = summarizeChecks(state, pull.repository, pull.headSha);
  const protection = pull.baseRef === repository.defaultBranch ? repository.protection : { requiredChecks: [], strict: false };
  if (protection.requiredChecks.some((name) => verdicts.get(name) !== 'passing')) return 'blocked';
  if (protection.strict && pull.mergeability.behind) return 'behind';
  if ([...verdicts.values()].some((v) => v !== 'passing')) return 'unstable';
  return 'clean';
}
