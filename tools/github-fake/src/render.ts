import { createHash } from 'node:crypto';
import { pathToFileURL } from 'node:url';
import type { CommitInfo } from './git/bare-repository.js';
import {
  combinedState,
  mergeableState,
  type CheckRunRecord,
  type CheckSuiteRecord,
  type FakeState,
  type PullRecord,
  type RepositoryRecord,
  type StatusRecord,
} from './model.js';

/*
 * The JSON GitHub answers with, built from the fake's records. Field names, nesting and the many
 * `*_url` fields follow GitHub's OpenAPI description (the contract tests validate every shape). URLs
 * point at the fake itself: `url` fields at its API, `html_url` at its root.
 */

export interface RenderContext {
  /** The fake's base URL, e.g. http://127.0.0.1:3110 (API and "web" share it). */
  baseUrl: string;
}

/** A stable positive id for a login (GitHub's user ids are integers). */
export function userId(login: string): number {
  return parseInt(createHash('sha256').update(login).digest('hex').slice(0, 8), 16) % 100_000_000;
}

export function nodeId(prefix: string, id: number): string {
  return `${prefix}_kwDO${Buffer.from(String(id)).toString('base64url')}`;
}

export function renderUser(ctx: RenderContext, login: string, type: 'User' | 'Organization' | 'Bot' = 'User') {
  const url = `${ctx.baseUrl}/users/${login}`;
  return {
    login,
    id: userId(login),
    node_id: nodeId(type === 'Organization' ? 'O' : 'U', userId(login)),
    avatar_url: `${ctx.baseUrl}/avatars/${login}`,
    gravatar_id: '',
    url,
    html_url: `${ctx.baseUrl}/${login}`,
    followers_url: `${url}/followers`,
    following_url: `${url}/following{/other_user}`,
    gists_url: `${url}/gists{/gist_id}`,
    starred_url: `${url}/starred{/owner}{/repo}`,
    subscriptions_url: `${url}/subscriptions`,
    organizations_url: `${url}/orgs`,
    repos_url: `${url}/repos`,
    events_url: `${url}/events{/privacy}`,
    received_events_url: `${url}/received_events`,
    type,
    site_admin: false,
    user_view_type: 'public',
  };
}

export function cloneUrl(repository: RepositoryRecord): string {
  return pathToFileURL(repository.gitDir).href;
}

/** GitHub's repository object (the REST `full-repository` and the webhooks' `repository`). */
export function renderRepository(ctx: RenderContext, state: FakeState, repository: RepositoryRecord) {
  const fullName = `${repository.owner}/${repository.name}`;
  const url = `${ctx.baseUrl}/repos/${fullName}`;
  const openIssues = state.pulls.filter((p) => p.repository === fullName && p.state === 'open').length;
  const clone = cloneUrl(repository);
  return {
    id: repository.id,
    node_id: nodeId('R', repository.id),
    name: repository.name,
    full_name: fullName,
    private: false,
    owner: renderUser(ctx, repository.owner, 'Organization'),
    html_url: `${ctx.baseUrl}/${fullName}`,
    description: null,
    fork: false,
    url,
    archive_url: `${url}/{archive_format}{/ref}`,
    assignees_url: `${url}/assignees{/user}`,
    blobs_url: `${url}/git/blobs{/sha}`,
    branches_url: `${url}/branches{/branch}`,
    collaborators_url: `${url}/collaborators{/collaborator}`,
    comments_url: `${url}/comments{/number}`,
    commits_url: `${url}/commits{/sha}`,
    compare_url: `${url}/compare/{base}...{head}`,
    contents_url: `${url}/contents/{+path}`,
    contributors_url: `${url}/contributors`,
    deployments_url: `${url}/deployments`,
    downloads_url: `${url}/downloads`,
    events_url: `${url}/events`,
    forks_url: `${url}/forks`,
    git_commits_url: `${url}/git/commits{/sha}`,
    git_refs_url: `${url}/git/refs{/sha}`,
    git_tags_url: `${url}/git/tags{/sha}`,
    // A hosted repository is served over the file system; there is no git:// or ssh:// daemon.
    git_url: clone,
    issue_comment_url: `${url}/issues/comments{/number}`,
    issue_events_url: `${url}/issues/events{/number}`,
    issues_url: `${url}/issues{/number}`,
    keys_url: `${url}/keys{/key_id}`,
    labels_url: `${url}/labels{/name}`,
    languages_url: `${url}/languages`,
    merges_url: `${url}/merges`,
    milestones_url: `${url}/milestones{/number}`,
    notifications_url: `${url}/notifications{?since,all,participating}`,
    pulls_url: `${url}/pulls{/number}`,
    releases_url: `${url}/releases{/id}`,
    ssh_url: clone,
    stargazers_url: `${url}/stargazers`,
    statuses_url: `${url}/statuses/{sha}`,
    subscribers_url: `${url}/subscribers`,
    subscription_url: `${url}/subscription`,
    tags_url: `${url}/tags`,
    teams_url: `${url}/teams`,
    trees_url: `${url}/git/trees{/sha}`,
    clone_url: clone,
    mirror_url: null,
    hooks_url: `${url}/hooks`,
    svn_url: `${ctx.baseUrl}/${fullName}`,
    homepage: null,
    language: null,
    forks_count: 0,
    forks: 0,
    stargazers_count: 0,
    watchers_count: 0,
    watchers: 0,
    size: 0,
    default_branch: repository.defaultBranch,
    open_issues_count: openIssues,
    open_issues: openIssues,
    is_template: false,
    topics: [],
    has_issues: true,
    has_projects: false,
    has_wiki: false,
    has_pages: false,
    has_downloads: false,
    has_discussions: false,
    archived: false,
    disabled: false,
    visibility: 'public',
    pushed_at: repository.pushedAt,
    created_at: repository.createdAt,
    updated_at: repository.pushedAt,
    permissions: { admin: true, maintain: true, push: true, triage: true, pull: true },
    allow_rebase_merge: repository.settings.allowRebaseMerge,
    allow_squash_merge: repository.settings.allowSquashMerge,
    allow_merge_commit: repository.settings.allowMergeCommit,
    allow_auto_merge: repository.settings.allowAutoMerge,
    delete_branch_on_merge: repository.settings.deleteBranchOnMerge,
    allow_update_branch: false,
    allow_forking: true,
    web_commit_signoff_required: false,
    license: null,
    network_count: 0,
    subscribers_count: 0,
  };
}

export interface PullStats {
  commits: number;
  additions: number;
  deletions: number;
  changedFiles: number;
}

/** GitHub's pull request: the full object (GET one) or the simple one (lists). */
export function renderPull(ctx: RenderContext, state: FakeState, pull: PullRecord, options: { full: boolean; stats?: PullStats }) {
  const repository = state.repositories[pull.repository]!;
  const repo = renderRepository(ctx, state, repository);
  const url = `${ctx.baseUrl}/repos/${pull.repository}/pulls/${pull.number}`;
  const issueUrl = `${ctx.baseUrl}/repos/${pull.repository}/issues/${pull.number}`;
  const htmlUrl = `${ctx.baseUrl}/${pull.repository}/pull/${pull.number}`;
  const statusesUrl = `${ctx.baseUrl}/repos/${pull.repository}/statuses/${pull.headSha}`;
  const owner = renderUser(ctx, repository.owner, 'Organization');
  const merged = pull.mergedAt !== null;
  const simple = {
    url,
    id: pull.id,
    node_id: nodeId('PR', pull.id),
    html_url: htmlUrl,
    diff_url: `${htmlUrl}.diff`,
    patch_url: `${htmlUrl}.patch`,
    issue_url: issueUrl,
    commits_url: `${url}/commits`,
    review_comments_url: `${url}/comments`,
    review_comment_url: `${ctx.baseUrl}/repos/${pull.repository}/pulls/comments{/number}`,
    comments_url: `${issueUrl}/comments`,
    statuses_url: statusesUrl,
    number: pull.number,
    state: pull.state,
    locked: false,
    title: pull.title,
    user: renderUser(ctx, pull.user),
    body: pull.body,
    labels: [],
    milestone: null,
    active_lock_reason: null,
    created_at: pull.createdAt,
    updated_at: pull.updatedAt,
    closed_at: pull.closedAt,
    merged_at: pull.mergedAt,
    merge_commit_sha: pull.mergeCommitSha ?? (pull.state === 'open' ? pull.mergeability.testMergeSha : null),
    assignee: null,
    assignees: [],
    requested_reviewers: [],
    requested_teams: [],
    head: { label: `${repository.owner}:${pull.headRef}`, ref: pull.headRef, sha: pull.headSha, user: owner, repo },
    base: { label: `${repository.owner}:${pull.baseRef}`, ref: pull.baseRef, sha: pull.baseSha, user: owner, repo },
    _links: {
      self: { href: url },
      html: { href: htmlUrl },
      issue: { href: issueUrl },
      comments: { href: `${issueUrl}/comments` },
      review_comments: { href: `${url}/comments` },
      review_comment: { href: `${ctx.baseUrl}/repos/${pull.repository}/pulls/comments{/number}` },
      commits: { href: `${url}/commits` },
      statuses: { href: statusesUrl },
    },
    author_association: 'MEMBER',
    auto_merge: pull.autoMerge
      ? {
          enabled_by: renderUser(ctx, pull.autoMerge.enabledBy),
          merge_method: pull.autoMerge.mergeMethod,
          commit_title: pull.autoMerge.commitTitle,
          commit_message: pull.autoMerge.commitMessage,
        }
      : null,
    draft: pull.draft,
  };
  if (!options.full) return simple;
  const computed = pull.state === 'open' && pull.mergeability.computed;
  const stats = options.stats ?? { commits: 0, additions: 0, deletions: 0, changedFiles: 0 };
  return {
    ...simple,
    merged,
    // null while GitHub computes it (after an open, a push, a base move); never a verdict.
    mergeable: computed ? pull.mergeability.conflicts.length === 0 : null,
    rebaseable: computed ? pull.mergeability.conflicts.length === 0 : null,
    mergeable_state: mergeableState(state, repository, pull),
    merged_by: pull.mergedBy ? renderUser(ctx, pull.mergedBy) : null,
    comments: 0,
    review_comments: 0,
    maintainer_can_modify: pull.maintainerCanModify,
    commits: stats.commits,
    additions: stats.additions,
    deletions: stats.deletions,
    changed_files: stats.changedFiles,
  };
}

/** The `pull_requests` entries of check runs and suites: open PRs whose head is that commit. */
function checkPullRequests(ctx: RenderContext, state: FakeState, repository: string, sha: string) {
  const repo = state.repositories[repository]!;
  const repoRef = { id: repo.id, url: `${ctx.baseUrl}/repos/${repository}`, name: repo.name };
  return state.pulls
    .filter((p) => p.repository === repository && p.state === 'open' && p.headSha === sha)
    .map((p) => ({
      id: p.id,
      number: p.number,
      url: `${ctx.baseUrl}/repos/${repository}/pulls/${p.number}`,
      head: { ref: p.headRef, sha: p.headSha, repo: repoRef },
      base: { ref: p.baseRef, sha: p.baseSha, repo: repoRef },
    }));
}

/** The app every check run of the fake belongs to (GitHub attributes check runs to a GitHub App). */
export function renderApp(ctx: RenderContext) {
  return {
    id: 1,
    slug: 'github-fake-ci',
    node_id: nodeId('A', 1),
    client_id: 'Iv1.github-fake',
    owner: renderUser(ctx, 'github-fake', 'Organization'),
    name: 'GitHub fake CI',
    description: 'Check runs created through the GitHub fake',
    external_url: ctx.baseUrl,
    html_url: `${ctx.baseUrl}/apps/github-fake-ci`,
    created_at: '2024-01-01T00:00:00Z',
    updated_at: '2024-01-01T00:00:00Z',
    permissions: { checks: 'write', metadata: 'read', pull_requests: 'write', statuses: 'write' },
    events: ['check_run', 'check_suite', 'pull_request', 'status'],
  };
}

export function renderCheckRun(ctx: RenderContext, state: FakeState, run: CheckRunRecord) {
  const url = `${ctx.baseUrl}/repos/${run.repository}/check-runs/${run.id}`;
  return {
    id: run.id,
    node_id: nodeId('CR', run.id),
    head_sha: run.headSha,
    external_id: run.externalId ?? '',
    url,
    html_url: `${ctx.baseUrl}/${run.repository}/runs/${run.id}`,
    details_url: run.detailsUrl ?? `${ctx.baseUrl}/${run.repository}/runs/${run.id}`,
    status: run.status,
    conclusion: run.conclusion,
    started_at: run.startedAt,
    completed_at: run.completedAt,
    output: { ...run.output, annotations_count: 0, annotations_url: `${url}/annotations` },
    name: run.name,
    check_suite: { id: run.suiteId },
    app: renderApp(ctx),
    pull_requests: checkPullRequests(ctx, state, run.repository, run.headSha),
  };
}

/**
 * GitHub's summary of a suite's runs: completed once every run is (before that, no conclusion). Its conclusion: the
 * first of the runs' failing conclusions by GitHub's precedence (action required, cancelled, timed out, failure, stale);
 * else success when any run succeeded — a neutral or skipped run beside a green one does not make the suite neutral —;
 * else neutral when any run is, else skipped.
 */
export function suiteSummary(state: FakeState, suite: CheckSuiteRecord): { status: 'queued' | 'in_progress' | 'completed'; conclusion: string | null; runs: number } {
  const runs = state.checkRuns.filter((r) => r.suiteId === suite.id);
  if (runs.length === 0) return { status: 'queued', conclusion: null, runs: 0 };
  if (runs.some((r) => r.status !== 'completed')) return { status: 'in_progress', conclusion: null, runs: runs.length };
  const precedence = ['action_required', 'cancelled', 'timed_out', 'failure', 'stale', 'success', 'neutral', 'skipped'];
  const conclusion = runs.map((r) => r.conclusion ?? 'success').sort((a, b) => precedence.indexOf(a) - precedence.indexOf(b))[0]!;
  return { status: 'completed', conclusion, runs: runs.length };
}

/** GitHub's simple check suite: what a `check_run` webhook names its suite with (the REST check run only has its id). */
export function renderSimpleCheckSuite(ctx: RenderContext, state: FakeState, suite: CheckSuiteRecord) {
  const summary = suiteSummary(state, suite);
  return {
    id: suite.id,
    node_id: nodeId('CS', suite.id),
    head_branch: suite.headBranch,
    head_sha: suite.headSha,
    status: summary.status,
    conclusion: summary.conclusion,
    url: `${ctx.baseUrl}/repos/${suite.repository}/check-suites/${suite.id}`,
    before: null,
    after: suite.headSha,
    pull_requests: checkPullRequests(ctx, state, suite.repository, suite.headSha),
    app: renderApp(ctx),
    created_at: suite.createdAt,
    updated_at: suite.updatedAt,
  };
}

export function renderCheckSuite(ctx: RenderContext, state: FakeState, suite: CheckSuiteRecord, headCommit: CommitInfo) {
  return {
    ...renderSimpleCheckSuite(ctx, state, suite),
    rerequestable: true,
    runs_rerequestable: true,
    latest_check_runs_count: suiteSummary(state, suite).runs,
    check_runs_url: `${ctx.baseUrl}/repos/${suite.repository}/check-suites/${suite.id}/check-runs`,
    head_commit: renderSimpleCommit(headCommit),
  };
}

export function renderSimpleCommit(commit: CommitInfo) {
  return {
    id: commit.sha,
    tree_id: commit.tree,
    message: commit.message,
    timestamp: commit.committer.date,
    author: { name: commit.author.name, email: commit.author.email },
    committer: { name: commit.committer.name, email: commit.committer.email },
  };
}

export function renderStatus(ctx: RenderContext, status: StatusRecord) {
  return {
    url: `${ctx.baseUrl}/repos/${status.repository}/statuses/${status.sha}`,
    avatar_url: `${ctx.baseUrl}/avatars/${status.creator}`,
    id: status.id,
    node_id: nodeId('SC', status.id),
    state: status.state,
    description: status.description,
    target_url: status.targetUrl,
    context: status.context,
    created_at: status.createdAt,
    updated_at: status.updatedAt,
    creator: renderUser(ctx, status.creator),
  };
}

export function renderCombinedStatus(ctx: RenderContext, state: FakeState, repository: RepositoryRecord, sha: string, statuses: StatusRecord[]) {
  const fullName = `${repository.owner}/${repository.name}`;
  const minimal = renderRepository(ctx, state, repository);
  return {
    state: combinedState(statuses),
    statuses: statuses.map((s) => {
      const { creator: _creator, ...simple } = renderStatus(ctx, s);
      return simple;
    }),
    sha,
    total_count: statuses.length,
    repository: minimal,
    commit_url: `${ctx.baseUrl}/repos/${fullName}/commits/${sha}`,
    url: `${ctx.baseUrl}/repos/${fullName}/commits/${sha}/status`,
  };
}

/** The `commit` object of the `status` webhook. */
export function renderStatusCommit(ctx: RenderContext, fullName: string, commit: CommitInfo) {
  const url = `${ctx.baseUrl}/repos/${fullName}/commits/${commit.sha}`;
  return {
    sha: commit.sha,
    node_id: `C_${commit.sha}`,
    url,
    html_url: `${ctx.baseUrl}/${fullName}/commit/${commit.sha}`,
    comments_url: `${url}/comments`,
    commit: {
      author: { ...commit.author },
      committer: { ...commit.committer },
      message: commit.message,
      tree: { sha: commit.tree, url: `${ctx.baseUrl}/repos/${fullName}/git/trees/${commit.tree}` },
      url: `${ctx.baseUrl}/repos/${fullName}/git/commits/${commit.sha}`,
      comment_count: 0,
      verification: { verified: false, reason: 'unsigned', signature: null, payload: null, verified_at: null },
    },
    author: null,
    committer: null,
    parents: [],
  };
}
