import type { MergeMethod } from '@gantry/contracts';
import { DraftsNotSupported, type AutoMergeOutcome, type DisableAutoMergeOutcome, type GitHubPullRequests, type MergeOutcome, type PullRequestOnGitHub } from '../../application/github.js';
import type { ReportedCheck } from '../../domain/index.js';
import { gitHubFailure, gitHubMessage, isMergeMethodRefusal, statusOf } from './github-failures.js';
import type { GantryOctokit } from './octokit.js';

type RestPull = {
  number: number;
  html_url: string;
  node_id: string;
  state: string;
  merged?: boolean | null;
  merged_at?: string | null;
  merge_commit_sha?: string | null;
  draft?: boolean | null;
  head: { sha: string; ref: string };
  base: { ref: string };
  mergeable?: boolean | null;
  mergeable_state?: string;
  auto_merge?: unknown;
  updated_at?: string | null;
};

function split(repository: string): { owner: string; repo: string } {
  const [owner, repo] = repository.split('/') as [string, string];
  return { owner, repo };
}

function pullOf(p: RestPull): PullRequestOnGitHub {
  return {
    number: p.number,
    url: p.html_url,
    nodeId: p.node_id,
    state: p.state === 'closed' ? 'closed' : 'open',
    merged: p.merged === true || (p.merged === undefined && typeof p.merged_at === 'string'),
    mergeCommitSha: p.merge_commit_sha ?? null,
    draft: p.draft === true,
    headSha: p.head.sha,
    headBranch: p.head.ref,
    baseBranch: p.base.ref,
    mergeable: p.mergeable ?? null,
    mergeableState: p.mergeable_state ?? 'unknown',
    autoMergeEnabled: p.auto_merge !== null && p.auto_merge !== undefined,
    updatedAt: p.updated_at ?? null,
  };
}

const SUCCESSFUL = new Set(['success', 'neutral', 'skipped']);
const WORSE_FIRST: ReportedCheck['state'][] = ['FAILURE', 'PENDING', 'SUCCESS'];
const timeOf = (at: string) => Date.parse(at) || 0;

/** GitHub's pull requests through Octokit: REST for what REST does, GraphQL for ready-for-review and auto-merge. */
export class OctokitPullRequests implements GitHubPullRequests {
  constructor(private readonly octokit: GantryOctokit) {}

  /**
   * Found by its head alone: a person may have pointed the PR at another base — between GitHub opening it
   * and the service recording it, too — and GitHub would open a second PR for the branch on the product's
   * base (its "already exists" is per head and base). With several open (one per base), the one on
   * `baseBranch` is taken.
   */
  async findOpen(repository: string, branch: string, baseBranch: string): Promise<PullRequestOnGitHub | null> {
    const { owner, repo } = split(repository);
    try {
      const { data } = await this.octokit.rest.pulls.list({ owner, repo, head: `${owner}:${branch}`, state: 'open', per_page: 100 });
      const ofBranch = (data as RestPull[]).filter((p) => p.head.ref === branch);
      const found = ofBranch.find((p) => p.base.ref === baseBranch) ?? ofBranch[0];
      return found ? pullOf(found) : null;
    } catch (error) {
      throw gitHubFailure(error, `list the pull requests of ${repository}`);
    }
  }

  async open(request: { repository: string; branch: string; baseBranch: string; title: string; body: string; draft: boolean }) {
    const { owner, repo } = split(request.repository);
    try {
      const { data } = await this.octokit.rest.pulls.create({
        owner,
        repo,
        head: request.branch,
        base: request.baseBranch,
        title: request.title,
        body: request.body,
        draft: request.draft,
      });
      return { pr: pullOf(data as RestPull), adopted: false };
    } catch (error) {
      // GitHub's 422 "A pull request already exists for owner:branch." — it is the one we meant to open.
      if (statusOf(error) === 422 && /already exists/i.test(gitHubMessage(error))) {
        const existing = await this.findOpen(request.repository, request.branch, request.baseBranch);
        if (existing) return { pr: existing, adopted: true };
      }
      if (request.draft && statusOf(error) === 422 && /draft pull requests are not supported/i.test(gitHubMessage(error))) throw new DraftsNotSupported(gitHubMessage(error));
      throw gitHubFailure(error, `open a pull request for ${request.repository} ${request.branch}`);
    }
  }

  async read(repository: string, prNumber: number): Promise<PullRequestOnGitHub> {
    const { owner, repo } = split(repository);
    try {
      const { data } = await this.octokit.rest.pulls.get({ owner, repo, pull_number: prNumber });
      return pullOf(data as RestPull);
    } catch (error) {
      throw gitHubFailure(error, `read pull request ${repository}#${prNumber}`);
    }
  }

  /**
   * Check runs and commit statuses of `sha`, the latest of each name. The combined status is read
   * for its statuses only: its own `state` ignores check runs and is `pending` when there are none.
   */
  async checks(repository: string, sha: string): Promise<ReportedCheck[]> {
    const { owner, repo } = split(repository);
    try {
      const runs = await this.octokit.paginate(this.octokit.rest.checks.listForRef, { owner, repo, ref: sha, filter: 'latest', per_page: 100 });
      const statuses = await this.statuses(owner, repo, sha);
      const latest = new Map<string, ReportedCheck & { at: string }>();
      // A name reported both as a check run and as a status counts by its later word: a run's when it completed (else
      // started), a status's when it was set. GitHub gives times to the second, so in one second it cannot say which
      // came last: then the one not green counts (failure over pending over success) — never a merge on a red word.
      const keep = (check: ReportedCheck & { at: string }) => {
        const seen = latest.get(check.name);
        const later = !seen ? 1 : timeOf(check.at) - timeOf(seen.at);
        if (later > 0 || (later === 0 && WORSE_FIRST.indexOf(check.state) < WORSE_FIRST.indexOf(seen!.state))) latest.set(check.name, check);
      };
      for (const run of runs) {
        const state = run.status !== 'completed' ? 'PENDING' : SUCCESSFUL.has(run.conclusion ?? '') ? 'SUCCESS' : 'FAILURE';
        keep({ name: run.name, source: 'check_run', state, conclusion: run.conclusion ?? null, detailsUrl: run.details_url ?? run.html_url ?? null, at: run.completed_at ?? run.started_at ?? '' });
      }
      for (const status of statuses) {
        const state = status.state === 'success' ? 'SUCCESS' : status.state === 'pending' ? 'PENDING' : 'FAILURE';
        keep({ name: status.context, source: 'status', state, conclusion: status.state, detailsUrl: status.target_url ?? null, at: status.updated_at ?? '' });
      }
      return [...latest.values()].map(({ at: _at, ...check }) => check).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    } catch (error) {
      throw gitHubFailure(error, `read the checks of ${repository}@${sha}`);
    }
  }

  /**
   * Every status of the combined status of `sha`, page by page: GitHub pages its statuses (100 at most
   * a page), and a head with more contexts than one page has the rest on the next ones — a red one
   * among them must be seen (PR-4).
   */
  private async statuses(owner: string, repo: string, sha: string) {
    const statuses = [];
    for (let page = 1; ; page++) {
      const { data } = await this.octokit.rest.repos.getCombinedStatusForRef({ owner, repo, ref: sha, per_page: 100, page });
      statuses.push(...data.statuses);
      if (data.statuses.length < 100 || statuses.length >= data.total_count) return statuses;
    }
  }

  async markReadyForReview(nodeId: string): Promise<{ alreadyReady: boolean }> {
    try {
      const before = await this.octokit.graphql<{ node: { isDraft: boolean } | null }>(`query($id: ID!) { node(id: $id) { ... on PullRequest { isDraft } } }`, { id: nodeId });
      if (before.node && !before.node.isDraft) return { alreadyReady: true };
      await this.octokit.graphql(
        `mutation($id: ID!) { markPullRequestReadyForReview(input: { pullRequestId: $id }) { pullRequest { isDraft } } }`,
        { id: nodeId },
      );
      return { alreadyReady: false };
    } catch (error) {
      throw gitHubFailure(error, 'mark the pull request ready for review');
    }
  }

  async enableAutoMerge(nodeId: string, expectedHeadSha: string, mergeMethod: MergeMethod): Promise<AutoMergeOutcome> {
    try {
      await this.octokit.graphql(
        `mutation($id: ID!, $mergeMethod: PullRequestMergeMethod!, $head: GitObjectID!) {
           enablePullRequestAutoMerge(input: { pullRequestId: $id, mergeMethod: $mergeMethod, expectedHeadOid: $head }) { pullRequest { autoMergeRequest { enabledAt } } }
         }`,
        { id: nodeId, mergeMethod, head: expectedHeadSha },
      );
      return { outcome: 'ENABLED' };
    } catch (error) {
      const message = gitHubMessage(error);
      if (/is in clean status/i.test(message)) return { outcome: 'REFUSED', reason: 'CLEAN', message };
      if (/is in unstable status/i.test(message)) return { outcome: 'REFUSED', reason: 'UNSTABLE', message };
      if (/auto ?merge is not allowed/i.test(message)) return { outcome: 'REFUSED', reason: 'NOT_ALLOWED', message };
      if (isMergeMethodRefusal(message)) return { outcome: 'METHOD_NOT_ALLOWED', message };
      if (/not the expected head|expected head/i.test(message)) return { outcome: 'HEAD_MOVED', message };
      if (/auto ?merge is already enabled/i.test(message)) return { outcome: 'ALREADY_ENABLED', message };
      if (/is in draft status|is still a draft/i.test(message)) return { outcome: 'DRAFT', message };
      if (/is in dirty status/i.test(message)) return { outcome: 'CONFLICT', message };
      throw gitHubFailure(error, 'enable auto-merge');
    }
  }

  async disableAutoMerge(nodeId: string): Promise<DisableAutoMergeOutcome> {
    try {
      await this.octokit.graphql(`mutation($id: ID!) { disablePullRequestAutoMerge(input: { pullRequestId: $id }) { pullRequest { number } } }`, { id: nodeId });
      return { outcome: 'DISABLED' };
    } catch (error) {
      const message = gitHubMessage(error);
      if (/can't disable auto-merge/i.test(message)) return { outcome: 'NOT_ENABLED', message };
      throw gitHubFailure(error, 'disable auto-merge');
    }
  }

  /**
   * Read with GraphQL: its `…Allowed` fields are the repository's settings as any reader sees them, where REST's
   * `allow_squash_merge` and the like are left out of the answer for a token or App that may not administer it.
   */
  async allowedMergeMethods(repository: string): Promise<MergeMethod[]> {
    const { owner, repo } = split(repository);
    try {
      const { repository: r } = await this.octokit.graphql<{ repository: { mergeCommitAllowed: boolean; squashMergeAllowed: boolean; rebaseMergeAllowed: boolean } }>(
        `query($owner: String!, $name: String!) { repository(owner: $owner, name: $name) { mergeCommitAllowed squashMergeAllowed rebaseMergeAllowed } }`,
        { owner, name: repo },
      );
      return [...(r.mergeCommitAllowed ? ['MERGE' as const] : []), ...(r.squashMergeAllowed ? ['SQUASH' as const] : []), ...(r.rebaseMergeAllowed ? ['REBASE' as const] : [])];
    } catch (error) {
      throw gitHubFailure(error, `read the merge methods ${repository} allows`);
    }
  }

  async merge(repository: string, prNumber: number, sha: string, mergeMethod: MergeMethod): Promise<MergeOutcome> {
    const { owner, repo } = split(repository);
    try {
      const { data } = await this.octokit.rest.pulls.merge({
        owner,
        repo,
        pull_number: prNumber,
        sha,
        merge_method: mergeMethod.toLowerCase() as 'merge' | 'squash' | 'rebase',
      });
      return { outcome: 'MERGED', mergeCommitSha: data.sha };
    } catch (error) {
      // 409 "Head branch was modified": the head is not `sha` any more; the new head waits for its own checks. GitHub's
      // 405 "Base branch was modified": someone pushed to the base while it merged; the same head may be merged again.
      if (statusOf(error) === 409 || (statusOf(error) === 405 && /base branch was modified/i.test(gitHubMessage(error)))) {
        return { outcome: 'BRANCH_MOVED', message: gitHubMessage(error) };
      }
      if (statusOf(error) === 405 && isMergeMethodRefusal(gitHubMessage(error))) return { outcome: 'METHOD_NOT_ALLOWED', message: gitHubMessage(error) };
      throw gitHubFailure(error, `merge ${repository}#${prNumber}`);
    }
  }
}
