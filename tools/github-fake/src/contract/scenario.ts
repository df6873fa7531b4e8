import type { GitHubFake, DeliveryView } from '../index.js';
import { Clone, octokitFor } from '../testing/harness.js';

/*
 * One pass through everything the fake answers in a pull request's life, recording each REST
 * exchange (operation template, status, body), each GraphQL document with its answer, and every
 * webhook the fake sent, so the contract tests can hold each against GitHub's descriptions.
 */

export interface RestExchange {
  method: string;
  /** Octokit's route template, e.g. /repos/{owner}/{repo}/pulls/{pull_number}. */
  route: string;
  status: number;
  body: unknown;
}

export interface GraphQLExchange {
  document: string;
  variables: Record<string, unknown>;
  data: unknown;
  errors: { type?: string; message: string; path?: unknown; locations?: unknown }[] | null;
}

export interface ScenarioRecord {
  rest: RestExchange[];
  graphql: GraphQLExchange[];
  deliveries: DeliveryView[];
}

export const PULL_QUERY = `query PullState($owner: String!, $name: String!, $number: Int!) {
  repository(owner: $owner, name: $name) {
    __typename id nameWithOwner autoMergeAllowed
    pullRequest(number: $number) {
      __typename id number url title state isDraft merged mergedAt closed
      headRefName headRefOid baseRefName baseRefOid mergeable mergeStateStatus
      mergeCommit { oid }
      autoMergeRequest { enabledAt mergeMethod commitHeadline commitBody authorEmail enabledBy { __typename login } }
    }
  }
}`;

export const NODE_QUERY = `query PullByNode($id: ID!) {
  node(id: $id) { __typename id ... on PullRequest { number isDraft headRefOid mergeStateStatus } }
}`;

export const PULLS_BY_BRANCH = `query PullsByBranch($owner: String!, $name: String!, $branch: String!) {
  repository(owner: $owner, name: $name) {
    pullRequests(headRefName: $branch, states: [OPEN, MERGED], first: 5) {
      totalCount
      nodes { id number state headRefOid }
      edges { cursor node { number } }
      pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
    }
  }
}`;

export const READY_MUTATION = `mutation Ready($id: ID!) {
  markPullRequestReadyForReview(input: { pullRequestId: $id, clientMutationId: "ready-1" }) {
    clientMutationId pullRequest { id isDraft }
  }
}`;

export const DRAFT_MUTATION = `mutation Draft($id: ID!) {
  convertPullRequestToDraft(input: { pullRequestId: $id }) { pullRequest { id isDraft } }
}`;

export const ENABLE_AUTO_MERGE = `mutation EnableAutoMerge($id: ID!, $oid: GitObjectID!) {
  enablePullRequestAutoMerge(input: { pullRequestId: $id, mergeMethod: SQUASH, expectedHeadOid: $oid }) {
    clientMutationId actor { __typename login }
    pullRequest { id autoMergeRequest { mergeMethod enabledAt enabledBy { __typename login } } }
  }
}`;

export const DISABLE_AUTO_MERGE = `mutation DisableAutoMerge($id: ID!) {
  disablePullRequestAutoMerge(input: { pullRequestId: $id }) { pullRequest { id autoMergeRequest { mergeMethod } } }
}`;

export async function runScenario(fake: GitHubFake, owner: string, name: string): Promise<ScenarioRecord> {
  const record: ScenarioRecord = { rest: [], graphql: [], deliveries: [] };
  const { octokit } = octokitFor(fake);
  octokit.hook.after('request', (response, options) => {
    record.rest.push({ method: options.method, route: String(options.url), status: response.status, body: response.data });
  });
  octokit.hook.error('request', (error, options) => {
    const failure = error as { status?: number; response?: { data: unknown } };
    record.rest.push({ method: options.method, route: String(options.url), status: failure.status ?? 0, body: failure.response?.data });
    throw error;
  });
  const graphql = async (document: string, variables: Record<string, unknown>) => {
    const response = await fetch(`${fake.url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'token scenario' },
      body: JSON.stringify({ query: document, variables }),
    });
    const body = (await response.json()) as { data?: unknown; errors?: GraphQLExchange['errors'] };
    record.graphql.push({ document, variables, data: body.data ?? null, errors: body.errors ?? null });
    return body;
  };
  const ignore = () => undefined;

  const repo = await fake.control.createRepository({ owner, name, initialFiles: { 'app.txt': 'one\ntwo\nthree\n' } });
  await fake.control.setMergeabilityMode('manual');
  const clone = new Clone(repo.cloneUrl);
  try {
    await octokit.rest.repos.get({ owner, repo: name });
    await octokit.rest.repos.get({ owner, repo: `${name}-missing` }).catch(ignore);

    // A story PR: opened, mergeability unknown then computed, a push, checks, statuses, merged.
    const head1 = clone.commitAndPush('story/one', { 'one.txt': '1\n' }, 'Story one');
    await fake.control.refresh();
    const pr1 = (await octokit.rest.pulls.create({ owner, repo: name, head: 'story/one', base: 'main', title: 'Story one', body: 'The first story' })).data;
    await octokit.rest.pulls.create({ owner, repo: name, head: 'story/one', base: 'main', title: 'again' }).catch(ignore);
    await octokit.rest.pulls.create({ owner, repo: name, head: 'no-such-branch', base: 'main', title: 'nope' }).catch(ignore);
    // A repository without drafts refuses one (422 without `errors`).
    await fake.control.updateRepository(repo.fullName, { allowDraftPullRequests: false });
    await octokit.rest.pulls.create({ owner, repo: name, head: 'story/one', base: 'main', title: 'a draft', draft: true }).catch(ignore);
    await fake.control.updateRepository(repo.fullName, { allowDraftPullRequests: true });
    await octokit.rest.pulls.get({ owner, repo: name, pull_number: pr1.number });
    await fake.control.computeMergeability();
    await octokit.rest.pulls.get({ owner, repo: name, pull_number: pr1.number });
    await octokit.rest.pulls.get({ owner, repo: name, pull_number: 999 }).catch(ignore);
    await octokit.rest.pulls.list({ owner, repo: name, head: `${owner}:story/one`, state: 'open' });
    await octokit.rest.pulls.update({ owner, repo: name, pull_number: pr1.number, title: 'Story one, renamed', body: 'edited' });
    await fake.control.submitReview(repo.fullName, pr1.number, { state: 'APPROVED', body: 'Looks good' });
    await graphql(PULL_QUERY, { owner, name, number: pr1.number });
    await graphql(NODE_QUERY, { id: pr1.node_id });
    await graphql(PULLS_BY_BRANCH, { owner, name, branch: 'story/one' });

    const head2 = clone.commitAndPush('story/one', { 'two.txt': '2\n' }, 'Story one, second task');
    await fake.control.refresh();
    const run = (await octokit.rest.checks.create({ owner, repo: name, name: 'ci', head_sha: head2, status: 'in_progress' })).data;
    await octokit.rest.checks.get({ owner, repo: name, check_run_id: run.id });
    await octokit.rest.checks.listForRef({ owner, repo: name, ref: head2 });
    await octokit.rest.checks.update({ owner, repo: name, check_run_id: run.id, conclusion: 'success', output: { title: 'green', summary: 'all passed' } });
    await octokit.rest.repos.getCombinedStatusForRef({ owner, repo: name, ref: head2 });
    await octokit.rest.repos.createCommitStatus({ owner, repo: name, sha: head2, state: 'pending', context: 'lint' });
    await octokit.rest.repos.createCommitStatus({ owner, repo: name, sha: head2, state: 'success', context: 'lint', description: 'ok', target_url: 'https://ci.example/1' });
    await octokit.rest.repos.getCombinedStatusForRef({ owner, repo: name, ref: 'story/one' });
    await octokit.rest.checks.listForRef({ owner, repo: name, ref: 'story/one', filter: 'all' });
    await octokit.rest.pulls.merge({ owner, repo: name, pull_number: pr1.number, sha: head1 }).catch(ignore); // 409
    await octokit.rest.pulls.merge({ owner, repo: name, pull_number: pr1.number, sha: head2, merge_method: 'merge' });
    await octokit.rest.pulls.get({ owner, repo: name, pull_number: pr1.number });
    await octokit.rest.pulls.merge({ owner, repo: name, pull_number: pr1.number }).catch(ignore); // 405: merged already
    await octokit.rest.pulls.list({ owner, repo: name, state: 'all' });
    await graphql(PULLS_BY_BRANCH, { owner, name, branch: 'story/one' });

    // A sprint PR: a draft, ready for review, back to draft and ready again; closed and reopened.
    clone.commitAndPush('sprint/one', { 'sprint.txt': 's\n' }, 'Sprint work');
    await fake.control.refresh();
    const pr2 = (await octokit.rest.pulls.create({ owner, repo: name, head: 'sprint/one', base: 'main', title: 'Sprint one', draft: true })).data;
    await octokit.rest.pulls.merge({ owner, repo: name, pull_number: pr2.number }).catch(ignore); // 405 draft
    await graphql(READY_MUTATION, { id: pr2.node_id });
    await graphql(READY_MUTATION, { id: pr2.node_id });
    await graphql(DRAFT_MUTATION, { id: pr2.node_id });
    await graphql(READY_MUTATION, { id: pr2.node_id });
    await octokit.rest.pulls.update({ owner, repo: name, pull_number: pr2.number, state: 'closed' });
    await octokit.rest.pulls.update({ owner, repo: name, pull_number: pr2.number, state: 'open' });

    // Auto-merge: refused while clean, enabled while blocked, disabled, enabled again, fired by a green check.
    const head3 = clone.commitAndPush('story/two', { 'three.txt': '3\n' }, 'Story two');
    await fake.control.refresh();
    const pr3 = (await octokit.rest.pulls.create({ owner, repo: name, head: 'story/two', base: 'main', title: 'Story two' })).data;
    await fake.control.computeMergeability();
    await graphql(ENABLE_AUTO_MERGE, { id: pr3.node_id, oid: head3 }); // not allowed
    await fake.control.updateRepository(repo.fullName, { allowAutoMerge: true });
    await graphql(ENABLE_AUTO_MERGE, { id: pr3.node_id, oid: head3 }); // clean
    await fake.control.updateRepository(repo.fullName, { requiredChecks: ['ci'] });
    await graphql(ENABLE_AUTO_MERGE, { id: pr3.node_id, oid: head3 });
    await octokit.rest.pulls.get({ owner, repo: name, pull_number: pr3.number });
    await graphql(DISABLE_AUTO_MERGE, { id: pr3.node_id });
    await graphql(ENABLE_AUTO_MERGE, { id: pr3.node_id, oid: head3 });
    await octokit.rest.checks.create({ owner, repo: name, name: 'ci', head_sha: head3, status: 'completed', conclusion: 'success' });
    await graphql(PULL_QUERY, { owner, name, number: pr3.number });
    await octokit.rest.pulls.get({ owner, repo: name, pull_number: pr3.number });

    // A conflict: dirty, refused.
    clone.commitAndPush('story/three', { 'app.txt': 'one\nTWO\nthree\n' }, 'Story three');
    await fake.control.refresh();
    const pr4 = (await octokit.rest.pulls.create({ owner, repo: name, head: 'story/three', base: 'main', title: 'Story three' })).data;
    await fake.control.commit(repo.fullName, { branch: 'main', files: { 'app.txt': 'one\n2\nthree\n' }, message: 'Conflicting change' });
    await fake.control.computeMergeability();
    await octokit.rest.pulls.get({ owner, repo: name, pull_number: pr4.number });
    await octokit.rest.pulls.merge({ owner, repo: name, pull_number: pr4.number }).catch(ignore); // 405 conflict
    await graphql(PULL_QUERY, { owner, name, number: pr4.number });
    await graphql(PULL_QUERY, { owner, name, number: 999 });

    clone.git('push', '-q', 'origin', '--delete', 'story/three');
    await fake.control.refresh();
    clone.git('push', '-q', '--force', 'origin', `${head1}:refs/heads/story/two`);
    await fake.control.refresh();

    await fake.control.setMergeabilityMode('auto');
    record.deliveries = (await fake.control.deliveries()).filter((d) => d.payload.repository?.full_name === repo.fullName);
    return record;
  } finally {
    clone.remove();
  }
}
