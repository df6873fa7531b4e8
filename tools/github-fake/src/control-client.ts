import type { Fault, RequestLogEntry } from './http-server.js';
import type { CheckConclusion, CheckStatus, CommitState } from './model.js';
import type { DeliveryAttempt, DeliveryRule, DeliveryState, WebhookTarget } from './webhooks.js';

/*
 * The fake's control API as a typed client: what tests (and the start script) use to set the
 * world up and to look at what GitHub "did". It talks HTTP, so it works the same for a fake in the
 * test's process and for one running as its own process.
 */

export interface RepositorySummary {
  fullName: string;
  /** file:///…/<name>.git — push here. */
  cloneUrl: string;
  gitDir: string;
  defaultBranch: string;
  settings: {
    allowAutoMerge: boolean;
    allowMergeCommit: boolean;
    allowSquashMerge: boolean;
    allowRebaseMerge: boolean;
    deleteBranchOnMerge: boolean;
    allowDraftPullRequests: boolean;
  };
  protection: { requiredChecks: string[]; strict: boolean };
}

export interface CreateRepositoryRequest {
  owner: string;
  name: string;
  defaultBranch?: string;
  gitDir?: string;
  initialFiles?: Record<string, string>;
  settings?: Partial<RepositorySummary['settings']>;
  requiredChecks?: string[];
  strict?: boolean;
}

export interface DeliveryView {
  id: string;
  hookId: number;
  url: string;
  event: string;
  action: string | null;
  state: DeliveryState;
  createdAt: string;
  attempts: DeliveryAttempt[];
  payload: Record<string, any>;
}

/** A pull request as GitHub's REST API shows it (the fields tests look at most; the rest is there too). */
export interface PullView {
  number: number;
  state: 'open' | 'closed';
  draft: boolean;
  merged: boolean;
  mergeable: boolean | null;
  mergeable_state: string;
  merge_commit_sha: string | null;
  html_url: string;
  node_id: string;
  head: { ref: string; sha: string };
  base: { ref: string; sha: string };
  auto_merge: { merge_method: string } | null;
  [field: string]: unknown;
}

export class GitHubFakeControl {
  constructor(readonly baseUrl: string) {}

  private async call<T>(method: string, path: string, body?: unknown): Promise<T> {
    const response = await fetch(`${this.baseUrl}/_fake${path}`, {
      method,
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    const parsed = text ? (JSON.parse(text) as unknown) : undefined;
    if (!response.ok) throw new Error(`github-fake ${method} ${path}: ${response.status} ${text}`);
    return parsed as T;
  }

  private static repoPath(fullName: string): string {
    const [owner, name] = fullName.split('/');
    return `/repositories/${encodeURIComponent(owner!)}/${encodeURIComponent(name!)}`;
  }

  createRepository(request: CreateRepositoryRequest): Promise<RepositorySummary> {
    return this.call('POST', '/repositories', request);
  }

  repository(fullName: string): Promise<RepositorySummary> {
    return this.call('GET', GitHubFakeControl.repoPath(fullName));
  }

  updateRepository(fullName: string, update: Partial<RepositorySummary['settings']> & { requiredChecks?: string[]; strict?: boolean }): Promise<RepositorySummary> {
    return this.call('PATCH', GitHubFakeControl.repoPath(fullName), update);
  }

  /** A commit on `branch` made inside the fake: another user's push (e.g. a conflicting change on the base). */
  commit(fullName: string, input: { branch: string; files: Record<string, string | null>; message: string; from?: string; author?: string }): Promise<{ sha: string; branch: string }> {
    return this.call('POST', `${GitHubFakeControl.repoPath(fullName)}/commits`, input);
  }

  async branchSha(fullName: string, branch: string): Promise<string | null> {
    try {
      return (await this.call<{ sha: string }>('GET', `${GitHubFakeControl.repoPath(fullName)}/branches/${encodeURIComponent(branch)}`)).sha;
    } catch (error) {
      if (String(error).includes(': 404 ')) return null;
      throw error;
    }
  }

  /** Every pull request of the repository (open and closed), as REST's GET shows each. */
  pulls(fullName: string): Promise<PullView[]> {
    return this.call('GET', `${GitHubFakeControl.repoPath(fullName)}/pulls`);
  }

  /** A review by someone (its `pull_request_review.submitted` webhook; reviews do not gate merges here). */
  submitReview(fullName: string, number: number, review: { state?: 'APPROVED' | 'CHANGES_REQUESTED' | 'COMMENTED'; body?: string; user?: string } = {}): Promise<{ id: number }> {
    return this.call('POST', `${GitHubFakeControl.repoPath(fullName)}/pulls/${number}/reviews`, review);
  }

  /** Looks at every repository's branches now (pushes are otherwise noticed within refPollMs). */
  refresh(): Promise<void> {
    return this.call('POST', '/refresh');
  }

  /** `manual`: mergeability stays null (UNKNOWN) until computeMergeability(). */
  setMergeabilityMode(mode: 'auto' | 'manual'): Promise<void> {
    return this.call('PUT', '/mergeability', { mode });
  }

  computeMergeability(): Promise<void> {
    return this.call('POST', '/mergeability/compute');
  }

  /**
   * Holds GitHub's clock at the current second: every change until releaseClock() shows that second (GitHub's times are
   * to the second, so two changes in one second have the same `updated_at`). Returns the held time.
   */
  async holdClock(): Promise<string> {
    return (await this.call<{ now: string }>('PUT', '/clock', { held: true })).now;
  }

  releaseClock(): Promise<void> {
    return this.call('PUT', '/clock', { held: false });
  }

  /** What CI does: a check run (completed when a conclusion is given). Returns its id. */
  async setCheck(fullName: string, input: { sha: string; name: string; status?: CheckStatus; conclusion?: CheckConclusion }): Promise<number> {
    const run = await this.call<{ id: number }>('POST', `${GitHubFakeControl.repoPath(fullName)}/check-runs`, {
      name: input.name,
      head_sha: input.sha,
      status: input.status,
      conclusion: input.conclusion,
    });
    return run.id;
  }

  async updateCheck(fullName: string, id: number, input: { status?: CheckStatus; conclusion?: CheckConclusion }): Promise<void> {
    await this.call('PATCH', `${GitHubFakeControl.repoPath(fullName)}/check-runs/${id}`, input);
  }

  async setStatus(fullName: string, input: { sha: string; context: string; state: CommitState; description?: string }): Promise<void> {
    await this.call('POST', `${GitHubFakeControl.repoPath(fullName)}/statuses/${input.sha}`, { state: input.state, context: input.context, description: input.description });
  }

  /** Checks reported by themselves on every new PR head (name, conclusion default success, delayMs default 200). */
  setAutoChecks(checks: { name: string; conclusion?: CheckConclusion; delayMs?: number }[]): Promise<void> {
    return this.call('PUT', '/auto-checks', { checks });
  }

  deliveries(filter: { event?: string; action?: string } = {}): Promise<DeliveryView[]> {
    const query = new URLSearchParams(Object.entries(filter).filter((e): e is [string, string] => typeof e[1] === 'string'));
    return this.call('GET', `/deliveries${query.size ? `?${query}` : ''}`);
  }

  /** Polls the deliveries until one matches (the fake sends them asynchronously, as GitHub does). */
  async waitForDelivery(predicate: (delivery: DeliveryView) => boolean, options: { timeoutMs?: number; intervalMs?: number } = {}): Promise<DeliveryView> {
    const deadline = Date.now() + (options.timeoutMs ?? 30_000);
    for (;;) {
      const found = (await this.deliveries()).find(predicate);
      if (found) return found;
      if (Date.now() > deadline) throw new Error('no matching webhook delivery');
      await new Promise((resolve) => setTimeout(resolve, options.intervalMs ?? 50));
    }
  }

  holdDeliveries(): Promise<void> {
    return this.call('POST', '/deliveries/hold');
  }

  /** Sends the held deliveries: those named in `order` first, in that order, then the rest. */
  releaseDeliveries(options: { order?: string[] } = {}): Promise<void> {
    return this.call('POST', '/deliveries/release', options);
  }

  redeliver(id: string): Promise<DeliveryView> {
    return this.call('POST', `/deliveries/${encodeURIComponent(id)}/redeliver`);
  }

  dropDelivery(id: string): Promise<DeliveryView> {
    return this.call('POST', `/deliveries/${encodeURIComponent(id)}/drop`);
  }

  onNextDeliveries(rule: DeliveryRule): Promise<void> {
    return this.call('POST', '/deliveries/rules', rule);
  }

  setWebhooks(webhooks: WebhookTarget[]): Promise<void> {
    return this.call('PUT', '/webhooks', { webhooks });
  }

  injectFault(fault: Fault): Promise<void> {
    return this.call('POST', '/faults', fault);
  }

  clearFaults(): Promise<void> {
    return this.call('DELETE', '/faults');
  }

  async requests(filter: { method?: string; path?: string; graphqlField?: string } = {}): Promise<RequestLogEntry[]> {
    const all = await this.call<RequestLogEntry[]>('GET', '/requests');
    return all.filter(
      (r) =>
        (!filter.method || r.method === filter.method.toUpperCase()) &&
        (!filter.path || r.path.includes(filter.path)) &&
        (!filter.graphqlField || r.graphqlFields.includes(filter.graphqlField)),
    );
  }

  setTokens(tokens: string[] | null): Promise<void> {
    return this.call('PUT', '/tokens', { tokens });
  }
}
