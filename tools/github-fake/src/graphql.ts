import { schema as githubSchema } from '@octokit/graphql-schema';
import {
  buildSchema,
  execute,
  GraphQLError,
  parse,
  validate,
  type DocumentNode,
  type GraphQLFieldResolver,
  type GraphQLSchema,
} from 'graphql';
import { GraphQLFailure } from './errors.js';
import type { FakeGitHub } from './fake-github.js';
import { gitHubTime, type MergeMethod, type PullRecord, type RepositoryRecord } from './model.js';
import { nodeId } from './render.js';

/*
 * POST /graphql, executed against GitHub's published schema (@octokit/graphql-schema): a document
 * GitHub would reject for its shape is rejected here too, and the answers have the schema's types.
 * Only the fields below are modelled; asking for another field of GitHub's schema is an error that
 * names it, never a silent null.
 */

let cachedSchema: GraphQLSchema | null = null;

/** GitHub's schema, built once (it is large: about a second of CPU). */
export function githubGraphQLSchema(): GraphQLSchema {
  cachedSchema ??= buildSchema(githubSchema.idl, { assumeValidSDL: true });
  return cachedSchema;
}

export interface GraphQLRequestBody {
  query?: unknown;
  variables?: unknown;
  operationName?: unknown;
}

export interface GraphQLResponse {
  data?: Record<string, unknown> | null;
  errors?: Record<string, unknown>[];
}

/** Decodes the fake's global ids (`PR_kwDO<base64 id>`). */
function decodeNodeId(id: string): { prefix: string; id: number } | null {
  const match = /^([A-Z]+)_kwDO([A-Za-z0-9_-]+)$/.exec(id);
  if (!match) return null;
  const value = Number(Buffer.from(match[2]!, 'base64url').toString('utf8'));
  return Number.isInteger(value) ? { prefix: match[1]!, id: value } : null;
}

/** A field of GitHub's schema that the fake does not model fails loudly. */
const strictFieldResolver: GraphQLFieldResolver<unknown, unknown> = (source, args, context, info) => {
  if (source === null || typeof source !== 'object' || !(info.fieldName in source)) {
    throw new GraphQLFailure('FAKE_NOT_MODELLED', `The GitHub fake does not model ${info.parentType.name}.${info.fieldName}`);
  }
  const value = (source as Record<string, unknown>)[info.fieldName];
  return typeof value === 'function' ? (value as (a: unknown, c: unknown) => unknown).call(source, args, context) : value;
};

export class GraphQLEndpoint {
  constructor(private readonly fake: FakeGitHub) {}

  /** Parses and validates (outside the state lock), then executes inside it. */
  async handle(body: GraphQLRequestBody, actor: string): Promise<GraphQLResponse> {
    if (typeof body.query !== 'string') return { errors: [{ message: 'A query attribute must be specified and must be a string.' }] };
    let document: DocumentNode;
    try {
      document = parse(body.query);
    } catch (error) {
      return { errors: [formatError(error as GraphQLError)] };
    }
    const schema = githubGraphQLSchema();
    const problems = validate(schema, document);
    if (problems.length > 0) return { errors: problems.map(formatError) };
    const variables = body.variables && typeof body.variables === 'object' ? (body.variables as Record<string, unknown>) : {};
    const operationName = typeof body.operationName === 'string' ? body.operationName : undefined;
    const result = await this.fake.run(async () =>
      execute({ schema, document, rootValue: this.root(actor), variableValues: variables, operationName, fieldResolver: strictFieldResolver }),
    );
    const response: GraphQLResponse = { data: (result.data as Record<string, unknown> | null | undefined) ?? null };
    if (result.errors?.length) response.errors = result.errors.map(formatError);
    return response;
  }

  private root(actor: string) {
    const fake = this.fake;
    const pullFromInput = (input: { pullRequestId?: string }): PullRecord => {
      const decoded = decodeNodeId(input.pullRequestId ?? '');
      const pull = decoded?.prefix === 'PR' ? fake.pullByNodeId(decoded.id) : undefined;
      if (!pull) throw new GraphQLFailure('NOT_FOUND', `Could not resolve to a node with the global id of '${input.pullRequestId}'`);
      return pull;
    };
    const payload = async (input: { clientMutationId?: string }, pull: PullRecord) => ({
      clientMutationId: input.clientMutationId ?? null,
      actor: this.actorView(actor),
      pullRequest: await this.pullView(pull),
    });
    return {
      viewer: this.actorView(actor),
      rateLimit: { limit: 5000, cost: 1, remaining: 4999, used: 1, resetAt: gitHubTime(Date.now() + 3_600_000), nodeCount: 1 },
      repository: (args: { owner: string; name: string }) => {
        const record = fake.findRepository(args.owner, args.name);
        if (!record) throw new GraphQLFailure('NOT_FOUND', `Could not resolve to a Repository with the name '${args.owner}/${args.name}'.`);
        return this.repositoryView(record);
      },
      node: (args: { id: string }) => {
        const decoded = decodeNodeId(args.id);
        if (decoded?.prefix === 'PR') {
          const pull = fake.pullByNodeId(decoded.id);
          if (pull) return this.pullView(pull);
        }
        if (decoded?.prefix === 'R') {
          const record = Object.values(fake.state.repositories).find((r) => r.id === decoded.id);
          if (record) return this.repositoryView(record);
        }
        throw new GraphQLFailure('NOT_FOUND', `Could not resolve to a node with the global id of '${args.id}'`);
      },
      markPullRequestReadyForReview: async (args: { input: { pullRequestId: string; clientMutationId?: string } }) =>
        payload(args.input, await fake.markReadyForReview(pullFromInput(args.input), actor)),
      convertPullRequestToDraft: async (args: { input: { pullRequestId: string; clientMutationId?: string } }) =>
        payload(args.input, await fake.convertToDraft(pullFromInput(args.input), actor)),
      enablePullRequestAutoMerge: async (args: {
        input: { pullRequestId: string; clientMutationId?: string; mergeMethod?: string; expectedHeadOid?: string; commitHeadline?: string; commitBody?: string; authorEmail?: string };
      }) => {
        const { input } = args;
        const pull = await fake.enableAutoMerge(
          pullFromInput(input),
          {
            mergeMethod: (input.mergeMethod ?? 'MERGE').toLowerCase() as MergeMethod,
            expectedHeadOid: input.expectedHeadOid,
            commitHeadline: input.commitHeadline,
            commitBody: input.commitBody,
            authorEmail: input.authorEmail,
          },
          actor,
        );
        return payload(input, pull);
      },
      disablePullRequestAutoMerge: async (args: { input: { pullRequestId: string; clientMutationId?: string } }) =>
        payload(args.input, await fake.disableAutoMerge(pullFromInput(args.input), actor)),
    };
  }

  private actorView(login: string) {
    return { __typename: 'User', login, url: `${this.fake.ctx.baseUrl}/${login}`, avatarUrl: `${this.fake.ctx.baseUrl}/avatars/${login}` };
  }

  private repositoryView(record: RepositoryRecord) {
    const fullName = `${record.owner}/${record.name}`;
    return {
      __typename: 'Repository',
      id: nodeId('R', record.id),
      name: record.name,
      nameWithOwner: fullName,
      url: `${this.fake.ctx.baseUrl}/${fullName}`,
      owner: { __typename: 'Organization', login: record.owner },
      autoMergeAllowed: record.settings.allowAutoMerge,
      mergeCommitAllowed: record.settings.allowMergeCommit,
      squashMergeAllowed: record.settings.allowSquashMerge,
      rebaseMergeAllowed: record.settings.allowRebaseMerge,
      deleteBranchOnMerge: record.settings.deleteBranchOnMerge,
      defaultBranchRef: { __typename: 'Ref', name: record.defaultBranch },
      pullRequests: (args: { headRefName?: string; baseRefName?: string; states?: string[]; first?: number; last?: number }) => {
        if (args.first === undefined && args.last === undefined) {
          throw new GraphQLFailure('MISSING_PAGINATION_BOUNDARIES', 'You must provide a `first` or `last` value to properly paginate the `pullRequests` connection.');
        }
        // Default order: by creation, oldest first (GitHub's CREATED_AT ASC); `orderBy` is not modelled.
        const matching = this.fake.state.pulls
          .filter((p) => p.repository === fullName)
          .filter((p) => args.headRefName === undefined || p.headRef === args.headRefName)
          .filter((p) => args.baseRefName === undefined || p.baseRef === args.baseRefName)
          .filter((p) => !args.states || args.states.includes(p.mergedAt ? 'MERGED' : p.state === 'open' ? 'OPEN' : 'CLOSED'))
          .sort((a, b) => a.number - b.number);
        const page = args.first !== undefined ? matching.slice(0, args.first) : matching.slice(Math.max(matching.length - (args.last ?? 0), 0));
        const cursor = (p: PullRecord) => Buffer.from(`cursor:${p.number}`).toString('base64');
        const nodes = page.map((p) => this.pullView(p));
        return {
          __typename: 'PullRequestConnection',
          totalCount: matching.length,
          nodes,
          edges: page.map((p, i) => ({ __typename: 'PullRequestEdge', cursor: cursor(p), node: nodes[i] })),
          pageInfo: {
            __typename: 'PageInfo',
            hasNextPage: args.first !== undefined && matching.length > page.length,
            hasPreviousPage: args.last !== undefined && matching.length > page.length,
            startCursor: page[0] ? cursor(page[0]) : null,
            endCursor: page.at(-1) ? cursor(page.at(-1)!) : null,
          },
        };
      },
      pullRequest: (args: { number: number }) => {
        const pull = this.fake.state.pulls.find((p) => p.repository === fullName && p.number === args.number);
        if (!pull) throw new GraphQLFailure('NOT_FOUND', `Could not resolve to a PullRequest with the number of ${args.number}.`);
        return this.pullView(pull);
      },
    };
  }

  private pullView(pull: PullRecord) {
    const record = this.fake.state.repositories[pull.repository]!;
    const mergeStatus = this.fake.mergeableState(pull);
    const computed = pull.state === 'open' && pull.mergeability.computed;
    return {
      __typename: 'PullRequest',
      id: nodeId('PR', pull.id),
      databaseId: pull.id,
      number: pull.number,
      title: pull.title,
      body: pull.body ?? '',
      url: `${this.fake.ctx.baseUrl}/${pull.repository}/pull/${pull.number}`,
      permalink: `${this.fake.ctx.baseUrl}/${pull.repository}/pull/${pull.number}`,
      state: pull.mergedAt ? 'MERGED' : pull.state === 'open' ? 'OPEN' : 'CLOSED',
      isDraft: pull.draft,
      merged: pull.mergedAt !== null,
      mergedAt: pull.mergedAt,
      closed: pull.state === 'closed',
      closedAt: pull.closedAt,
      createdAt: pull.createdAt,
      updatedAt: pull.updatedAt,
      headRefName: pull.headRef,
      headRefOid: pull.headSha,
      baseRefName: pull.baseRef,
      baseRefOid: pull.baseSha,
      // UNKNOWN while GitHub computes it, like REST's null.
      mergeable: computed ? (pull.mergeability.conflicts.length === 0 ? 'MERGEABLE' : 'CONFLICTING') : 'UNKNOWN',
      mergeStateStatus: mergeStatus.toUpperCase(),
      mergeCommit: pull.mergeCommitSha ? { __typename: 'Commit', oid: pull.mergeCommitSha } : null,
      autoMergeRequest: pull.autoMerge
        ? {
            __typename: 'AutoMergeRequest',
            enabledAt: pull.autoMerge.enabledAt,
            enabledBy: this.actorView(pull.autoMerge.enabledBy),
            mergeMethod: pull.autoMerge.mergeMethod.toUpperCase(),
            commitHeadline: pull.autoMerge.commitTitle,
            commitBody: pull.autoMerge.commitMessage,
            authorEmail: pull.autoMerge.authorEmail,
          }
        : null,
      repository: () => this.repositoryView(record),
    };
  }
}

/** GitHub's error entries: `type` for refusals (UNPROCESSABLE, NOT_FOUND, …), then path, locations, message. */
function formatError(error: GraphQLError): Record<string, unknown> {
  const original = error.originalError;
  const entry: Record<string, unknown> = {};
  if (original instanceof GraphQLFailure) entry.type = original.type;
  if (error.path) entry.path = error.path;
  if (error.locations) entry.locations = error.locations;
  entry.message = original instanceof GraphQLFailure ? original.message : error.message;
  return entry;
}
